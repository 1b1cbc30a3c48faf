//! The trace sink: folds a session's log into OpenTelemetry spans.
//!
//! * `ChatRunStarted` opens the run's `invoke_agent` span (a trace of its own); its
//!   `ChatRunFinished`, `ChatRunStopped` or `ChatRunFailed` ends it (an error status when it
//!   failed).
//! * `ChatProviderCallStarted` opens a `chat {model}` span (kind client) under its run;
//!   `ChatProviderCallFinished` ends it with the response model, the finish reason and the
//!   tokens.
//! * `ChatToolExecutionStarted` opens an `execute_tool {name}` span under its run;
//!   `ChatToolCallFinished` ends it.
//!
//! A span starts and ends at its events' recorded times and carries their ordinals
//! (`reel.ordinal.start`, `reel.ordinal.end`) and the session id (`gen_ai.conversation.id`,
//! `reel.session.id`). Text (the prompt, the reply, tool arguments and results) is added only
//! when [`Traces`] captures content.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use opentelemetry::{
    Array, Context, KeyValue, StringValue, Value,
    trace::{SpanKind, Status, TraceContextExt, Tracer},
};
use reel_engine::{
    Acks, FinishClass, LogEntry, OutputBatch, OutputKind, Reads, Sink, SinkError, ToolCallStatus,
};
use reel_proto::{
    Any,
    chat::{
        ChatProviderCallFinished, ChatProviderCallStarted, ChatRunStarted, ChatToolCallFinished,
        ChatToolExecutionStarted, CorrelationInfo, UsageInfo,
    },
};
use tokio::sync::mpsc;

use crate::Traces;

/// Makes the spans of one session.
pub struct TraceSink {
    traces: Traces,
    session_id: String,
    /// Open spans, each in a context its children start from: by run id, by provider call
    /// id, by tool call id.
    runs: HashMap<String, Context>,
    calls: HashMap<String, Context>,
    tools: HashMap<String, Context>,
    /// The reply text of the open call, when content is captured (a session calls one model
    /// at a time).
    replies: HashMap<String, String>,
}

impl TraceSink {
    pub(crate) fn new(traces: Traces, session_id: &str) -> Self {
        Self {
            traces,
            session_id: session_id.to_owned(),
            runs: HashMap::new(),
            calls: HashMap::new(),
            tools: HashMap::new(),
            replies: HashMap::new(),
        }
    }

    /// Opens, adds to or ends the span `entry` concerns.
    fn fold(&mut self, entry: &LogEntry) {
        let at = UNIX_EPOCH + Duration::from_millis(entry.recorded_at_ms);
        // Only the events that end a span need it (not the deltas between them).
        let ordinal = || KeyValue::new("reel.ordinal.end", ordinal_value(entry.ordinal));
        match &entry.event {
            Any::ChatRunStarted(started) => self.start_run(entry, started, at),
            Any::ChatProviderCallStarted(started) => self.start_call(entry, started, at),
            Any::ChatToolExecutionStarted(started) => self.start_tool(entry, started, at),
            Any::ChatTextDelta(delta) if self.traces.capture_content() => {
                // A session calls one model at a time: a delta is the open call's.
                if let Some(reply) = self.replies.values_mut().next() {
                    reply.push_str(&delta.text);
                }
            }
            Any::ChatProviderCallFinished(finished) => {
                self.end_call(finished, ordinal(), at);
            }
            Any::ChatToolResultReady(ready) if self.traces.capture_content() => {
                if let Some(tool) = self.tools.get(&ready.tool_call_id) {
                    tool.span().set_attribute(KeyValue::new(
                        "gen_ai.tool.call.result",
                        ready.result.clone(),
                    ));
                }
            }
            Any::ChatToolCallFinished(finished) => self.end_tool(finished, ordinal(), at),
            Any::ChatRunFinished(f) => self.end_run(&f.correlation, &f.usage, None, ordinal(), at),
            Any::ChatRunStopped(s) => {
                self.end_run(&s.correlation, &s.usage, None, ordinal(), at);
            }
            Any::ChatRunFailed(f) => {
                let why = Some(if f.error.is_empty() {
                    f.status.clone()
                } else {
                    f.error.clone()
                });
                self.end_run(&f.correlation, &f.usage, why, ordinal(), at);
            }
            _ => {}
        }
    }

