//! The flags of a run (`run-command`'s, and the template of every session `reel serve` and
//! `reel acp` run), and a parsed invocation: what every command that runs a session shares.

use std::{collections::BTreeMap, path::PathBuf};

use clap::{Args, ValueEnum};

use crate::command_file::{CommandFile, CommandFileError};

/// How `run-command` writes its result on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputMode {
    /// The assistant's reply as plain text, streamed.
    Text,
    /// One JSON result document at the end.
    Json,
    /// One YAML result document at the end.
    Yaml,
    /// Protocol frames: one protobuf-JSON RpcLine per line.
    Jsonl,
    /// A markdown transcript at the end (as `reel export --format markdown`).
    Markdown,
    /// A self-contained HTML page at the end (as `reel export --format html`).
    Html,
    /// How many events of each kind the run appended, at the end.
    EventCounts,
}

/// A person's decision on a tool call (`--decision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Decision {
    AllowOnce,
    /// Allowed, and not asked again for this tool in the session.
    AllowAlways,
    RejectOnce,
}

impl From<Decision> for reel_engine::ApprovalOption {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::AllowOnce => Self::AllowOnce,
            Decision::AllowAlways => Self::AllowAlways,
            Decision::RejectOnce => Self::RejectOnce,
        }
    }
}

/// `--rerun`: whether the re-run's tools run, or answer with the recorded results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolsMode {
    Run,
    Recorded,
}

impl ToolsMode {
    /// As the flag's value.
    pub fn as_flag(self) -> &'static str {
        match self {
            ToolsMode::Run => "run",
            ToolsMode::Recorded => "recorded",
        }
    }
}

/// `--rerun`: whether each model call is answered with the recorded output (a check: the first
/// divergence stops it) or by the model again (an evaluation: it runs to the end and reports
/// every difference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelMode {
    Recorded,
    Live,
}

impl ModelMode {
    /// As the flag's value.
    pub fn as_flag(self) -> &'static str {
        match self {
            ModelMode::Recorded => "recorded",
            ModelMode::Live => "live",
        }
    }
}

/// `--rerun`: how the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
}

impl ReportFormat {
    /// As the flag's value.
    pub fn as_flag(self) -> &'static str {
        match self {
            ReportFormat::Text => "text",
            ReportFormat::Json => "json",
        }
    }
}

/// Model backends this build has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderName {
    /// Plays a script, or echoes the prompt; no network.
    Scripted,
    /// An OpenAI-compatible chat completions server (OpenAI, Ollama, vLLM, llama.cpp, ...).
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
}

