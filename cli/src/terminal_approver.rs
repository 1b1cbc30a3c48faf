//! Asking the person at the terminal about a call of an `approval: ask` tool, for a one-shot
//! `run-command` whose stdin is a terminal: the question goes to stderr (stdout carries the
//! run's output), the answer is one line of stdin. The end of input cancels.

use std::io::{BufRead, Read, Write};

use reel_engine::{ApprovalOption, ApprovalRequest, Approver};

/// The longest answer line read (an answer is a letter or a word).
const MAX_ANSWER: u64 = 1024;

/// The person at this process's terminal.
pub struct TerminalApprover;

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn ask(&self, request: ApprovalRequest<'_>) -> Option<ApprovalOption> {
        let question = format!(
            "reel: {} wants to run with {}\n  allow [o]nce, allow [a]lways, or [r]eject? ",
            request.tool_name, request.arguments
        );
        // Reading a terminal blocks: it gets a thread of its own, and a cancelled run leaves it.
        tokio::task::spawn_blocking(move || ask_blocking(&question))
            .await
            .ok()
            .flatten()
    }
}

fn ask_blocking(question: &str) -> Option<ApprovalOption> {
    let mut stderr = std::io::stderr().lock();
    let mut stdin = std::io::stdin().lock();
    loop {
        write!(stderr, "{question}").ok()?;
        stderr.flush().ok()?;
        let mut line = String::new();
        if (&mut stdin).take(MAX_ANSWER).read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(option) = answer_of(&line) {
            return Some(option);
        }
        writeln!(stderr, "reel: answer o, a or r").ok()?;
    }
}

/// The option an answer line names, if it names one.
fn answer_of(line: &str) -> Option<ApprovalOption> {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Some(ApprovalOption::AllowOnce),
        "a" | "always" => Some(ApprovalOption::AllowAlways),
        "r" | "reject" | "n" | "no" => Some(ApprovalOption::RejectOnce),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_name_the_options_and_anything_else_asks_again() {
        assert_eq!(answer_of("o\n"), Some(ApprovalOption::AllowOnce));
        assert_eq!(answer_of(" Always "), Some(ApprovalOption::AllowAlways));
        assert_eq!(answer_of("r"), Some(ApprovalOption::RejectOnce));
        assert_eq!(answer_of("maybe"), None);
        assert_eq!(answer_of(""), None);
    }
}
