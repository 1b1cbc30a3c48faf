//! One log event as one flat row: the columns an analyst queries (who, when, which run, what
//! was said or called, what it cost), filled from the event and from what the events before it
//! in the session said (a text delta carries no run id; the run it belongs to did).
//!
//! A row borrows its event's text: a million rows cost no allocation each.

use std::{collections::HashMap, sync::Arc};

use reel_engine::LogEntry;
use reel_proto::{
    Any,
    chat::{CorrelationInfo, UsageInfo},
};

/// One event's row. `None` is SQL NULL: the event has no such thing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventRow<'a> {
    pub session_id: Arc<str>,
    pub ordinal: u64,
    /// When the event was appended, milliseconds since the Unix epoch (UTC).
    pub time_ms: u64,
    /// The payload's message name, e.g. `ChatTextDelta`.
    pub event_type: &'a str,
    pub run_id: Option<Arc<str>>,
    pub message_id: Option<&'a str>,
    /// The provider's id of a tool call.
    pub call_id: Option<&'a str>,
    /// user, assistant, reasoning or tool.
    pub role: Option<&'a str>,
    /// What was said: a user message, a text or reasoning delta, a tool result, a summary, a
    /// queued prompt, a failed run's error.
    pub text: Option<&'a str>,
    pub tool_name: Option<&'a str>,
    /// A call's arguments as JSON text (a piece of them, for an arguments delta).
    pub tool_arguments: Option<&'a str>,
    pub tool_status: Option<&'a str>,
    /// The model of the model call the event belongs to.
    pub model: Option<Arc<str>>,
    /// A finished model call's usage: input tokens (all kinds), output, from the cache.
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    /// A run's end status, a model call's finish class, a message's status.
    pub status: Option<&'a str>,
    /// A warning's code.
    pub error_code: Option<&'a str>,
}

/// Makes the rows of one session's events, in ordinal order.
#[derive(Default)]
pub struct RowMaker {
    session_id: Arc<str>,
    run_id: Option<Arc<str>>,
    /// Provider call id -> the model it asked for.
    models: HashMap<String, Arc<str>>,
    /// The model of the newest call (for events without a correlation).
    model: Option<Arc<str>>,
}

/// `text`, unless it is empty.
fn some(text: &str) -> Option<&str> {
    (!text.is_empty()).then_some(text)
}

impl RowMaker {
    pub fn new(session_id: &str) -> Self {
        Self {
            session_id: Arc::from(session_id),
            ..Self::default()
        }
    }

