//! Command-line parsing.
//!
//! `run-command` turns each variable of the command file into a flag (`--topic autumn`), so the
//! arguments are parsed twice: once leniently to find the command file, then strictly with the
//! file's variables added as flags.

use std::{collections::BTreeMap, ffi::OsString, path::PathBuf};

use clap::{
    Arg, CommandFactory, FromArgMatches, Parser, Subcommand,
    error::{ContextKind, ContextValue, ErrorKind},
};

use reel_engine::error_chain;

use crate::{
    command_file::CommandFile,
    commands, exit,
    run_args::{Invocation, RunCommandArgs},
};

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
    /// Decide on a tool call a stored session's run waits for, and continue the run (the same
    /// as run-command FILE --session-id SESSION --resume --approve CALL_ID).
    Approve(ApproveArgs),
    /// Stream a long scripted reply through the whole path and print throughput and memory.
    Bench(reel_bench::BenchArgs),
    /// Rebuild a stored session from its log and report any difference from the database.
    Verify(crate::commands::verify::VerifyArgs),
    /// List the sessions of a timeline database, newest first.
    Sessions(crate::commands::sessions::SessionsArgs),
    /// Show a session's timeline as a person reads it.
    Show(crate::commands::show::ShowArgs),
    /// Export a session as frames, markdown, HTML or model turns.
    Export(crate::commands::export::ExportArgs),
    /// Rebuild a session's databases from a capture of its frames.
    Replay(crate::commands::replay::ReplayArgs),
    /// Re-run a stored session against its recording: its prompts, each model call answered
    /// with the recorded output, its tools run again; exit 0 when it goes the same way, 3 at
    /// the first divergence (the same as run-command --command's FILE --rerun SESSION).
    Rerun(RerunArgs),
    /// Re-run recorded sessions as a regression suite: a line per session, a summary, JUnit XML
    /// with --junit; exit 0 when every one went the same way.
    Test(crate::commands::test::TestArgs),
    /// Compare two stored sessions turn by turn (texts, tool calls and results, statuses,
    /// usage); exit 0 when they are equal, 1 when they differ.
    Diff(crate::commands::diff::DiffArgs),
    /// Start a new session from the first events of another.
    Fork(crate::commands::fork::ForkArgs),
    /// Follow a session another process is writing.
    Tail(crate::commands::tail::TailArgs),
    /// Delete a session (refused while a process writes it).
    Rm(crate::commands::rm::RmArgs),
    /// Remove whole sessions for their age (never one a process holds); --dry-run lists them.
    Prune(crate::commands::prune::PruneArgs),
    /// Erase content from a stored session (a range of events, a pattern, an entity or all of
    /// it) without breaking its log; refused while a process writes it.
    Redact(crate::commands::redact::RedactArgs),
    /// Find where the stored sessions said something: messages, reasoning, tool calls and
    /// results, newest first.
    Search(crate::commands::search::SearchArgs),
    /// Host many sessions over HTTP, Server-Sent Events and WebSocket.
    Serve(crate::commands::serve::ServeArgs),
    /// Be an Agent Client Protocol agent on stdin/stdout, for editors (Zed, JetBrains, ...).
    Acp(crate::commands::acp::AcpArgs),
}

/// `reel approve`'s arguments: the run it continues needs the command it runs.
#[derive(clap::Args, Debug)]
pub struct ApproveArgs {
    /// The command file the session runs.
    pub command_file: PathBuf,
    /// The session whose run waits.
    pub session: String,
    /// The call that waits for the decision (its tool call id, as the snapshot's
    /// awaiting_approval calls, the inbox and run-command's message name it).
    pub call_id: String,
    /// run-command's flags: --decision allow_once|allow_always|reject_once (required),
    /// --decision-message TEXT, --timeline-db PATH or --timeline-dsn URL, the output, the
    /// command's variables.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FLAGS"
    )]
    pub flags: Vec<OsString>,
}

