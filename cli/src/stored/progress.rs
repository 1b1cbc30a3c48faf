//! Progress bars for long operations, on stderr when it is a terminal and nowhere otherwise
//! (logs and pipes stay clean).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar counting `total` events.
pub fn events(total: u64, what: &str) -> ProgressBar {
    bar(
        total,
        what,
        "{msg} {bar:40} {pos}/{len} events ({per_sec}, {eta})",
    )
}

/// A bar counting `total` bytes.
pub fn bytes(total: u64, what: &str) -> ProgressBar {
    bar(
        total,
        what,
        "{msg} {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
}

fn bar(total: u64, what: &str, template: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style =
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(total)
        .with_style(style)
        .with_message(what.to_owned())
}
