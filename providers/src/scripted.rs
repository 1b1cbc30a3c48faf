//! The scripted provider: reel's embedded default model. It needs no network and no key.
//!
//! Without a script it echoes the newest user message back word by word. With a script it
//! plays one turn per model call of the session: the first call plays `turns[0]`, the second
//! `turns[1]`, ... (counted over the whole session, so a resumed session goes on where it was).
//! Past its last turn the script starts again from its first, so a session can go on as long as
//! it is used (a resumed example behaves as it did the first time).
//!
//! ```yaml
//! turns:                                  # one entry per model call
//!   - - reasoning: "Let me think."        # a reasoning delta
//!     - text: "Hello "                    # a text delta
//!     - sleep_ms: 20                      # pause, as a slow model would
//!     - text: "world."
//!     - usage: {input_tokens: 12, output_tokens: 4}
//!   - - tool_call: {id: call_1, name: lookup, arguments: {q: "weather"}}
//!   - - error: "upstream exploded"        # this model call fails here
//!   - - panic: "provider bug"             # fault injection: the provider crashes
//!   - - repeat: {times: 10000, steps: [{text: "tok "}]}   # a long reply from a short script
//!   - - echo_context                      # replies with the conversation the model was given
//! summary: "The user asked about..."      # optional: what a summarization call answers
//!                                         # (or a list of steps, like a turn's)
//! ```
//!
//! A turn ends with stop reason `tool_calls` when it made a tool call and `stop` otherwise,
//! unless a `stop_reason` step says otherwise.

use std::{collections::VecDeque, io::Read, path::Path, time::Duration};

use futures::{StreamExt, stream};
use reel_proto::chat::UsageInfo;
use serde::Deserialize;

use reel_engine::{
    CallPurpose, ContextRole, ModelRequest, Provider, ProviderError, ProviderEvent, ProviderStream,
    plain_summary,
};

/// Tool call arguments are streamed in pieces of this many characters, as real models do.
const ARGUMENT_CHUNK_CHARS: usize = 16;
/// The largest script file reel reads: 16 MiB.
pub const MAX_SCRIPT_BYTES: u64 = 16 * 1024 * 1024;

/// A script of model turns.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// One list of steps per model call.
    pub turns: Vec<Vec<Step>>,
    /// What a summarization call (a compaction's) answers. It takes no turn; without it the
    /// answer is a plain summary naming each message it covers.
    #[serde(default)]
    pub summary: Option<Summary>,
}

/// A script's answer to summarization calls: its text, or steps (to make it slow or fail).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Summary {
    Text(String),
    Steps(Vec<Step>),
}

/// One step of a scripted turn.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    Reasoning(String),
    Text(String),
    SleepMs(u64),
    Usage(ScriptUsage),
    ToolCall(ScriptToolCall),
    /// The stop reason this turn finishes with.
    StopReason(String),
    /// Fails the model call with this message.
    Error(String),
    /// Crashes the provider with a panic carrying this message: fault injection, to check that
    /// an internal error still ends the stream with an error frame and done.
    Panic(String),
    /// Plays `steps` `times` times, expanded as it plays, so long replies stay short scripts.
    Repeat(Repeat),
    /// Replies with the conversation this model call was given, one `role: text` line per
    /// message: shows what the model saw.
    EchoContext,
}

/// A `repeat` step.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repeat {
    pub times: u64,
    pub steps: Vec<Step>,
}

/// Token counts reported by a `usage` step.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    #[serde(default)]
    pub input_tokens: u32,
    #[serde(default)]
    pub output_tokens: u32,
    #[serde(default)]
    pub cached_tokens: u32,
}

/// A tool call made by a `tool_call` step.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    pub id: String,
    pub name: String,
    /// The arguments: any YAML value, sent as JSON.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// Why a script could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid script {path}: {message}")]
    Parse { path: String, message: String },
}