impl ApproveArgs {
    /// The `run-command` arguments this approve stands for.
    fn as_run_command(&self, program: OsString) -> Vec<OsString> {
        let mut args = vec![
            program,
            "run-command".into(),
            self.command_file.clone().into_os_string(),
            "--session-id".into(),
            self.session.clone().into(),
            "--resume".into(),
            "--approve".into(),
            self.call_id.clone().into(),
        ];
        args.extend(self.flags.iter().cloned());
        args
    }
}

/// `reel rerun`'s trailing flags as `run-command` takes them. Clap hands every flag after the
/// first of run-command's to the trailing list, the re-run's own too (`--tools`, `--until`,
/// `--format`, `--session-id`, and `--model recorded|live`; another `--model` is the
/// provider's): those are spelled as run-command knows them, each as `--flag VALUE`.
fn own_flags_spelled_for_run_command(flags: &[OsString]) -> Vec<OsString> {
    let mut spelled = Vec::with_capacity(flags.len());
    let mut rest = flags.iter();
    while let Some(flag) = rest.next() {
        let text = flag.to_string_lossy();
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (text.as_ref(), None),
        };
        let renamed = match name {
            "--tools" => "--rerun-tools",
            "--until" => "--rerun-until",
            "--format" => "--rerun-format",
            "--session-id" => "--session-id",
            "--model" => "--rerun-model",
            _ => {
                spelled.push(flag.clone());
                continue;
            }
        };
        let value = match inline {
            Some(value) => Some(OsString::from(value)),
            None => rest.next().cloned(),
        };
        let is_mode = |v: &OsString| v == "recorded" || v == "live";
        if name == "--model" && !value.as_ref().is_some_and(is_mode) {
            // The provider's model, for run-command.
            spelled.push("--model".into());
            spelled.extend(value);
            continue;
        }
        spelled.push(renamed.into());
        spelled.extend(value);
    }
    spelled
}

/// `reel rerun`'s arguments: the re-run is a run of a command file.
#[derive(clap::Args, Debug)]
pub struct RerunArgs {
    /// The session to re-run.
    pub session: String,
    /// The command file to re-run it with (the session's own, or a changed one to see what
    /// the change does).
    #[arg(long, value_name = "FILE")]
    pub command: PathBuf,
    /// Whether the tools run again (and their results are compared) or answer with the
    /// recorded results.
    #[arg(long, value_enum, default_value_t = crate::run_args::ToolsMode::Run)]
    pub tools: crate::run_args::ToolsMode,
    /// Whether each model call is answered as recorded (a check, stopping at the first
    /// divergence) or by the command's model again (an evaluation, reporting every difference).
    #[arg(long, value_enum, default_value_t = crate::run_args::ModelMode::Recorded)]
    pub model: crate::run_args::ModelMode,
    /// Re-run up to this ordinal of the session's log.
    #[arg(long, value_name = "ORDINAL")]
    pub until: Option<u64>,
    /// The report as text or as one JSON document.
    #[arg(long, value_enum, default_value_t = crate::run_args::ReportFormat::Text)]
    pub format: crate::run_args::ReportFormat,
    /// The re-run's session id (default: a new one).
    #[arg(long, value_name = "NEW")]
    pub session_id: Option<String>,
    #[command(flatten)]
    pub database: crate::stored::Database,
    /// More of run-command's flags: the command's variables, budgets, ...
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FLAGS"
    )]
    pub flags: Vec<OsString>,
}