    /// The row of the session's next event.
    pub fn row<'a>(&mut self, entry: &'a LogEntry) -> EventRow<'a> {
        let mut row = EventRow {
            session_id: self.session_id.clone(),
            ordinal: entry.ordinal,
            time_ms: entry.recorded_at_ms,
            event_type: entry.name(),
            ..EventRow::default()
        };
        self.fill(&mut row, &entry.event);
        if row.run_id.is_none() {
            row.run_id.clone_from(&self.run_id);
        }
        if let Any::ChatRunFinished(_) | Any::ChatRunStopped(_) | Any::ChatRunFailed(_) =
            &entry.event
        {
            self.run_id = None;
        }
        row
    }

    fn fill<'a>(&mut self, row: &mut EventRow<'a>, event: &'a Any) {
        match event {
            Any::ChatUserMessageAccepted(m) => {
                row.message_id = some(&m.message_id);
                row.role = Some(some(&m.role).unwrap_or("user"));
                row.text = Some(&m.text);
                row.status = some(&m.status);
            }
            Any::ChatRunStarted(r) => {
                self.run_id = r
                    .correlation
                    .as_ref()
                    .and_then(|c| some(&c.run_id))
                    .map(Arc::from);
                row.message_id = some(&r.message_id);
            }
            Any::ChatRunFinished(r) => self.run_end(row, &r.correlation, &r.status, ""),
            Any::ChatRunStopped(r) => self.run_end(row, &r.correlation, &r.status, ""),
            Any::ChatRunFailed(r) => self.run_end(row, &r.correlation, &r.status, &r.error),
            Any::ChatRunWarning(w) => {
                self.correlated(row, &w.correlation);
                row.error_code = some(&w.code);
                row.text = some(&w.message);
            }
            Any::ChatProviderCallStarted(c) => {
                self.correlated(row, &c.correlation);
                self.model = some(&c.model).map(Arc::from);
                if let Some(call) = &c.correlation {
                    let model = self.model.clone().unwrap_or_else(|| Arc::from(""));
                    self.models.insert(call.provider_call_id.clone(), model);
                }
                row.model.clone_from(&self.model);
                row.status = some(&c.purpose);
            }
            Any::ChatProviderCallFinished(f) => {
                self.correlated(row, &f.correlation);
                if row.model.is_none() {
                    row.model.clone_from(&self.model);
                }
                row.status = some(&f.finish_class);
                if let Some(usage) = &f.usage {
                    priced(row, usage);
                }
            }
            Any::ChatTextDelta(d) => {
                row.message_id = some(&d.message_id);
                row.role = Some("assistant");
                row.text = Some(&d.text);
                row.model.clone_from(&self.model);
            }
            Any::ChatReasoningDelta(d) => {
                row.message_id = some(&d.message_id);
                row.role = Some("reasoning");
                row.text = Some(&d.text);
                row.model.clone_from(&self.model);
            }
            Any::ChatTextSegmentStarted(s) => {
                self.correlated(row, &s.correlation);
                row.message_id = some(&s.message_id);
                row.role = some(&s.role);
            }
            Any::ChatReasoningSegmentStarted(s) => {
                self.correlated(row, &s.correlation);
                row.message_id = some(&s.message_id);
                row.role = Some("reasoning");
            }
            Any::ChatToolCallStarted(t) => {
                self.correlated(row, &t.correlation);
                tool(row, &t.message_id, &t.tool_call_id, &t.tool_name);
                row.tool_arguments = some(&t.input);
            }
            Any::ChatToolArgumentsDelta(d) => {
                row.message_id = some(&d.message_id);
                row.tool_arguments = Some(&d.arguments);
            }
            Any::ChatToolCallRequested(t) => {
                self.correlated(row, &t.correlation);
                tool(row, &t.message_id, &t.tool_call_id, &t.tool_name);
                row.tool_arguments = Some(&t.input);
                row.tool_status = some(&t.status);
            }
            Any::ChatToolExecutionStarted(t) => {
                self.correlated(row, &t.correlation);
                tool(row, &t.message_id, &t.tool_call_id, &t.tool_name);
                row.tool_status = Some(some(&t.status).unwrap_or("executing"));
            }
            Any::ChatToolResultReady(r) => {
                self.correlated(row, &r.correlation);
                tool(row, &r.message_id, &r.tool_call_id, &r.tool_name);
                row.role = Some("tool");
                row.text = Some(&r.result);
                row.tool_status = some(&r.status);
            }
            Any::ChatToolCallFinished(f) => {
                self.correlated(row, &f.correlation);
                tool(row, &f.message_id, &f.tool_call_id, &f.tool_name);
                row.tool_status = Some(some(&f.status).unwrap_or("completed"));
            }
            Any::ChatToolApprovalRequested(a) => {
                self.correlated(row, &a.correlation);
                row.call_id = some(&a.tool_call_id);
                row.tool_name = some(&a.tool_name);
                row.tool_arguments = Some(&a.input);
            }
            Any::ChatToolApprovalDecided(d) => {
                self.correlated(row, &d.correlation);
                row.call_id = some(&d.tool_call_id);
                row.tool_name = some(&d.tool_name);
                row.status = some(&d.decision);
            }
            Any::ChatContextCompacted(c) => {
                self.correlated(row, &c.correlation);
                row.message_id = some(&c.message_id);
                row.text = Some(&c.summary);
                row.status = some(&c.reason);
            }
            Any::ChatPromptQueued(q) => {
                row.message_id = some(&q.message_id);
                row.role = Some("user");
                row.text = Some(&q.prompt);
                row.status = some(&q.kind);
            }
            Any::ChatPromptDelivered(d) => {
                row.message_id = some(&d.user_message_id);
                row.status = some(&d.kind);
            }
            Any::ChatPromptDropped(d) => {
                row.message_id = some(&d.message_id);
                row.status = some(&d.reason);
            }
            Any::ChatContentRedacted(r) => {
                row.message_id = some(&r.message_id);
                row.status = some(&r.scope);
            }
            _ => {}
        }
    }

    /// The run id, and the model of the call, from an event's correlation.
    fn correlated(&mut self, row: &mut EventRow, correlation: &Option<CorrelationInfo>) {
        let Some(correlation) = correlation else {
            return;
        };
        // The run's id is the same in each of its events: one copy serves them all.
        if !correlation.run_id.is_empty() {
            let same = self.run_id.as_deref() == Some(correlation.run_id.as_str());
            if !same {
                self.run_id = Some(Arc::from(correlation.run_id.as_str()));
            }
            row.run_id.clone_from(&self.run_id);
        }
        if let Some(model) = self.models.get(&correlation.provider_call_id) {
            row.model = (!model.is_empty()).then(|| model.clone());
        }
    }

    fn run_end<'a>(
        &mut self,
        row: &mut EventRow<'a>,
        correlation: &Option<CorrelationInfo>,
        status: &'a str,
        error: &'a str,
    ) {
        self.correlated(row, correlation);
        row.status = some(status);
        row.text = some(error);
    }
}