impl Script {
    /// Parses a YAML script; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ScriptError> {
        serde_saphyr::from_str(text).map_err(|e| ScriptError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a YAML script file of at most [`MAX_SCRIPT_BYTES`].
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let origin = path.display().to_string();
        let read = |source| ScriptError::Read {
            path: origin.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        file.take(MAX_SCRIPT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_SCRIPT_BYTES {
            return Err(ScriptError::Parse {
                path: origin,
                message: format!(
                    "it is larger than {MAX_SCRIPT_BYTES} bytes, the most a script may be (a `repeat` step makes a long reply from a short script)"
                ),
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| ScriptError::Parse {
            path: origin.clone(),
            message: format!("it is not UTF-8 text ({e})"),
        })?;
        Self::parse(&text, &origin)
    }
}

/// Plays a [`Script`], or echoes the prompt when it has none.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    script: Option<Script>,
}

impl ScriptedProvider {
    /// A provider that echoes the newest user message word by word.
    pub fn echo() -> Self {
        Self::default()
    }

    /// A provider that plays `script`.
    pub fn new(script: Script) -> Self {
        Self {
            script: Some(script),
        }
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(&self, request: ModelRequest) -> ProviderStream {
        if request.purpose == CallPurpose::Summary {
            let steps = match self.script.as_ref().and_then(|s| s.summary.clone()) {
                Some(Summary::Text(text)) => vec![Step::Text(text)],
                Some(Summary::Steps(steps)) => steps,
                // The last message asks for the summary; the ones before it are summarized.
                None => {
                    let messages: Vec<_> = request.messages.iter().cloned().collect();
                    let covered = &messages[..messages.len().saturating_sub(1)];
                    vec![Step::Text(plain_summary(covered))]
                }
            };
            return play(steps, None);
        }
        let call = usize::try_from(request.call_index).unwrap_or(usize::MAX);
        let steps = match &self.script {
            None => return play(Vec::new(), Some(echoed(request))),
            Some(script) if script.turns.is_empty() => {
                vec![Step::Error("the script has no turns".into())]
            }
            Some(script) => script.turns[call % script.turns.len()].clone(),
        };
        let steps = steps
            .into_iter()
            .map(|step| match step {
                Step::EchoContext => Step::Text(render_context(&request)),
                step => step,
            })
            .collect();
        play(steps, None)
    }
}

/// The conversation of `request`, one `role: text` line per message.
fn render_context(request: &ModelRequest) -> String {
    let mut lines = Vec::new();
    if let Some(system) = &request.system_prompt {
        lines.push(format!("system: {system}"));
    }
    for message in &request.messages {
        let role = match message.role {
            ContextRole::User => "user",
            ContextRole::Assistant => "assistant",
            ContextRole::Tool => "tool",
        };
        lines.push(format!("{role}: {}", message.text));
        for call in &message.tool_calls {
            lines.push(format!("{role} calls {}({})", call.name, call.arguments));
        }
    }
    lines.join("\n")
}

/// The newest user message, which the echo model says back (taken out of the request, which
/// the echo needs for nothing else).
fn echoed(request: ModelRequest) -> String {
    request
        .messages
        .into_iter()
        .rev()
        .find(|m| m.role == ContextRole::User)
        .map(|m| std::sync::Arc::unwrap_or_clone(m).text)
        .unwrap_or_default()
}

/// Text said back word by word, as it plays: a long prompt costs its own size, not a step
/// per word held up front.
struct Words {
    text: String,
    /// Bytes of `text` already said.
    said: usize,
}

impl Words {
    /// The next word with the whitespace after it, if any is left.
    fn next(&mut self) -> Option<String> {
        let rest = &self.text[self.said..];
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .char_indices()
            .find(|(_, c)| c.is_whitespace())
            .map_or(rest.len(), |(at, c)| at + c.len_utf8());
        self.said += end;
        Some(rest[..end].to_owned())
    }
}

/// Where a playing turn is.
struct Playback {
    /// Echoed text still to say, before the steps.
    words: Option<Words>,
    steps: VecDeque<Step>,
    /// Events produced by the current step and not yet yielded.
    pending: VecDeque<Result<ProviderEvent, ProviderError>>,
    made_tool_call: bool,
    stop_reason: Option<String>,
    done: bool,
}

fn play(steps: Vec<Step>, echo: Option<String>) -> ProviderStream {
    let playback = Playback {
        words: echo.map(|text| Words { text, said: 0 }),
        steps: steps.into(),
        pending: VecDeque::new(),
        made_tool_call: false,
        stop_reason: None,
        done: false,
    };
    stream::unfold(playback, |mut playback| async move {
        loop {
            if let Some(event) = playback.pending.pop_front() {
                return Some((event, playback));
            }
            if playback.done {
                return None;
            }
            if let Some(words) = &mut playback.words {
                match words.next() {
                    Some(word) => playback
                        .pending
                        .push_back(Ok(ProviderEvent::TextDelta(word))),
                    None => playback.words = None,
                }
                continue;
            }
            match playback.steps.pop_front() {
                Some(Step::SleepMs(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
                Some(step) => playback.expand(step),
                None => {
                    let default = if playback.made_tool_call {
                        "tool_calls"
                    } else {
                        "stop"
                    };
                    let stop_reason = playback
                        .stop_reason
                        .take()
                        .unwrap_or_else(|| default.to_owned());
                    playback
                        .pending
                        .push_back(Ok(ProviderEvent::Finished { stop_reason }));
                    playback.done = true;
                }
            }
        }
    })
    .boxed()
}

impl Playback {
    fn expand(&mut self, step: Step) {
        let pending = &mut self.pending;
        match step {
            Step::Reasoning(text) => pending.push_back(Ok(ProviderEvent::ReasoningDelta(text))),
            Step::Text(text) => pending.push_back(Ok(ProviderEvent::TextDelta(text))),
            Step::Usage(usage) => pending.push_back(Ok(ProviderEvent::Usage(UsageInfo {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                cached_tokens: usage.cached_tokens,
                ..Default::default()
            }))),
            Step::ToolCall(call) => {
                self.made_tool_call = true;
                let arguments = if call.arguments.is_null() {
                    "{}".to_owned()
                } else {
                    call.arguments.to_string()
                };
                pending.push_back(Ok(ProviderEvent::ToolCallStarted {
                    id: call.id.clone(),
                    name: call.name.clone(),
                }));
                let chars: Vec<char> = arguments.chars().collect();
                for chunk in chars.chunks(ARGUMENT_CHUNK_CHARS) {
                    let delta = chunk.iter().collect();
                    pending.push_back(Ok(ProviderEvent::ToolArgumentsDelta {
                        id: call.id.clone(),
                        delta,
                    }));
                }
                pending.push_back(Ok(ProviderEvent::ToolCallReady {
                    id: call.id,
                    name: call.name,
                    arguments,
                }));
            }
            Step::StopReason(reason) => self.stop_reason = Some(reason),
            Step::Error(message) => {
                pending.push_back(Err(ProviderError::Upstream(message)));
                self.done = true;
            }
            Step::Panic(message) => panic!("{message}"),
            Step::Repeat(Repeat { times, steps }) => {
                if times > 0 {
                    let rest = Step::Repeat(Repeat {
                        times: times - 1,
                        steps: steps.clone(),
                    });
                    self.steps.push_front(rest);
                    for step in steps.into_iter().rev() {
                        self.steps.push_front(step);
                    }
                }
            }
            Step::SleepMs(_) | Step::EchoContext => {
                unreachable!("played or replaced before expansion")
            }
        }
    }
}
