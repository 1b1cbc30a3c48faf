//! A session as a person reads it: runs, each with its prompt, what the model thought and said,
//! the tools it called with their results, and how the run ended (status, time, usage).
//!
//! A pure fold of the log, like the engine's projections, rendered by [`TranscriptSink`] as
//! markdown, HTML or terminal text, and by [`crate::FollowTextSink`] before it follows. It holds
//! the session's text, never its events.

mod html;
mod markdown;
mod sink;
mod terminal;

pub use html::escape as html_escape;
pub use sink::{TranscriptFormat, TranscriptSink};
pub use terminal::{Paint, render};

use std::collections::HashMap;

use reel_engine::{LogEntry, QueuedPromptKind, RunStatus, ToolCallStatus};
use reel_proto::{Any, chat::UsageInfo};

/// The whole session, up to the last ordinal folded in.
#[derive(Debug, Default)]
pub struct Transcript {
    pub runs: Vec<RunView>,
    pub last_ordinal: u64,
    /// Segment or tool message id -> (run, block) it lives in.
    blocks: HashMap<String, (usize, usize)>,
    /// Results that arrived for a tool call id that several calls of the run share: each is
    /// given to its call when that call's ChatToolCallFinished (which names the call) follows.
    unmatched_results: Vec<(String, String, bool)>,
    /// Markers of events before the session's first run (its tool servers): they open it.
    before_first_run: Vec<Block>,
}

/// One prompt and everything that answered it.
#[derive(Debug, Default)]
pub struct RunView {
    pub prompt: String,
    /// The ordinal of the user's message.
    pub ordinal: u64,
    /// Provider and model of the run's first model call ("... answered by X" when the server
    /// named another model).
    pub model: String,
    pub blocks: Vec<Block>,
    /// `None` while the run has not ended (at this ordinal, or because the writer died).
    pub end: Option<RunEnd>,
}

/// A piece of a reply.
#[derive(Debug)]
pub enum Block {
    Reasoning(String),
    Text(String),
    Tool(ToolView),
    /// The provider call was retried (HTTP 429 or 5xx): why.
    Retry(String),
    /// Something the run warned about (a required tool call the model did not make).
    Warning(String),
    /// A user message steered into the running run: the model saw it here.
    Steer(String),
    /// Something that happened to the session, not said by anyone: the context was compacted,
    /// a queued prompt was dropped.
    Marker(String),
}

#[derive(Debug, Default)]
pub struct ToolView {
    pub tool_call_id: String,
    pub name: String,
    /// The arguments as JSON text (as far as they streamed).
    pub input: String,
    pub result: Option<String>,
    pub is_error: bool,
    /// pending, executing, completed, failed, cancelled, skipped, interrupted.
    pub status: String,
}

#[derive(Debug, Default)]
pub struct RunEnd {
    /// finished, stopped, failed (or max_iterations_reached).
    pub status: String,
    pub error: String,
    pub duration_ms: u64,
    pub usage: Option<UsageInfo>,
    /// The process died during the run and a resume closed it: its duration is unknown.
    pub interrupted: bool,
}

impl RunEnd {
    /// How long the run took, as a person reads it.
    pub fn duration(&self) -> String {
        if self.interrupted {
            "duration unknown (interrupted)".into()
        } else {
            duration_text(self.duration_ms)
        }
    }
}

impl Transcript {
    pub fn new() -> Self {
        Self::default()
    }

    /// The session's first prompt.
    pub fn title(&self) -> &str {
        self.runs.first().map_or("", |run| run.prompt.as_str())
    }