fn tool<'a>(row: &mut EventRow<'a>, message_id: &'a str, call_id: &'a str, name: &'a str) {
    row.message_id = some(message_id);
    row.call_id = some(call_id);
    row.tool_name = some(name);
}

/// A model call's usage, counted as reel counts it (all input kinds together).
fn priced(row: &mut EventRow, usage: &UsageInfo) {
    row.input_tokens = Some(reel_engine::input_tokens(usage));
    row.output_tokens = Some(u64::from(usage.output_tokens));
    row.cache_tokens = Some(reel_engine::cached_tokens(usage));
    row.cost_usd = Some(usage.cost_usd);
}

#[cfg(test)]
mod tests {
    use reel_proto::chat::{
        ChatProviderCallFinished, ChatProviderCallStarted, ChatRunFinished, ChatRunStarted,
        ChatTextDelta,
    };

    use super::*;

    fn entry(ordinal: u64, event: impl Into<Any>) -> LogEntry {
        LogEntry {
            ordinal,
            recorded_at_ms: 1000 + ordinal,
            event: event.into(),
        }
    }

    #[test]
    fn a_row_knows_its_run_and_model_and_only_a_finished_call_carries_usage() {
        let run = CorrelationInfo {
            run_id: "r1".into(),
            provider_call_id: "p1".into(),
            ..Default::default()
        };
        let usage = UsageInfo {
            input_tokens: 10,
            cache_read_input_tokens: 5,
            output_tokens: 3,
            cost_usd: 0.25,
            ..Default::default()
        };
        let log = [
            entry(
                1,
                ChatRunStarted {
                    correlation: Some(run.clone()),
                    ..Default::default()
                },
            ),
            entry(
                2,
                ChatProviderCallStarted {
                    correlation: Some(run.clone()),
                    model: "m".into(),
                    ..Default::default()
                },
            ),
            entry(
                3,
                ChatTextDelta {
                    message_id: "a1".into(),
                    text: "hi".into(),
                },
            ),
            entry(
                4,
                ChatProviderCallFinished {
                    correlation: Some(run.clone()),
                    usage: Some(usage),
                    finish_class: "completed".into(),
                    ..Default::default()
                },
            ),
            entry(
                5,
                ChatRunFinished {
                    status: "finished".into(),
                    usage: Some(usage),
                    ..Default::default()
                },
            ),
            entry(6, ChatTextDelta::default()),
        ];
        let mut maker = RowMaker::new("s");
        let rows: Vec<EventRow> = log.iter().map(|e| maker.row(e)).collect();
        let delta = &rows[2];
        assert_eq!(
            delta.run_id.as_deref(),
            Some("r1"),
            "carried from the run start"
        );
        assert_eq!(delta.model.as_deref(), Some("m"));
        assert_eq!((delta.role, delta.text), (Some("assistant"), Some("hi")));
        let finished = &rows[3];
        assert_eq!(finished.input_tokens, Some(15), "every kind of input");
        assert_eq!(finished.cost_usd, Some(0.25));
        assert_eq!(finished.model.as_deref(), Some("m"));
        // The run's end repeats its calls' usage: counted once, on the call.
        assert_eq!(rows[4].cost_usd, None);
        assert_eq!(rows[4].status, Some("finished"));
        assert_eq!(rows[5].run_id, None, "after the run ended");
        assert_eq!((rows[5].session_id.as_ref(), rows[5].time_ms), ("s", 1006));
    }
}