    fn start_run(&mut self, entry: &LogEntry, started: &ChatRunStarted, at: SystemTime) {
        let run_id = run_id(&started.correlation);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", "reel"),
            KeyValue::new("gen_ai.conversation.id", self.session_id.clone()),
            KeyValue::new("reel.session.id", self.session_id.clone()),
            KeyValue::new("reel.run.id", run_id.clone()),
            KeyValue::new("reel.ordinal.start", ordinal_value(entry.ordinal)),
        ];
        if self.traces.capture_content() {
            attributes.push(KeyValue::new(
                "gen_ai.input.messages",
                messages_json("user", &started.prompt, None),
            ));
            if !started.system_prompt.is_empty() {
                attributes.push(KeyValue::new(
                    "gen_ai.system_instructions",
                    started.system_prompt.clone(),
                ));
            }
        }
        let span = self
            .traces
            .tracer()
            .span_builder("invoke_agent reel")
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(self.traces.tracer(), &Context::new());
        self.runs.insert(run_id, Context::new().with_span(span));
    }

    fn start_call(&mut self, entry: &LogEntry, started: &ChatProviderCallStarted, at: SystemTime) {
        let call_id = call_id(&started.correlation);
        let parent = self.parent(&started.correlation);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.system", started.provider.clone()),
            KeyValue::new("gen_ai.provider.name", started.provider.clone()),
            KeyValue::new("gen_ai.conversation.id", self.session_id.clone()),
            KeyValue::new("reel.session.id", self.session_id.clone()),
            KeyValue::new("reel.call.purpose", started.purpose.clone()),
            KeyValue::new("reel.ordinal.start", ordinal_value(entry.ordinal)),
        ];
        // The conventions name the span `chat {model}`; a scripted model has no name.
        let name = if started.model.is_empty() {
            "chat".to_owned()
        } else {
            attributes.push(KeyValue::new("gen_ai.request.model", started.model.clone()));
            format!("chat {}", started.model)
        };
        let span = self
            .traces
            .tracer()
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(self.traces.tracer(), &parent);
        if self.traces.capture_content() {
            self.replies.clear();
            self.replies.insert(call_id.clone(), String::new());
        }
        self.calls.insert(call_id, parent.with_span(span));
    }

    fn end_call(&mut self, finished: &ChatProviderCallFinished, ordinal: KeyValue, at: SystemTime) {
        let call_id = call_id(&finished.correlation);
        let Some(call) = self.calls.remove(&call_id) else {
            return;
        };
        let span = call.span();
        let reasons = Array::String(vec![StringValue::from(finished.stop_reason.clone())]);
        span.set_attribute(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(reasons),
        ));
        if !finished.response_model.is_empty() {
            span.set_attribute(KeyValue::new(
                "gen_ai.response.model",
                finished.response_model.clone(),
            ));
        }
        set_usage(&span, &finished.usage);
        if let Some(reply) = self.replies.remove(&call_id) {
            span.set_attribute(KeyValue::new(
                "gen_ai.output.messages",
                messages_json("assistant", &reply, Some(&finished.stop_reason)),
            ));
        }
        if FinishClass::parse(&finished.finish_class) == Some(FinishClass::Error) {
            span.set_status(Status::error(format!(
                "the model call failed ({})",
                finished.stop_reason
            )));
        }
        span.set_attribute(ordinal);
        span.end_with_timestamp(at);
    }

    fn start_tool(&mut self, entry: &LogEntry, started: &ChatToolExecutionStarted, at: SystemTime) {
        let parent = self.parent(&started.correlation);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", started.tool_name.clone()),
            KeyValue::new("gen_ai.tool.call.id", started.tool_call_id.clone()),
            KeyValue::new("gen_ai.conversation.id", self.session_id.clone()),
            KeyValue::new("reel.session.id", self.session_id.clone()),
            KeyValue::new("reel.ordinal.start", ordinal_value(entry.ordinal)),
        ];
        if self.traces.capture_content() {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                started.input.clone(),
            ));
        }
        let span = self
            .traces
            .tracer()
            .span_builder(format!("execute_tool {}", started.tool_name))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(self.traces.tracer(), &parent);
        self.tools
            .insert(started.tool_call_id.clone(), parent.with_span(span));
    }

    fn end_tool(&mut self, finished: &ChatToolCallFinished, ordinal: KeyValue, at: SystemTime) {
        let Some(tool) = self.tools.remove(&finished.tool_call_id) else {
            return;
        };
        let span = tool.span();
        span.set_attribute(KeyValue::new("reel.tool.status", finished.status.clone()));
        let failed = matches!(
            ToolCallStatus::parse(&finished.status),
            Some(ToolCallStatus::Failed | ToolCallStatus::Skipped | ToolCallStatus::Interrupted)
        );
        if failed {
            span.set_status(Status::error(format!("tool {}", finished.status)));
        }
        span.set_attribute(ordinal);
        span.end_with_timestamp(at);
    }

    fn end_run(
        &mut self,
        correlation: &Option<CorrelationInfo>,
        usage: &Option<UsageInfo>,
        failure: Option<String>,
        ordinal: KeyValue,
        at: SystemTime,
    ) {
        let Some(run) = self.runs.remove(&run_id(correlation)) else {
            // A run an earlier process began (closed on resume): its span went with it.
            return;
        };
        let span = run.span();
        set_usage(&span, usage);
        if let Some(why) = failure {
            span.set_status(Status::error(why));
        }
        span.set_attribute(ordinal);
        span.end_with_timestamp(at);
    }

    /// The context a span of `correlation`'s run starts from: its run's span, or none.
    fn parent(&self, correlation: &Option<CorrelationInfo>) -> Context {
        self.runs
            .get(&run_id(correlation))
            .cloned()
            .unwrap_or_default()
    }
}

