//! Re-running a recorded session (`reel rerun`): a new session is fed the original's inputs,
//! turn by turn; each model call is answered with the recorded call's output (the recorded
//! provider, which first compares the request it is sent with the recorded one), and the tools
//! run (or answer with the recorded results). After each turn the re-run's turn (folded from
//! its own events as they are written) is compared with the original's; the first difference
//! stops it.
//!
//! Every kind of input is fed back where it came ([`inputs`]): the prompts, steers and
//! follow-ups, a client tool's answers, a person's decisions and a cancel. A compaction in a
//! run happens again where the context policy says, its summary answered as recorded.

mod compaction;
mod inputs;
mod recorded_results;
mod report;
mod tap;

use std::sync::Arc;

use anyhow::bail;
use reel_engine::{ActiveRun, LogEntry, Provider, RunFailure, RunOutcome, RunRequest, Session};
use reel_proto::chat::ChatSessionRerun;
use reel_providers::{CallRecorder, RecordedProvider};
use reel_storage::TimelineStore;
use tokio_util::sync::CancellationToken;

pub use report::{Divergence, Report};

use crate::{
    prepare::Prepared,
    run_args::{ModelMode, ToolsMode},
    stored::{
        compare::{Difference, differences},
        turns::{Turn, TurnReader},
    },
};
use inputs::{Fed, RecordedInputs};
use recorded_results::RecordedResults;
use tap::EventTap;

/// What to re-run.
pub struct Plan {
    pub original: String,
    /// Up to this ordinal of the original (its whole log by default).
    pub until: Option<u64>,
    pub tools: ToolsMode,
    pub model: ModelMode,
}

/// Re-runs `plan.original` into `session` (new, stored in `store`'s database).
pub async fn rerun(
    session: &mut Session,
    prepared: &Prepared,
    store: &mut TimelineStore,
    plan: &Plan,
    cancel: &CancellationToken,
) -> anyhow::Result<Report> {
    let Some(summary) = reel_engine::SessionCatalog::summary(store, &plan.original).await? else {
        bail!("there is no session {:?} to re-run", plan.original);
    };
    let until = plan.until.unwrap_or(summary.events).min(summary.events);
    let none: Arc<str> = Arc::from("");
    let origin = ChatSessionRerun {
        session_id: plan.original.clone(),
        until_ordinal: until,
        tools: plan.tools.as_flag().into(),
        model: plan.model.as_flag().into(),
    };
    session.append(&none, origin).await;
    let mut tap = EventTap::attach(session);
    let mut report = Report {
        session: plan.original.clone(),
        rerun: session.id().to_owned(),
        equal: true,
        turns: 0,
        requests_not_compared: 0,
        divergences: Vec::new(),
    };
    let mut originals = TurnReader::new(&plan.original, until);
    while let Some((turn, events)) = originals.next_with_events(store).await? {
        if turn.status.is_empty() {
            // The recording ends in the middle of this run (--until, or it still goes on).
            break;
        }
        let mut inputs = RecordedInputs::of(&events).map_err(|unfeedable| {
            anyhow::anyhow!(
                "session {:?}: {unfeedable}; re-run up to the event before it with --until {}",
                plan.original,
                unfeedable.ordinal.saturating_sub(1)
            )
        })?;
        report.turns += 1;
        let between = originals.take_between();
        let compacting =
            compaction::compact_between(session, prepared, plan.model, &between, cancel);
        if let Some(request) = compacting.await {
            let at = session.log().last_ordinal();
            let part = format!("{} of the compaction before it", request.part.as_str());
            let divergence = Divergence::of_request(report.turns, request, (at, at));
            report.divergences.push(Divergence {
                part: Some(part),
                ..divergence
            });
            break;
        }
        let recorded = recorded_calls(&events);
        let provider: &dyn Provider = match plan.model {
            ModelMode::Recorded => &recorded,
            ModelMode::Live => prepared.provider.as_ref(),
        };
        let recorded_tools;
        let tools = match plan.tools {
            ToolsMode::Run => &prepared.tools,
            ToolsMode::Recorded => {
                let answers = RecordedResults::of(&events);
                recorded_tools = prepared.tools.answered_by(Arc::new(answers));
                &recorded_tools
            }
        };
        let before = session.log().last_ordinal();
        // A follow-up queued during the last run starts this one, as it did in the recording.
        let request_id = match session.next_follow_up() {
            Some(queued) => {
                session.deliver_follow_up(&queued).await;
                Arc::from(queued.request_id.as_str())
            }
            None => Arc::clone(&none),
        };
        let request = RunRequest {
            request_id,
            prompt: turn.prompt.clone(),
            system_prompt: prepared.system_prompt.clone(),
            settings: prepared.settings.clone(),
            provider,
            tools,
            // The recording answers client tools when a client answered them there.
            tool_client: had_client(&events),
            approver: None,
            budgets: prepared.budgets,
            context_policy: prepared.context_policy.clone(),
        };
        let waited = drive_turn(session, request, &mut inputs, cancel).await;
        session.flush().await;
        if let Err(failure) = session.storage_holds().await {
            bail!("the re-run's store failed: {}", failure.message);
        }
        let after = session.log().last_ordinal();
        let rerun_span = (before + 1, after);
        report.requests_not_compared += recorded.unchecked_requests();
        let rerun_events = tap.between(before, after).await;
        let Some(rerun_turn) = Turn::of(rerun_events.iter().map(Arc::as_ref)) else {
            bail!("the re-run of turn {} recorded no run", report.turns);
        };
        let compared = Compared {
            turn: report.turns,
            original: &turn,
            rerun: &rerun_turn,
            rerun_span,
            waited_at: waited.as_ref().map(|(_, at)| *at),
        };
        let input = compared.input_divergence(waited, &inputs);
        let found = differences(&turn, &rerun_turn);
        if plan.model == ModelMode::Live {
            // An evaluation: every difference, and on to the next turn.
            report.divergences.extend(input);
            let every = found.into_iter().map(|d| compared.divergence(d, None));
            report.divergences.extend(every);
            continue;
        }
        if let Some(divergence) = compared.first_divergence(found, &recorded, input) {
            report.divergences.push(divergence);
            break;
        }
    }
    report.equal = report.divergences.is_empty();
    Ok(report)
}

