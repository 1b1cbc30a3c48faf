//! Command files: a named, described prompt with variables and default provider settings.
//!
//! ```yaml
//! name: haiku
//! description: Writes a haiku about a topic.
//! system_prompt: You are a poet.          # optional
//! prompt: "Write a haiku about {{ topic }}."
//! variables:                               # each becomes a flag: --topic
//!   - name: topic
//!     description: What the haiku is about.
//!     default: the sea                     # without a default the flag is required
//! provider:                                # defaults; flags override them
//!   name: scripted
//!   script: haiku.script.yaml              # relative to this file
//!   model: ""
//!   temperature: 0.7
//!   max_tokens: 256
//!   max_tokens_field: max_completion_tokens  # optional (OpenAI-compatible): default by model
//!   thinking_budget_tokens: 2048           # optional (Anthropic): extended thinking on
//!   pricing:                               # optional: US$ per million tokens, for cost figures
//!     input_per_mtok: 3.0
//!     output_per_mtok: 15.0
//!     cached_input_per_mtok: 0.3           # optional
//!     cache_write_per_mtok: 3.75           # optional
//!   stop: ["</tool_call>"]                 # optional: sequences that end a reply
//!   tool_call_prefill: "<tool_call>\n"     # optional: how a forced tool call begins (local models)
//! tools:                                   # optional: tools the model may call
//!   - name: get_weather
//!     description: Current weather for a city.
//!     parameters:                          # JSON Schema of the arguments (YAML or JSON)
//!       type: object
//!       properties: {city: {type: string}}
//!       required: [city]
//!     executor:
//!       command: [./tools/weather.sh]      # arguments as JSON on stdin, result on stdout
//!     timeout_ms: 30000                    # optional
//!     max_output_bytes: 65536              # optional (at most 16 MiB)
//!     env: [AWS_PROFILE]                   # optional: variables it sees besides PATH, HOME,
//!                                          # LANG, TERM and TMPDIR
//!     approval: ask                        # optional: a person decides each call first (reel
//!                                          # acp asks the editor); never by default
//!     approval_timeout: 24h                # optional: undecided this long, it expires
//!     on_interrupted: fail                 # optional: fail, retry (with idempotent) or ask
//!     idempotent: false                    # optional: a repeated call has its effect once
//!   - name: ask_user
//!     description: Asks the person at the client.
//!     executor: client                     # answered by the stdin-RPC client
//! mcp_servers:                             # optional: MCP servers whose tools join (SERVER__TOOL)
//!   - name: files
//!     command: [npx, -y, "@modelcontextprotocol/server-filesystem", "."]   # over stdio
//!     env: {LOG_LEVEL: warn}               # optional
//!   - name: search
//!     url: http://127.0.0.1:8931/mcp       # over streamable HTTP
//!     headers: {Authorization: Bearer x}   # optional
//! sinks: ["exec:jq -c .backendEvent"]      # optional: more outputs, as --sink names them
//! max_iterations: 10                       # model calls per run (--max-iterations)
//! tool_choice: auto                        # or required: a run's first model call must call a tool
//! context:                                 # optional: keeping long sessions in the window
//!   window_tokens: 128000                  # the model's context window (--context-window)
//!   compact_at: 0.8                        # compact before a call whose input passes this fraction
//!   keep_recent_turns: 2                   # turns before the current one kept word for word
//!   instructions: Keep file names.         # optional: extra instructions for the summary
//! budget:                                  # optional: what a run and the session may spend
//!   run: {max_model_calls: 20, max_cost_usd: 0.50}   # flags: --max-model-calls, --max-cost-usd, ...
//!   session: {max_input_tokens: 2000000, max_output_tokens: 200000}
//! ```