    /// Folds one event in.
    pub fn apply(&mut self, entry: &LogEntry) {
        self.last_ordinal = entry.ordinal;
        match &entry.event {
            Any::ChatUserMessageAccepted(m) => self.runs.push(RunView {
                prompt: m.text.clone(),
                ordinal: entry.ordinal,
                blocks: std::mem::take(&mut self.before_first_run),
                ..RunView::default()
            }),
            Any::ChatToolServersStarted(started) => {
                for server in &started.servers {
                    let marker = match server.error.is_empty() {
                        true => {
                            let tools: Vec<&str> =
                                server.tools.iter().map(|t| t.name.as_str()).collect();
                            format!(
                                "tool server {} ({} {}): {}",
                                server.name,
                                server.transport,
                                server.target,
                                tools.join(", ")
                            )
                        }
                        false => format!(
                            "tool server {} ({} {}) left out: {}",
                            server.name, server.transport, server.target, server.error
                        ),
                    };
                    match self.runs.last_mut() {
                        Some(run) => run.blocks.push(Block::Marker(marker)),
                        None => self.before_first_run.push(Block::Marker(marker)),
                    }
                }
            }
            Any::ChatToolApprovalDecided(d) => {
                let how = match (d.always, d.remembered) {
                    (_, true) => " (allowed always before)",
                    (true, false) => " (always, for the session)",
                    _ => "",
                };
                let marker = format!("{}: {} by the person{how}", d.tool_name, d.decision);
                self.current().blocks.push(Block::Marker(marker));
            }
            Any::ChatProviderCallStarted(c) => {
                let run = self.current();
                if run.model.is_empty() {
                    run.model = format!("{} {}", c.provider, c.model).trim().to_owned();
                }
            }
            Any::ChatProviderCallFinished(f) if !f.response_model.is_empty() => {
                let run = self.current();
                let answered = format!(" (answered by {})", f.response_model);
                if !run.model.ends_with(&f.response_model) && !run.model.contains(" (answered by ")
                {
                    run.model.push_str(&answered);
                }
            }
            Any::ChatRunWarning(w) => {
                let warning = format!("warning: {}", w.message);
                self.current().blocks.push(Block::Warning(warning));
            }
            Any::ChatPromptDelivered(d) if d.kind == QueuedPromptKind::Steer.as_str() => {
                self.current().blocks.push(Block::Steer(d.prompt.clone()))
            }
            Any::ChatPromptDropped(d) => {
                let marker = format!(
                    "a queued {} was dropped ({})",
                    d.kind.replace('_', "-"),
                    d.reason
                );
                self.current().blocks.push(Block::Marker(marker));
            }
            Any::ChatContextCompacted(c) => {
                let marker = format!(
                    "context compacted: {} messages (ordinals {}-{}) replaced by a summary, about {} -> {} tokens",
                    c.messages_replaced,
                    c.first_ordinal,
                    c.last_ordinal,
                    c.tokens_before,
                    c.tokens_after
                );
                self.current().blocks.push(Block::Marker(marker));
            }
            Any::ChatContentRedacted(r) => {
                let marker = redaction_marker(r);
                self.current().blocks.push(Block::Marker(marker));
            }
            Any::ChatProviderCallRetrying(r) => {
                let reason = format!("retry {} after {} ms: {}", r.attempt, r.delay_ms, r.reason);
                self.current().blocks.push(Block::Retry(reason));
            }
            Any::ChatReasoningSegmentStarted(s) => {
                self.open(&s.message_id, Block::Reasoning(String::new()))
            }
            Any::ChatTextSegmentStarted(s) => self.open(&s.message_id, Block::Text(String::new())),
            Any::ChatReasoningDelta(d) => self.append(&d.message_id, &d.text, true),
            Any::ChatTextDelta(d) => self.append(&d.message_id, &d.text, false),
            Any::ChatToolCallStarted(t) => {
                let tool = ToolView {
                    tool_call_id: t.tool_call_id.clone(),
                    name: t.tool_name.clone(),
                    status: ToolCallStatus::StreamingArgs.into(),
                    ..ToolView::default()
                };
                self.open(&t.message_id, Block::Tool(tool));
            }
            Any::ChatToolArgumentsDelta(d) => {
                if let Some(Block::Tool(tool)) = self.block(&d.message_id) {
                    tool.input.push_str(&d.arguments);
                }
            }
            Any::ChatToolCallRequested(t) => {
                if self.block(&t.message_id).is_none() {
                    self.open(&t.message_id, Block::Tool(ToolView::default()));
                }
                if let Some(Block::Tool(tool)) = self.block(&t.message_id) {
                    tool.tool_call_id.clone_from(&t.tool_call_id);
                    tool.name.clone_from(&t.tool_name);
                    tool.input.clone_from(&t.input);
                    tool.status = ToolCallStatus::Pending.into();
                }
            }
            Any::ChatToolExecutionStarted(t) => {
                if let Some(Block::Tool(tool)) = self.block(&t.message_id) {
                    tool.status = ToolCallStatus::Executing.into();
                }
            }
            Any::ChatToolResultReady(r) => self.result(&r.tool_call_id, &r.result, r.is_error),
            Any::ChatToolCallFinished(f) => {
                let at = self
                    .unmatched_results
                    .iter()
                    .position(|(id, ..)| *id == f.tool_call_id);
                let result = at.map(|at| self.unmatched_results.remove(at));
                if let Some(Block::Tool(tool)) = self.block(&f.message_id) {
                    tool.status.clone_from(&f.status);
                    if let Some((_, text, is_error)) = result {
                        tool.result = Some(text);
                        tool.is_error = is_error;
                    }
                }
            }
            Any::ChatRunFinished(e) => self.end(&e.status, &e.error, e.duration_ms, e.usage, false),
            Any::ChatRunStopped(e) => self.end(
                RunStatus::Stopped.as_str(),
                &e.error,
                e.duration_ms,
                e.usage,
                false,
            ),
            Any::ChatRunFailed(e) => {
                // Logs written before the flag existed say so in the error's first word.
                let interrupted = e.interrupted || e.error.starts_with("interrupted:");
                self.end(
                    RunStatus::Failed.as_str(),
                    &e.error,
                    e.duration_ms,
                    e.usage,
                    interrupted,
                )
            }
            _ => {}
        }
    }