impl RerunArgs {
    /// The `run-command` arguments this re-run stands for.
    fn as_run_command(&self, program: OsString) -> Vec<OsString> {
        let mut args = vec![
            program,
            "run-command".into(),
            self.command.clone().into_os_string(),
            "--rerun".into(),
            self.session.clone().into(),
        ];
        // One of the re-run's own flags given among the trailing ones wins over its default.
        let flags = own_flags_spelled_for_run_command(&self.flags);
        let mut own = vec![
            ("--rerun-tools", Some(self.tools.as_flag().to_owned())),
            ("--rerun-model", Some(self.model.as_flag().to_owned())),
            ("--rerun-format", Some(self.format.as_flag().to_owned())),
            ("--rerun-until", self.until.map(|until| until.to_string())),
        ];
        let id = self.session_id.clone().unwrap_or_else(reel_engine::new_id);
        own.push(("--session-id", Some(id)));
        for (name, value) in own {
            if let Some(value) = value
                && !flags.iter().any(|flag| flag == name)
            {
                args.extend([name.into(), value.into()]);
            }
        }
        if let Some(path) = &self.database.timeline_db {
            args.extend(["--timeline-db".into(), path.clone().into_os_string()]);
        }
        if let Some(dsn) = &self.database.timeline_dsn {
            args.extend(["--timeline-dsn".into(), dsn.clone().into()]);
        }
        args.extend(flags);
        args
    }
}

pub enum Parsed {
    RunCommand(Box<Invocation>),
    /// Every other command, as clap parsed it.
    Other(Box<Action>),
}

/// The async runtime's worker threads, when the command wants other than tokio's default (a
/// thread a core).
pub fn runtime_workers(parsed: &Parsed) -> Option<usize> {
    match parsed {
        Parsed::Other(action) => match &**action {
            Action::Serve(args) => commands::serve::runtime_workers(args),
            _ => None,
        },
        Parsed::RunCommand(_) => None,
    }
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
        action @ (Action::Bench(_)
        | Action::Verify(_)
        | Action::Serve(_)
        | Action::Acp(_)
        | Action::Sessions(_)
        | Action::Show(_)
        | Action::Export(_)
        | Action::Replay(_)
        | Action::Fork(_)
        | Action::Tail(_)
        | Action::Rm(_)
        | Action::Prune(_)
        | Action::Redact(_)
        | Action::Search(_)
        | Action::Diff(_)
        | Action::Test(_)) => Parsed::Other(Box::new(action)),
        // `reel approve` is `run-command --resume --approve`: parsed as that, with the command
        // file's variables as flags.
        Action::Approve(approve) => parse_from(approve.as_run_command(args[0].clone())),
        Action::Rerun(rerun) => parse_from(rerun.as_run_command(args[0].clone())),
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

/// Runs a parsed command; its exit status.
pub async fn run(parsed: Parsed) -> u8 {
    let action = match parsed {
        Parsed::RunCommand(invocation) => return commands::run_command::run(*invocation).await,
        Parsed::Other(action) => *action,
    };
    let result = match action {
        Action::Bench(args) => return reel_bench::run(args).await,
        Action::Verify(args) => return commands::verify::run(args).await,
        Action::Diff(args) => return commands::diff::run(args).await,
        Action::Test(args) => return commands::test::run(args).await,
        Action::Serve(args) => return commands::serve::run(args).await,
        Action::Acp(args) => return commands::acp::run(args).await,
        Action::Sessions(args) => commands::sessions::run(args).await,
        Action::Show(args) => commands::show::run(args).await,
        Action::Export(args) => commands::export::run(args).await,
        Action::Replay(args) => commands::replay::run(args).await,
        Action::Fork(args) => commands::fork::run(args).await,
        Action::Tail(args) => commands::tail::run(args).await,
        Action::Rm(args) => commands::rm::run(args).await,
        Action::Prune(args) => commands::prune::run(args).await,
        Action::Redact(args) => commands::redact::run(args).await,
        Action::Search(args) => commands::search::run(args).await,
        Action::RunCommand(_) | Action::Approve(_) | Action::Rerun(_) => {
            unreachable!("parsed as an invocation")
        }
    };
    match result {
        Ok(()) => exit::OK,
        Err(error) => {
            tracing::error!("{}", error_chain(&*error));
            exit::FAILED
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