use anyhow::Context;
use reel_engine::error_chain;
use std::{
    collections::BTreeMap,
    io::Read,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use crate::template;

/// The largest command file reel reads: 1 MiB (a prompt longer than that belongs in a
/// variable or on stdin, not in a file a person edits).
pub const MAX_COMMAND_FILE_BYTES: u64 = 1024 * 1024;

/// Flags of `run-command` that a variable may not shadow.
pub const RESERVED_FLAGS: &[&str] = &[
    "output",
    "rpc",
    "stdin-rpc",
    "debug-events-jsonl",
    "provider",
    "script",
    "model",
    "base-url",
    "api-key-env",
    "timeout-ms",
    "temperature",
    "max-tokens",
    "max-iterations",
    "context-window",
    "max-model-calls",
    "max-input-tokens",
    "max-output-tokens",
    "max-cost-usd",
    "include-backend-events",
    "session-id",
    "resume",
    "steal-lease",
    "thinking-budget",
    "timeline-db",
    "timeline-dsn",
    "turns-db",
    "turns-dsn",
    "help",
    "version",
];

/// A loaded command file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandFile {
    pub name: String,
    /// What it does, for `--help`; optional.
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub system_prompt: Option<String>,
    pub prompt: String,
    #[serde(default)]
    pub variables: Vec<Variable>,
    #[serde(default)]
    pub provider: ProviderDefaults,
    #[serde(default)]
    pub tools: Vec<ToolDeclaration>,
    /// MCP servers whose tools join the toolbox, started once per session.
    #[serde(default)]
    pub mcp_servers: Vec<reel_mcp::McpServerConfig>,
    /// More outputs of each session, as `--sink` names them (after the flags' own).
    #[serde(default)]
    pub sinks: Vec<String>,
    /// Model calls one run may make (each tool round is one more).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Whether the first model call of each run must call a tool.
    #[serde(default)]
    pub tool_choice: reel_engine::ToolChoice,
    /// The context window and when to compact.
    #[serde(default)]
    pub context: reel_engine::ContextPolicy,
    /// What a run and the session may spend.
    #[serde(default)]
    pub budget: reel_engine::Budgets,
    /// The folder the file was loaded from; relative paths in it are resolved against it.
    #[serde(skip)]
    pub folder: PathBuf,
}

/// A prompt variable, set with `--NAME VALUE`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variable {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub default: Option<String>,
}

/// A tool the model may call, and who runs it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDeclaration {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; an object without properties when left out.
    #[serde(default = "no_parameters")]
    pub parameters: serde_json::Value,
    pub executor: ExecutorDeclaration,
    /// How long the command may run, or the client may take to answer.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// For command tools: the most stdout the model gets.
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// For command tools: environment variables it gets from reel's, besides PATH, HOME, LANG,
    /// TERM and TMPDIR (no other variable reaches a tool).
    #[serde(default)]
    pub env: Vec<String>,
    /// `ask`: a person decides each call first (an editor, over ACP); `never` by default.
    #[serde(default)]
    pub approval: reel_engine::Approval,
    /// With `approval: ask`: how long a call waits for the decision, e.g. `24h`, before it is
    /// decided `expired` and not run; no limit by default.
    #[serde(default, with = "optional_duration")]
    pub approval_timeout: Option<std::time::Duration>,
    /// What becomes of a call whose process ended before it finished: `fail` (default), `retry`
    /// (runs it again with the same idempotency key; only with `idempotent: true`) or `ask`.
    #[serde(default)]
    pub on_interrupted: reel_engine::OnInterrupted,
    /// The tool does a repeated call's side effect once (it reads REEL_IDEMPOTENCY_KEY).
    #[serde(default)]
    pub idempotent: bool,
}

/// A duration written as people write them (`90s`, `24h`), optional.
mod optional_duration {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<std::time::Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(deserializer)? else {
            return Ok(None);
        };
        humantime::parse_duration(&text).map(Some).map_err(|e| {
            serde::de::Error::custom(format!(
                "{text:?} is not a duration ({e}); write e.g. 90s, 30m or 24h"
            ))
        })
    }
}

