//! What a one-shot run says about a run that waits for a person: which calls wait, and the
//! command that decides on one (`reel approve`).

use reel_engine::{Session, ToolCallStatus};

use crate::run_args::RunCommandArgs;

/// What the hint to decide on a waiting call names: the command file, and the flag of the
/// timeline database when one was given.
pub(super) struct ApproveHint {
    command_file: std::path::PathBuf,
    database: String,
}

impl ApproveHint {
    pub(super) fn of(args: &RunCommandArgs) -> Self {
        let database = match (&args.timeline_db, &args.timeline_dsn) {
            (Some(path), _) => format!(" --timeline-db {}", path.display()),
            (None, Some(dsn)) => format!(" --timeline-dsn {dsn}"),
            (None, None) => String::new(),
        };
        Self {
            command_file: args.command_file.clone(),
            database,
        }
    }
}

/// The calls the session's run waits on, and how to decide on them.
pub(super) fn waiting_calls(session: &Session, hint: &ApproveHint) -> String {
    let calls: Vec<String> = session
        .timeline()
        .unanswered_tool_calls()
        .into_iter()
        .filter(|call| call.status == String::from(ToolCallStatus::AwaitingApproval))
        .map(|call| format!("{} ({} {})", call.tool_call_id, call.tool_name, call.input))
        .collect();
    format!(
        "waiting: {}; decide with `reel approve {} {} CALL_ID --decision allow_once|allow_always|reject_once{}`",
        calls.join(", "),
        hint.command_file.display(),
        session.id(),
        hint.database
    )
}
