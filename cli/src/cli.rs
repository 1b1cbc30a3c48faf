//! Command-line parsing.
//!
//! `run-command` turns each variable of the command file into a flag (`--topic autumn`), so the
//! arguments are parsed twice: once leniently to find the command file, then strictly with the
//! file's variables added as flags.

use std::{collections::BTreeMap, ffi::OsString, path::PathBuf};

use clap::{
    Arg, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum,
    error::{ContextKind, ContextValue, ErrorKind},
};

use crate::command_file::{CommandFile, CommandFileError};

#[derive(Parser, Debug)]
#[command(
    name = "reel",
    version,
    about = "An event-sourced session engine for LLM chat and agent runs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Action,
}

// Parsed once per process: the size of its largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Action {
    /// Run a command file: send its prompt to a model and stream the reply.
    RunCommand(RunCommandArgs),
    /// Stream a long scripted reply through the whole path and print throughput and memory.
    Bench(crate::bench::BenchArgs),
    /// Rebuild a stored session from its log and report any difference from the database.
    Verify(crate::verify::VerifyArgs),
    /// List the sessions of a timeline database, newest first.
    Sessions(crate::inspect::sessions::SessionsArgs),
    /// Show a session's timeline as a person reads it.
    Show(crate::inspect::show::ShowArgs),
    /// Export a session as frames, markdown, HTML or model turns.
    Export(crate::inspect::export::ExportArgs),
    /// Rebuild a session's databases from a capture of its frames.
    Replay(crate::inspect::replay::ReplayArgs),
    /// Start a new session from the first events of another.
    Fork(crate::inspect::fork::ForkArgs),
    /// Follow a session another process is writing.
    Tail(crate::inspect::tail::TailArgs),
    /// Delete a session (refused while a process writes it).
    Rm(crate::inspect::RmArgs),
    /// Host many sessions over HTTP, Server-Sent Events and WebSocket.
    Serve(crate::serve::ServeArgs),
    /// Be an Agent Client Protocol agent on stdin/stdout, for editors (Zed, JetBrains, ...).
    Acp(crate::acp::AcpArgs),
}

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

pub enum Parsed {
    RunCommand(Box<Invocation>),
    Bench(crate::bench::BenchArgs),
    Verify(crate::verify::VerifyArgs),
    Serve(Box<crate::serve::ServeArgs>),
    Acp(crate::acp::AcpArgs),
    /// One of the session commands (sessions, show, export, replay, fork, tail).
    Inspect(Box<Action>),
}

/// Parses the process arguments; prints usage and exits on a usage error.
pub fn parse() -> Parsed {
    parse_from(std::env::args_os().collect())
}

fn variable_id(name: &str) -> String {
    format!("var:{name}")
}