    /// The run events belong to; a log that starts without a prompt gets an empty one.
    fn current(&mut self) -> &mut RunView {
        if self.runs.is_empty() {
            self.runs.push(RunView::default());
        }
        self.runs.last_mut().expect("a run")
    }

    fn open(&mut self, id: &str, block: Block) {
        let run_index = {
            self.current();
            self.runs.len() - 1
        };
        let run = &mut self.runs[run_index];
        run.blocks.push(block);
        self.blocks
            .insert(id.to_owned(), (run_index, run.blocks.len() - 1));
    }

    fn block(&mut self, id: &str) -> Option<&mut Block> {
        let &(run, block) = self.blocks.get(id)?;
        self.runs.get_mut(run)?.blocks.get_mut(block)
    }

    fn append(&mut self, id: &str, text: &str, reasoning: bool) {
        if self.block(id).is_none() {
            let block = if reasoning {
                Block::Reasoning(String::new())
            } else {
                Block::Text(String::new())
            };
            self.open(id, block);
        }
        if let Some(Block::Reasoning(s) | Block::Text(s)) = self.block(id) {
            s.push_str(text);
        }
    }

    /// A tool result: given to its call at once when one call of the run waits for a result
    /// under that id; when several do (a model may repeat an id), held until the
    /// ChatToolCallFinished that follows it names the call.
    fn result(&mut self, tool_call_id: &str, result: &str, is_error: bool) {
        let Some(run) = self.runs.last_mut() else {
            return;
        };
        let mut waiting = run.blocks.iter_mut().filter_map(|b| match b {
            Block::Tool(tool) if tool.tool_call_id == tool_call_id && tool.result.is_none() => {
                Some(tool)
            }
            _ => None,
        });
        match (waiting.next(), waiting.next()) {
            (Some(tool), None) => {
                tool.result = Some(result.to_owned());
                tool.is_error = is_error;
            }
            (Some(_), Some(_)) => {
                self.unmatched_results
                    .push((tool_call_id.to_owned(), result.to_owned(), is_error));
            }
            (None, _) => {}
        }
    }

