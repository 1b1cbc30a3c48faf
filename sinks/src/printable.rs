//! Text from a session made safe for a terminal: control characters (escape sequences above
//! all) and the Unicode bidirectional controls (which reorder what a line appears to say, as in
//! "Trojan Source") are shown as `\u{..}` instead of acting. Newlines and tabs stay.

/// Whether `c` changes the direction of the text around it.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with control and bidi characters made visible and harmless; newlines and tabs stay.
pub fn printable(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' => shown.push(c),
            c if c.is_control() || is_bidi_control(c) => {
                shown.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => shown.push(c),
        }
    }
    shown
}

/// `text` on one line (control characters and line breaks as spaces, bidi controls visible),
/// cut to `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = printable(&flat);
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_direction_changes_are_shown_not_obeyed() {
        assert_eq!(printable("a\x1b[31mb\n\tc"), "a\\u{1b}[31mb\n\tc");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(printable("\u{2067}x\u{2069}"), "\\u{2067}x\\u{2069}");
        assert_eq!(one_line("a\nb\u{202e}c", 80), "a b\\u{202e}c");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