fn parse_from(args: Vec<OsString>) -> Parsed {
    // First pass: find the command file while its variable flags are still unknown to clap.
    // (--help is left out of this pass so that the help shows the file's variables.)
    let without_help = args.iter().filter(|a| *a != "--help" && *a != "-h");
    let probe = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(without_help)
        .ok();
    let probe_run = probe
        .as_ref()
        .and_then(|m| m.subcommand_matches("run-command"));
    let command_path = probe_run.and_then(|m| m.get_one::<PathBuf>("command_file").cloned());
    let loaded = command_path.map(|path| CommandFile::load(&path));

    if let (Some(Err(_)), Some(probe_run)) = (&loaded, probe_run) {
        // The file's variables are unknown, so its flags cannot be checked: report the load
        // error itself, in the output mode the user asked for.
        if let Ok(run_args) = RunCommandArgs::from_arg_matches(probe_run) {
            let command = loaded.expect("checked above");
            return Parsed::RunCommand(Box::new(Invocation {
                args: run_args,
                command,
                variables: BTreeMap::new(),
            }));
        }
    }

    let mut command = Cli::command();
    if let Some(Ok(file)) = &loaded {
        command = command.mut_subcommand("run-command", |sub| with_variable_flags(sub, file));
    }
    let matches = match (command.try_get_matches_from(&args), &loaded) {
        (Ok(matches), _) => matches,
        (Err(error), Some(Ok(file))) if error.kind() == ErrorKind::UnknownArgument => {
            unknown_flag(&error, file)
        }
        (Err(error), _) => error.exit(),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.action {
        Action::Bench(bench) => Parsed::Bench(bench),
        Action::Verify(verify) => Parsed::Verify(verify),
        Action::Serve(serve) => Parsed::Serve(Box::new(serve)),
        Action::Acp(acp) => Parsed::Acp(acp),
        action @ (Action::Sessions(_)
        | Action::Show(_)
        | Action::Export(_)
        | Action::Replay(_)
        | Action::Fork(_)
        | Action::Tail(_)
        | Action::Rm(_)) => Parsed::Inspect(Box::new(action)),
        Action::RunCommand(run_args) => {
            let sub = matches
                .subcommand_matches("run-command")
                .expect("run-command matched");
            let variables = match &loaded {
                Some(Ok(file)) => file
                    .variables
                    .iter()
                    .filter_map(|v| {
                        Some((
                            v.name.clone(),
                            sub.get_one::<String>(&variable_id(&v.name))?.clone(),
                        ))
                    })
                    .collect(),
                _ => BTreeMap::new(),
            };
            let command = loaded.expect("clap requires the command file");
            Parsed::RunCommand(Box::new(Invocation {
                args: run_args,
                command,
                variables,
            }))
        }
    }
}

/// Exits on a flag `run-command` does not know, saying which variables `file` declares (clap's
/// own tip, to pass it after `--`, is no help: a variable is a flag of its own).
fn unknown_flag(error: &clap::Error, file: &CommandFile) -> ! {
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(flag)) => flag.clone(),
        _ => error.exit(),
    };
    let declared: Vec<String> = file
        .variables
        .iter()
        .map(|v| format!("--{}", v.name))
        .collect();
    let declared = match declared.is_empty() {
        true => "no variables".to_owned(),
        false => format!("the variables {}", declared.join(", ")),
    };
    eprintln!(
        "error: unexpected argument '{flag}': command {:?} declares {declared} (each a flag: --NAME VALUE); `reel run-command FILE --help` lists every flag",
        file.name
    );
    std::process::exit(2)
}

/// `run-command` with one `--NAME VALUE` flag per variable of `file`.
fn with_variable_flags(mut sub: clap::Command, file: &CommandFile) -> clap::Command {
    sub = match file.description.is_empty() {
        true => sub.about(file.name.clone()),
        false => sub.about(format!("{}: {}", file.name, file.description)),
    };
    for variable in &file.variables {
        let mut arg = Arg::new(variable_id(&variable.name))
            .long(variable.name.clone())
            .value_name("VALUE")
            .help(variable.description.clone())
            .help_heading("Command variables");
        arg = match &variable.default {
            Some(default) => arg.default_value(default.clone()),
            None => arg.required(true),
        };
        sub = sub.arg(arg);
    }
    sub
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_command(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("cmd.yaml");
        std::fs::write(
            &path,
            "name: t\ndescription: d\nprompt: 'About {{ topic }} in {{ style }}'\nvariables:\n  - name: topic\n    default: the sea\n  - name: style\n    default: prose\n",
        )
        .unwrap();
        path
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn variables_become_flags_with_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_command(dir.path());
        let p = path.to_str().unwrap();
        let Parsed::RunCommand(inv) = parse_from(args(&[
            "reel",
            "run-command",
            p,
            "--topic",
            "autumn",
            "--output",
            "jsonl",
        ])) else {
            panic!("expected run-command")
        };
        assert_eq!(inv.variables["topic"], "autumn");
        assert_eq!(inv.variables["style"], "prose");
        assert!(inv.args.frames_on_stdout());
    }
}