    fn end(
        &mut self,
        status: &str,
        error: &str,
        duration_ms: u64,
        usage: Option<UsageInfo>,
        interrupted: bool,
    ) {
        self.current().end = Some(RunEnd {
            status: status.to_owned(),
            error: error.to_owned(),
            duration_ms,
            usage,
            interrupted,
        });
    }
}

/// The run's usage, when the provider reported any.
pub fn reported(usage: Option<&UsageInfo>) -> Option<&UsageInfo> {
    usage.filter(|u| reel_engine::input_tokens(u) + u64::from(u.output_tokens) > 0)
}

/// A usage line: "120 in (20 cached) / 35 out tokens, $0.0012".
pub fn usage_line(usage: &UsageInfo) -> String {
    let input = reel_engine::input_tokens(usage);
    let cached = reel_engine::cached_tokens(usage);
    let mut line = format!("{input} in");
    if cached > 0 {
        line.push_str(&format!(" ({cached} cached)"));
    }
    line.push_str(&format!(" / {} out tokens", usage.output_tokens));
    if usage.cost_usd > 0.0 {
        line.push_str(&format!(", ${:.4}", usage.cost_usd));
    }
    line
}

/// A duration as a person reads it: "850 ms", "12.4 s".
pub fn duration_text(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// What a redaction marker says: how much was erased and why (never what).
pub fn redaction_marker(r: &reel_proto::chat::ChatContentRedacted) -> String {
    use reel_engine::RedactionScopeName;
    let what = match RedactionScopeName::parse(&r.scope) {
        Some(RedactionScopeName::All) => "all content".to_owned(),
        Some(RedactionScopeName::Ordinals) => format!(
            "the content of {} entities (events {}-{})",
            r.entity_ids.len(),
            r.first_ordinal,
            r.last_ordinal
        ),
        _ => format!("the content of {} entities", r.entity_ids.len()),
    };
    let reason = if r.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::printable(&r.reason))
    };
    format!("{what} redacted{reason}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_proto::chat::{
        ChatServerTool, ChatToolApprovalDecided, ChatToolServer, ChatToolServersStarted,
        ChatUserMessageAccepted,
    };

    fn entry(ordinal: u64, event: impl Into<Any>) -> LogEntry {
        LogEntry {
            ordinal,
            recorded_at_ms: 0,
            event: event.into(),
        }
    }

    #[test]
    fn tool_servers_and_approvals_are_markers_of_their_runs() {
        let mut transcript = Transcript::new();
        let server = ChatToolServer {
            name: "files".into(),
            transport: "stdio".into(),
            target: "npx server".into(),
            tools: vec![ChatServerTool {
                name: "files__read".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let servers = ChatToolServersStarted {
            servers: vec![server],
        };
        transcript.apply(&entry(1, servers));
        let prompt = ChatUserMessageAccepted {
            text: "read it".into(),
            ..Default::default()
        };
        transcript.apply(&entry(2, prompt));
        let decided = ChatToolApprovalDecided {
            tool_name: "files__read".into(),
            decision: "allowed".into(),
            always: true,
            ..Default::default()
        };
        transcript.apply(&entry(3, decided));
        assert_eq!(transcript.title(), "read it");
        assert_eq!(transcript.runs.len(), 1);
        let markers: Vec<&str> = transcript.runs[0]
            .blocks
            .iter()
            .filter_map(|b| match b {
                Block::Marker(m) => Some(m.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            markers,
            [
                "tool server files (stdio npx server): files__read",
                "files__read: allowed by the person (always, for the session)"
            ]
        );
    }
}
