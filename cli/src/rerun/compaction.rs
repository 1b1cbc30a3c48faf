//! A compaction a client asked for between two runs (a `compact` request), done again at the
//! same place of the re-run, its summary answered as recorded (or by the live model).

use std::sync::Arc;

use reel_engine::{CompactRequest, CompactionReason, LogEntry, Provider, Session};
use reel_proto::Any;
use reel_providers::{CallRecorder, RecordedProvider, RequestDivergence};
use tokio_util::sync::CancellationToken;

use crate::{prepare::Prepared, run_args::ModelMode};

/// Compacts `session` again if the recording's events `between` two runs hold a requested
/// compaction. A summary request that differs from the recorded one is returned.
pub async fn compact_between(
    session: &mut Session,
    prepared: &Prepared,
    model: ModelMode,
    between: &[LogEntry],
    cancel: &CancellationToken,
) -> Option<RequestDivergence> {
    let requested = CompactionReason::Requested.as_str();
    let compacted = between.iter().find_map(|entry| match &entry.event {
        Any::ChatContextCompacted(compacted) if compacted.reason == requested => Some(compacted),
        _ => None,
    })?;
    let mut recorder = CallRecorder::default();
    between.iter().for_each(|entry| recorder.apply(entry));
    let recorded = RecordedProvider::new(recorder.calls());
    let provider: &dyn Provider = match model {
        ModelMode::Recorded => &recorded,
        ModelMode::Live => prepared.provider.as_ref(),
    };
    let policy = prepared.context_policy.clone();
    // The event holds the policy's instructions and the request's together.
    let all = compacted.instructions.as_str();
    let instructions = match policy.instructions.as_deref() {
        Some(own) if !own.is_empty() => all
            .strip_prefix(own)
            .map_or(all, |rest| rest.trim_start_matches("\n\n")),
        _ => all,
    };
    let request = CompactRequest {
        request_id: Arc::from(""),
        instructions: instructions.to_owned(),
        system_prompt: prepared.system_prompt.clone(),
        settings: prepared.settings.clone(),
        provider,
        budgets: prepared.budgets,
        context_policy: policy,
    };
    let mut run = session.start_compaction(request).await;
    session.drive(&mut run, cancel).await;
    recorded.divergence()
}
