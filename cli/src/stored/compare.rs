//! Two turns compared field by field: what differs, with both values and, for texts, a
//! word-level diff (the `similar` crate's, bounded in time for long texts).

use std::time::Duration;

use serde::Serialize;
use similar::{Algorithm, ChangeTag, TextDiff};

use super::turns::Turn;

/// The most time one text's word diff may take: past it, the diff is coarser, not slower.
const DIFF_DEADLINE: Duration = Duration::from_millis(200);

/// One field of a turn that differs.
#[derive(Debug, Serialize)]
pub struct Difference {
    /// `prompt`, `text`, `tool call N`, `tool result N`, `status`, `usage`.
    pub field: String,
    pub a: String,
    pub b: String,
    /// For texts: the word diff, as runs of equal, removed and added text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<WordRun>,
}

/// A run of words of a word diff.
#[derive(Debug, Serialize)]
pub struct WordRun {
    /// `equal`, `removed` or `added`.
    pub op: &'static str,
    pub text: String,
}

/// What differs between `a` and `b`, the same turn of two sessions.
pub fn differences(a: &Turn, b: &Turn) -> Vec<Difference> {
    let mut found = Vec::new();
    for (field, left, right) in [("prompt", &a.prompt, &b.prompt), ("text", &a.text, &b.text)] {
        if left != right {
            found.push(Difference {
                field: field.to_owned(),
                a: left.clone(),
                b: right.clone(),
                words: word_diff(left, right),
            });
        }
    }
    let calls = a.tool_calls.len().max(b.tool_calls.len());
    for at in 0..calls {
        let show = |call: Option<&(String, String)>| {
            call.map(|(name, arguments)| format!("{name} {arguments}"))
                .unwrap_or_else(|| "(none)".to_owned())
        };
        let (left, right) = (show(a.tool_calls.get(at)), show(b.tool_calls.get(at)));
        if left != right {
            found.push(plain(format!("tool call {}", at + 1), left, right));
        }
    }
    let results = a.tool_results.len().max(b.tool_results.len());
    for at in 0..results {
        let show = |result: Option<&(String, String, bool)>| {
            result
                .map(|(name, text, error)| {
                    format!("{name}{}: {text}", if *error { " (error)" } else { "" })
                })
                .unwrap_or_else(|| "(none)".to_owned())
        };
        let (left, right) = (show(a.tool_results.get(at)), show(b.tool_results.get(at)));
        if left != right {
            found.push(plain(format!("tool result {}", at + 1), left, right));
        }
    }
    if a.status != b.status {
        found.push(plain(
            "status".to_owned(),
            a.status.clone(),
            b.status.clone(),
        ));
    }
    let (left, right) = (usage(a), usage(b));
    if left != right {
        found.push(plain("usage".to_owned(), left, right));
    }
    found
}

fn plain(field: String, a: String, b: String) -> Difference {
    Difference {
        field,
        a,
        b,
        words: Vec::new(),
    }
}

/// A turn's usage as one line: tokens in and out, and the cost.
fn usage(turn: &Turn) -> String {
    let usage = &turn.usage;
    format!(
        "{} input tokens, {} output tokens, ${:.6}",
        usage.input_tokens, usage.output_tokens, usage.cost_usd
    )
}

/// The word diff of two texts, as runs.
fn word_diff(a: &str, b: &str) -> Vec<WordRun> {
    let diff = TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .timeout(DIFF_DEADLINE)
        .diff_words(a, b);
    let mut runs: Vec<WordRun> = Vec::new();
    for change in diff.iter_all_changes() {
        let op = match change.tag() {
            ChangeTag::Equal => "equal",
            ChangeTag::Delete => "removed",
            ChangeTag::Insert => "added",
        };
        match runs.last_mut() {
            Some(last) if last.op == op => last.text.push_str(change.value()),
            _ => runs.push(WordRun {
                op,
                text: change.value().to_owned(),
            }),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(text: &str) -> Turn {
        Turn {
            prompt: "Weather?".into(),
            text: text.into(),
            tool_calls: vec![("weather".into(), r#"{"city":"Paris"}"#.into())],
            status: "finished".into(),
            ..Turn::default()
        }
    }

    #[test]
    fn equal_turns_have_no_difference() {
        assert!(differences(&turn("It is sunny."), &turn("It is sunny.")).is_empty());
    }

    #[test]
    fn a_changed_word_is_shown_as_removed_and_added() {
        let found = differences(&turn("It is sunny today."), &turn("It is rainy today."));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].field, "text");
        let ops: Vec<(&str, &str)> = found[0]
            .words
            .iter()
            .map(|run| (run.op, run.text.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("equal", "It is "),
                ("removed", "sunny"),
                ("added", "rainy"),
                ("equal", " today.")
            ]
        );
    }

    #[test]
    fn a_missing_tool_call_and_another_status_are_differences() {
        let mut other = turn("It is sunny.");
        other.tool_calls.clear();
        other.status = "failed".into();
        let found = differences(&turn("It is sunny."), &other);
        let fields: Vec<&str> = found.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, ["tool call 1", "status"]);
        assert_eq!(found[0].b, "(none)");
    }
}