/// The recorded model calls of a run's events, played back in order.
fn recorded_calls(events: &[LogEntry]) -> RecordedProvider {
    let mut recorder = CallRecorder::default();
    events.iter().for_each(|entry| recorder.apply(entry));
    RecordedProvider::new(recorder.calls())
}

/// Whether a client answered client tool calls in this run (it waited for one).
fn had_client(events: &[LogEntry]) -> bool {
    events.iter().any(|entry| {
        matches!(&entry.event, reel_proto::Any::ChatToolExecutionStarted(started)
            if started.status == "awaiting_client")
    })
}

/// Runs `request` to its end, feeding `inputs` where they came. Returns what the run waited
/// for that the recording does not have and the last ordinal before it was stopped, if it
/// did.
async fn drive_turn(
    session: &mut Session,
    request: RunRequest<'_>,
    inputs: &mut RecordedInputs,
    cancel: &CancellationToken,
) -> Option<(String, u64)> {
    let mut run = session.start_run(request).await;
    // start_run appends the user's message, then ChatRunStarted.
    let run_started = run.ordinal_before() + 2;
    let mut blocked = false;
    loop {
        match inputs
            .feed_next(session, &mut run, run_started, blocked)
            .await
        {
            Fed::Input => {
                blocked = false;
                continue;
            }
            Fed::Cancel => {
                session.stop_run(&mut run).await;
                return None;
            }
            // A run that waits for a decision goes on only with an input: the next one the
            // recording has comes now, wherever it came there.
            Fed::Nothing if run.awaits_decision() && !blocked => {
                blocked = true;
                continue;
            }
            Fed::Nothing if run.awaits_decision() => return Some(stuck(session, &mut run).await),
            Fed::Nothing => {}
        }
        let event = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                session.stop_run(&mut run).await;
                return None;
            }
            event = run.next_event() => event,
        };
        if session.step(&mut run, event).await.is_some() {
            return None;
        }
        if let Some(failure) = session.durable_failure() {
            session
                .fail_run(&mut run, RunFailure::storage(&failure))
                .await;
            return None;
        }
    }
}