#[derive(Args, Debug, Clone)]
pub struct RunCommandArgs {
    /// The command file (YAML). Its variables become flags: --NAME VALUE.
    pub command_file: PathBuf,
    /// What stdout carries.
    #[arg(long, value_enum, default_value_t = OutputMode::Text)]
    pub output: OutputMode,
    /// Write protocol frames on stdout (the same as --output jsonl).
    #[arg(long)]
    pub rpc: bool,
    /// Serve one session over stdin: one RpcRequestLine per line, request-scoped frames on
    /// stdout (needs --rpc or --output jsonl).
    #[arg(long)]
    pub stdin_rpc: bool,
    /// Also write the protocol frames to this file (created with its folders, truncated).
    #[arg(long, value_name = "PATH")]
    pub debug_events_jsonl: Option<PathBuf>,
    /// The model backend (default: the command file's, else scripted).
    #[arg(long, value_enum)]
    pub provider: Option<ProviderName>,
    /// A script for the scripted provider (default: the command file's; else echo the prompt).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// The model name to ask for (default: the command file's).
    #[arg(long)]
    pub model: Option<String>,
    /// The provider's base URL, e.g. http://127.0.0.1:8080/v1 (default: the command file's,
    /// else the provider's public API).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The environment variable that holds the API key (default: the command file's, else
    /// OPENAI_API_KEY or ANTHROPIC_API_KEY). Keys are never taken from flags, which land in
    /// shell history.
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// Give up on a model call after this long without a response or a piece of one.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Sampling temperature (default: the command file's, else the provider's).
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// The longest reply, in tokens (default: the command file's, else the provider's).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// Turn on Anthropic's extended thinking with this many tokens for it (at least 1024, and
    /// below --max-tokens); default: the command file's thinking_budget_tokens, else off.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1024..))]
    pub thinking_budget: Option<u32>,
    /// Model calls one run may make: each round of tool calls costs one (default: the command
    /// file's, else 10). When the model still asks for tools, the run ends with a warning.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    /// The model's context window in tokens: before a model call whose input would pass
    /// context.compact_at of it (default 0.8), the earlier turns are summarized (default: the
    /// command file's context.window_tokens, else no compaction).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub context_window: Option<u64>,
    /// Run budget: model calls one run may make, summarization calls included (default: the
    /// command file's budget.run).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_model_calls: Option<u64>,
    /// Run budget: input tokens one run may spend.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_input_tokens: Option<u64>,
    /// Run budget: output tokens one run may spend.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_output_tokens: Option<u64>,
    /// Run budget: US dollars one run may spend, at the command file's provider.pricing.
    #[arg(long, value_name = "USD")]
    pub max_cost_usd: Option<f64>,
    /// Add backendEvent frames: the log's own events, for debugging.
    #[arg(long)]
    pub include_backend_events: bool,
    /// One more output of the session (repeatable): exec:COMMAND runs COMMAND with the frames
    /// on its stdin, one JSON line each; nats://HOST:PORT/STREAM keeps the log in a JetStream
    /// stream (durable: done waits for its acknowledgements); http(s)://HOST/PATH POSTs the
    /// frames to a webhook (batched, retried, signed with ?secret_env=NAME).
    #[arg(long = "sink", value_name = "URI")]
    pub sinks: Vec<String>,
    /// Export traces of the session's runs, model calls and tool executions over OTLP
    /// (HTTP/protobuf) to this base URL (spans go to URL/v1/traces); the standard
    /// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_* variables do the same.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Keep the session under this id in the timeline database (default database: the user's
    /// data folder). A new id starts a session; an existing one needs --resume.
    #[arg(long, value_name = "ID")]
    pub session_id: Option<String>,
    /// Continue the stored session named by --session-id.
    #[arg(long, requires = "session_id")]
    pub resume: bool,
    /// Decide on the call CALL_ID that the resumed session's run waits on (an `approval: ask`
    /// tool's call; see the snapshot's awaiting_approval calls), then continue the run.
    #[arg(long, value_name = "CALL_ID", requires_all = ["resume", "decision"], conflicts_with = "stdin_rpc")]
    pub approve: Option<String>,
    /// The decision --approve records.
    #[arg(long, value_enum, requires = "approve")]
    pub decision: Option<Decision>,
    /// Words the model reads with a reject_once decision.
    #[arg(long, value_name = "TEXT", requires = "approve")]
    pub decision_message: Option<String>,
    /// Re-run this stored session into the new session --session-id (see `reel rerun`): stdout
    /// carries the report, not frames.
    #[arg(long, value_name = "SESSION", conflicts_with_all = ["stdin_rpc", "resume"], requires = "session_id")]
    pub rerun: Option<String>,
    /// With --rerun: whether the tools run, or answer with the recorded results.
    #[arg(long, value_enum, default_value_t = ToolsMode::Run, requires = "rerun")]
    pub rerun_tools: ToolsMode,
    /// With --rerun: answer each model call as recorded, or ask the model again.
    #[arg(long, value_enum, default_value_t = ModelMode::Recorded, requires = "rerun")]
    pub rerun_model: ModelMode,
    /// With --rerun: re-run the original up to this ordinal of its log.
    #[arg(long, value_name = "ORDINAL", requires = "rerun")]
    pub rerun_until: Option<u64>,
    /// With --rerun: the report as text or as one JSON document.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text, requires = "rerun")]
    pub rerun_format: ReportFormat,
    /// Take the session over even if another process seems to hold it (a process on another
    /// machine or container whose heartbeat has not expired yet, or one that hangs). That
    /// process's next write fails and it stops. Use it only when you know the holder is gone.
    #[arg(long, requires = "resume")]
    pub steal_lease: bool,
    /// The timeline database (SQLite file) that keeps the session's log.
    #[arg(long, value_name = "PATH", conflicts_with = "timeline_dsn")]
    pub timeline_db: Option<PathBuf>,
    /// The timeline database as a DSN: sqlite://PATH or postgres://USER@HOST:PORT/DATABASE.
    #[arg(long, value_name = "URL")]
    pub timeline_dsn: Option<String>,
    /// The turns database (SQLite file): the model context after each run.
    #[arg(long, value_name = "PATH", conflicts_with = "turns_dsn")]
    pub turns_db: Option<PathBuf>,
    /// The turns database as a DSN: sqlite://PATH or postgres://USER@HOST:PORT/DATABASE.
    #[arg(long, value_name = "URL")]
    pub turns_dsn: Option<String>,
}

impl RunCommandArgs {
    /// Whether stdout carries protocol frames.
    pub fn frames_on_stdout(&self) -> bool {
        self.rpc || self.output == OutputMode::Jsonl
    }
}

/// A parsed `run-command` invocation.
pub struct Invocation {
    pub args: RunCommandArgs,
    /// The command file, or why it could not be loaded (reported in the requested output mode).
    pub command: Result<CommandFile, CommandFileError>,
    /// Variable values from flags and defaults.
    pub variables: BTreeMap<String, String>,
}
