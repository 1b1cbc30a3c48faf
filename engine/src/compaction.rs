//! Compaction: keeping a long conversation inside the model's context window.
//!
//! Before each reply call of a run, the session estimates the call's input tokens. When the
//! estimate passes `compact_at` of the window, a summarization call (through the same provider,
//! recorded like any model call) summarizes every turn but the newest ones, and a
//! `ChatContextCompacted` event records the summary and the ordinal range it replaces. The
//! model context projection folds that event, so replay and resume give the same context
//! without calling the model. The timeline keeps every message.
//!
//! The estimate: the input and output tokens the provider reported for the last reply call,
//! plus about one token per four characters of every message added since, plus four per
//! message. Without a report (a provider that sends no usage, or right after a compaction)
//! every message and the system prompt are estimated that way.

use std::sync::Arc;

use crate::context::{ContextMessage, ContextRole, Conversation};

/// When to compact, from the command file's `context:` section and `--context-window`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextPolicy {
    /// The model's context window in tokens; without it reel never compacts on its own.
    #[serde(default)]
    pub window_tokens: Option<u64>,
    /// The fraction of the window past which a call's input is compacted first.
    #[serde(default = "default_compact_at")]
    pub compact_at: f64,
    /// Turns before the current one that stay word for word.
    #[serde(default = "default_keep_recent_turns")]
    pub keep_recent_turns: u32,
    /// Extra instructions for the summary.
    #[serde(default)]
    pub instructions: Option<String>,
}

fn default_compact_at() -> f64 {
    0.8
}

fn default_keep_recent_turns() -> u32 {
    2
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            window_tokens: None,
            compact_at: default_compact_at(),
            keep_recent_turns: default_keep_recent_turns(),
            instructions: None,
        }
    }
}

/// Why a command file's `context` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("context.compact_at is {0}; it is a fraction of the window, above 0 and at most 1")]
    CompactAt(f64),
    #[error("context.window_tokens must be at least 1")]
    EmptyWindow,
}

impl ContextPolicy {
    /// Checks the values a person wrote.
    pub fn check(&self) -> Result<(), PolicyError> {
        if !(self.compact_at > 0.0 && self.compact_at <= 1.0) {
            return Err(PolicyError::CompactAt(self.compact_at));
        }
        if self.window_tokens == Some(0) {
            return Err(PolicyError::EmptyWindow);
        }
        Ok(())
    }

    /// The estimate past which a call is compacted first.
    pub fn threshold(&self) -> Option<u64> {
        self.window_tokens
            .map(|window| (window as f64 * self.compact_at) as u64)
    }
}

/// The instructions every summarization call is given.
pub const SUMMARY_INSTRUCTIONS: &str = "Summarize the conversation above so that it can \
     replace it: keep every fact, decision, name, number, open question and unfinished task the \
     rest of the conversation may need; leave out pleasantries. Answer with the summary only.";

/// Token estimates (see the module's doc).
pub mod estimate {
    use super::*;

    /// About one token per four characters.
    pub fn text(text: &str) -> u64 {
        (text.chars().count() as u64).div_ceil(4)
    }

    /// One message: its text, reasoning and tool calls, and four for its framing.
    pub fn message(message: &ContextMessage) -> u64 {
        let reasoning: u64 = message.reasoning.iter().map(|r| text(&r.text)).sum();
        let calls: u64 = message
            .tool_calls
            .iter()
            .map(|c| text(&c.name) + text(&c.arguments))
            .sum();
        4 + text(&message.text) + reasoning + calls
    }

    pub fn messages<'a>(messages: impl Iterator<Item = &'a Arc<ContextMessage>>) -> u64 {
        messages.map(|m| message(m)).sum()
    }
}

/// What a compaction would replace: `messages[..kept_from]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub kept_from: usize,
    pub first_ordinal: u64,
    pub last_ordinal: u64,
}

/// Where to cut `messages` so that the newest `keep` turns (and, `in_run`, the turn in
/// progress) stay: `None` when there is nothing before them to summarize, or only an earlier
/// summary.
pub fn cut(messages: &Conversation, keep: u32, in_run: bool) -> Option<Cut> {
    let mut starts_to_keep = keep as usize + usize::from(in_run);
    let mut kept_from = messages.len();
    if starts_to_keep > 0 {
        kept_from = 0;
        for (at, message) in messages.iter().enumerate().rev() {
            if message.starts_turn {
                starts_to_keep -= 1;
                if starts_to_keep == 0 {
                    kept_from = at;
                    break;
                }
            }
        }
    }
    let replaced = messages.iter().take(kept_from);
    let fresh = replaced
        .clone()
        .any(|m| m.starts_turn || m.role != ContextRole::User);
    if kept_from == 0 || !fresh {
        return None;
    }
    let first_ordinal = messages.front().map_or(0, |m| m.ordinal);
    let last_ordinal = match messages.get(kept_from) {
        Some(first_kept) => first_kept.ordinal.saturating_sub(1),
        None => messages.back().map_or(0, |m| m.ordinal),
    };
    Some(Cut {
        kept_from,
        first_ordinal,
        last_ordinal,
    })
}