/// Stops a run that waits for a decision the recording does not have; what it waited for,
/// and where.
async fn stuck(session: &mut Session, run: &mut ActiveRun<'_>) -> (String, u64) {
    let call = run
        .calls_awaiting_decision()
        .next()
        .unwrap_or_default()
        .to_owned();
    let at = session.log().last_ordinal();
    let outcome = session.stop_run(run).await;
    debug_assert_eq!(outcome, RunOutcome::Stopped);
    (
        format!("the re-run waited for a decision on call {call}"),
        at,
    )
}

/// One turn of the original beside its re-run.
struct Compared<'a> {
    turn: usize,
    original: &'a Turn,
    rerun: &'a Turn,
    rerun_span: (u64, u64),
    /// Where the re-run's run waited in vain for an input and was stopped.
    waited_at: Option<u64>,
}

impl Compared<'_> {
    /// `difference` as a divergence, at `at` in both (the whole turns by default).
    fn divergence(
        &self,
        difference: Difference,
        at: Option<((u64, u64), (u64, u64))>,
    ) -> Divergence {
        let (original, rerun) = at.unwrap_or((self.original.ordinals, self.rerun_span));
        Divergence::from_difference(self.turn, difference, original, rerun)
    }

    /// An input of the recording the re-run did not take, or one it waited for in vain.
    fn input_divergence(
        &self,
        waited: Option<(String, u64)>,
        inputs: &RecordedInputs,
    ) -> Option<Divergence> {
        let (at, recorded, now) = match (waited, inputs.first_left()) {
            (Some((waited, _)), _) => (self.original.ordinals, "no such input".to_owned(), waited),
            (None, Some((ordinal, what))) => (
                (ordinal, ordinal),
                what,
                "the re-run's run ended before it took it".to_owned(),
            ),
            (None, None) => return None,
        };
        Some(Divergence {
            turn: self.turn,
            kind: "input".into(),
            part: None,
            original: at,
            rerun: self.rerun_span,
            recorded,
            now,
        })
    }

    /// The divergence a recorded re-run stops at, in the order things happened: a tool
    /// result the re-run made comes before the model call that reads it (unless the run had
    /// waited in vain before: stopping it wrote that result); a request that differs before
    /// what the model then answered.
    fn first_divergence(
        &self,
        found: Vec<Difference>,
        recorded: &RecordedProvider,
        input: Option<Divergence>,
    ) -> Option<Divergence> {
        let result_index = |d: &Difference| {
            let k = d
                .field
                .strip_prefix("tool result ")?
                .parse::<usize>()
                .ok()?;
            (k >= 1 && k <= self.rerun.tool_results.len()).then_some(k - 1)
        };
        let before_wait = |k: usize| {
            let made = self.rerun.result_ordinals.get(k).copied().unwrap_or(0);
            self.waited_at.is_none_or(|at| made <= at)
        };
        let first_result = found
            .iter()
            .position(|d| result_index(d).is_some_and(before_wait));
        if let Some(at) = first_result {
            let k = result_index(&found[at]).expect("found above");
            let at_result =
                |t: &Turn, span: (u64, u64)| t.result_ordinals.get(k).map_or(span, |o| (*o, *o));
            let places = (
                at_result(self.original, self.original.ordinals),
                at_result(self.rerun, self.rerun_span),
            );
            let first = found.into_iter().nth(at).expect("found above");
            return Some(self.divergence(first, Some(places)));
        }
        if let Some(request) = recorded.divergence() {
            return Some(Divergence::of_request(self.turn, request, self.rerun_span));
        }
        if input.is_some() {
            return input;
        }
        if let Some(first) = found.into_iter().next() {
            return Some(self.divergence(first, None));
        }
        (recorded.calls_left() > 0).then(|| Divergence {
            turn: self.turn,
            kind: "model calls".into(),
            part: None,
            original: self.original.ordinals,
            rerun: self.rerun_span,
            recorded: format!("{} more model calls", recorded.calls_left()),
            now: "no more".into(),
        })
    }
}