fn run_id(correlation: &Option<CorrelationInfo>) -> String {
    correlation
        .as_ref()
        .map(|c| c.run_id.clone())
        .unwrap_or_default()
}

fn call_id(correlation: &Option<CorrelationInfo>) -> String {
    correlation
        .as_ref()
        .map(|c| c.provider_call_id.clone())
        .unwrap_or_default()
}

/// An ordinal as an attribute (OTLP integers are signed 64-bit).
fn ordinal_value(ordinal: u64) -> i64 {
    i64::try_from(ordinal).unwrap_or(i64::MAX)
}

fn set_usage(span: &opentelemetry::trace::SpanRef<'_>, usage: &Option<UsageInfo>) {
    if let Some(usage) = usage {
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::from(usage.input_tokens),
        ));
        span.set_attribute(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::from(usage.output_tokens),
        ));
    }
}

/// One message in the GenAI conventions' JSON form.
fn messages_json(role: &str, text: &str, finish_reason: Option<&str>) -> String {
    let mut message = serde_json::json!({
        "role": role,
        "parts": [{"type": "text", "content": text}],
    });
    if let Some(reason) = finish_reason {
        message["finish_reason"] = reason.into();
    }
    serde_json::Value::Array(vec![message]).to_string()
}

#[async_trait::async_trait]
impl Sink for TraceSink {
    fn name(&self) -> String {
        "otlp-traces".into()
    }

    fn reads(&self) -> Reads {
        Reads::LogOnly
    }

    async fn run(
        mut self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        while let Some(batch) = input.recv().await {
            for output in batch.iter() {
                if let OutputKind::Event(committed) = &output.kind {
                    self.fold(&committed.entry);
                }
            }
        }
        // Spans still open (a run cut short by the process ending) end now.
        for (_, open) in self
            .tools
            .drain()
            .chain(self.calls.drain())
            .chain(self.runs.drain())
        {
            open.span().end();
        }
        // The session is over: its spans leave before the process may exit.
        let traces = self.traces.clone();
        tokio::task::spawn_blocking(move || traces.flush())
            .await
            .map_err(|e| SinkError::Io(std::io::Error::other(e.to_string())))?;
        Ok(())
    }
}
