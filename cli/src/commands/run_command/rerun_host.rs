//! `run-command --rerun` (`reel rerun`): the host of a re-run, whose stdout is the report.

use reel_engine::{Session, error_chain};
use reel_storage::TimelineStore;
use tokio_util::sync::CancellationToken;

use super::{Ending, setup_failed, start_tool_servers};
use crate::{prepare::Prepared, run_args::RunCommandArgs};

/// `reel rerun`: re-runs the stored session `--rerun` names into this new one, and writes the
/// report on stdout.
pub(super) async fn rerun_into(
    mut session: Session,
    prepared: Prepared,
    store: &mut TimelineStore,
    args: &RunCommandArgs,
    cancel: &CancellationToken,
) -> (Session, Ending) {
    let plan = crate::rerun::Plan {
        original: args.rerun.clone().unwrap_or_default(),
        until: args.rerun_until,
        tools: args.rerun_tools,
        model: args.rerun_model,
    };
    let mut prepared = prepared;
    if let Err(error) = start_tool_servers(&mut session, &mut prepared).await {
        return setup_failed(session, &error).await;
    }
    match crate::rerun::rerun(&mut session, &prepared, store, &plan, cancel).await {
        Ok(report) => {
            if let Err(error) = report.print(args.rerun_format) {
                tracing::error!("cannot write the report: {error}");
                return (session, Ending::Failed);
            }
            let ending = if report.equal {
                Ending::Ok
            } else {
                Ending::Diverged
            };
            (session, ending)
        }
        Err(error) => {
            tracing::error!("{}", error_chain(error.as_ref()));
            (session, Ending::Failed)
        }
    }
}