/// Who runs a tool: `command: [PROGRAM, ARGS...]` or `client`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ExecutorDeclaration {
    Command(Vec<String>),
    Client,
}

fn no_parameters() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Provider settings a command starts from.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderDefaults {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub script: Option<PathBuf>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// For OpenAI-compatible servers: `max_tokens` or `max_completion_tokens` (default: by
    /// model family; OpenAI's reasoning models need the second).
    #[serde(default)]
    pub max_tokens_field: Option<reel_engine::TokenLimitField>,
    /// For Anthropic: turns extended thinking on with this many tokens for it.
    #[serde(default)]
    pub thinking_budget_tokens: Option<u32>,
    /// Prices, for the cost of each call, run and session.
    #[serde(default)]
    pub pricing: Option<reel_engine::Pricing>,
    /// Sequences that end a reply.
    #[serde(default)]
    pub stop: Vec<String>,
    /// The start of the reply sent as a prefill when a call must call a tool.
    #[serde(default)]
    pub tool_call_prefill: Option<String>,
    /// For HTTP providers: where the server is.
    #[serde(default)]
    pub base_url: Option<String>,
    /// For HTTP providers: the environment variable that holds the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// For HTTP providers: the longest wait for a response or a piece of one, in ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Why a command file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CommandFileError {
    #[error("cannot read command file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid command file {path}: {message}")]
    Invalid { path: String, message: String },
}

impl CommandFile {
    /// Reads and checks the command file at `path` (at most [`MAX_COMMAND_FILE_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, CommandFileError> {
        let shown = path.display().to_string();
        let read = |source| CommandFileError::Read {
            path: shown.clone(),
            source,
        };
        let invalid = |message: String| CommandFileError::Invalid {
            path: shown.clone(),
            message,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|file| {
                file.take(MAX_COMMAND_FILE_BYTES + 1)
                    .read_to_end(&mut bytes)
            })
            .map_err(read)?;
        if bytes.len() as u64 > MAX_COMMAND_FILE_BYTES {
            return Err(invalid(format!(
                "it is larger than {MAX_COMMAND_FILE_BYTES} bytes, the most a command file may be"
            )));
        }
        let text =
            String::from_utf8(bytes).map_err(|e| invalid(format!("it is not UTF-8 text ({e})")))?;
        let mut file: CommandFile =
            serde_saphyr::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        file.folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        file.check().map_err(|e| invalid(error_chain(&*e)))?;
        Ok(file)
    }

    /// Catches mistakes at load time: bad or clashing variable names, unknown placeholders.
    fn check(&self) -> anyhow::Result<()> {
        let mut seen = Vec::new();
        for variable in &self.variables {
            let name = variable.name.as_str();
            let well_formed = !name.is_empty()
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !well_formed {
                return Err(anyhow::anyhow!(
                    "variable name {name:?} must be lowercase letters, digits, '-' or '_'"
                ));
            }
            if RESERVED_FLAGS.contains(&name) {
                return Err(anyhow::anyhow!(
                    "variable {name:?} clashes with reel's own flag --{name}"
                ));
            }
            if seen.contains(&name) {
                return Err(anyhow::anyhow!("variable {name:?} is declared twice"));
            }
            seen.push(name);
        }
        self.context.check()?;
        for placeholder in template::placeholders(&self.prompt).context("prompt")? {
            if !seen.contains(&placeholder) {
                return Err(anyhow::anyhow!(
                    "prompt: the placeholder {{{{ {placeholder} }}}} names no declared variable"
                ));
            }
        }
        Ok(())
    }

    /// The prompt with `values` filled in (every declared variable must have a value).
    pub fn render_prompt(
        &self,
        values: &BTreeMap<String, String>,
    ) -> Result<String, template::TemplateError> {
        template::render(&self.prompt, values)
    }

    /// `path` resolved against the command file's folder.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.folder.join(path)
        }
    }
}