/// The conversation a summarization call is given: the replaced messages and a user message
/// asking for the summary.
pub fn summary_request(messages: &Conversation, cut: &Cut, instructions: &str) -> Conversation {
    let mut request = messages.clone().slice(..cut.kept_from);
    let mut ask = SUMMARY_INSTRUCTIONS.to_owned();
    if !instructions.trim().is_empty() {
        ask.push_str("\n\n");
        ask.push_str(instructions.trim());
    }
    request.push_back(Arc::new(ContextMessage::new(ContextRole::User, ask)));
    request
}

/// How many messages a plain summary quotes at each end.
const PLAIN_SUMMARY_ENDS: usize = 3;

/// A summary made without a model (the scripted provider's, when its script gives none): it
/// says how many messages it covers and quotes the start of the first and last few, so it stays
/// small however much it covers.
pub fn plain_summary(messages: &[Arc<ContextMessage>]) -> String {
    let mut lines = vec![format!("{} earlier messages:", messages.len())];
    let quoted = |message: &ContextMessage| {
        let role = match message.role {
            ContextRole::User => "user",
            ContextRole::Assistant => "assistant",
            ContextRole::Tool => "tool",
        };
        let words: Vec<&str> = message.text.split_whitespace().take(12).collect();
        let mut line = format!("- {role}: {}", words.join(" "));
        if message.text.split_whitespace().nth(12).is_some() {
            line.push_str(" ...");
        }
        line
    };
    if messages.len() <= 2 * PLAIN_SUMMARY_ENDS {
        lines.extend(messages.iter().map(|m| quoted(m)));
    } else {
        let (first, rest) = messages.split_at(PLAIN_SUMMARY_ENDS);
        let last = &rest[rest.len() - PLAIN_SUMMARY_ENDS..];
        lines.extend(first.iter().map(|m| quoted(m)));
        lines.push(format!(
            "- ({} more)",
            messages.len() - 2 * PLAIN_SUMMARY_ENDS
        ));
        lines.extend(last.iter().map(|m| quoted(m)));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(
        role: ContextRole,
        text: &str,
        ordinal: u64,
        starts_turn: bool,
    ) -> Arc<ContextMessage> {
        let mut message = ContextMessage::new(role, text.into()).at(ordinal);
        message.starts_turn = starts_turn;
        Arc::new(message)
    }

    fn turns(n: u64) -> Conversation {
        let mut messages = Conversation::new();
        for turn in 0..n {
            messages.push_back(message(ContextRole::User, "q", turn * 10 + 1, true));
            messages.push_back(message(ContextRole::Assistant, "a", turn * 10 + 5, false));
        }
        messages
    }

    #[test]
    fn the_cut_keeps_the_newest_turns_and_the_one_in_progress() {
        let messages = turns(4);
        let idle = cut(&messages, 1, false).unwrap();
        assert_eq!(idle.kept_from, 6);
        assert_eq!((idle.first_ordinal, idle.last_ordinal), (1, 30));
        let running = cut(&messages, 1, true).unwrap();
        assert_eq!(running.kept_from, 4);
        assert_eq!(running.last_ordinal, 20);
        assert_eq!(cut(&messages, 3, true), None);
        let all = cut(&messages, 0, false).unwrap();
        assert_eq!((all.kept_from, all.last_ordinal), (8, 35));
    }

    #[test]
    fn a_plain_summary_stays_small_however_much_it_covers() {
        let messages: Vec<_> = turns(500).into_iter().collect();
        let summary = plain_summary(&messages);
        assert!(summary.starts_with("1000 earlier messages:"), "{summary}");
        assert!(summary.contains("(994 more)"));
        assert_eq!(summary.lines().count(), 8);
    }

    #[test]
    fn an_earlier_summary_alone_is_nothing_to_compact() {
        let mut messages = turns(1);
        messages.push_front(message(ContextRole::User, "summary", 1, false));
        assert_eq!(cut(&messages, 0, true), None);
        assert!(cut(&messages, 0, false).is_some());
    }
}
