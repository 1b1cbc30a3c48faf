//! Re-running a recorded session (`reel rerun`): a new session is fed the original's prompts,
//! turn by turn; each model call is answered with the recorded call's output (the recorded
//! provider, which first compares the request it is sent with the recorded one), and the tools
//! run (or answer with the recorded results). After each turn the re-run's turn is read back
//! from the store and compared with the original's; the first difference stops it.
//!
//! What it feeds back is the prompts of the runs (a follow-up is the prompt of the run it
//! started); a compaction in a run happens again where the context policy says, its summary
//! answered as recorded. A turn with another kind of input (a steer, a client tool's answer, a
//! person's decision, a cancel) is refused, naming the event: re-running those is not done yet.

use std::{collections::HashMap, sync::Arc};

use anyhow::bail;
use futures::{FutureExt, future::BoxFuture};
use reel_engine::{
    LogEntry, Provider, RunRequest, Session, ToolCallContext, ToolOutput, ToolService,
};
use reel_proto::{Any, chat::ChatSessionRerun};
use reel_providers::{CallRecorder, RecordedProvider};
use reel_storage::TimelineStore;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::{
    prepare::Prepared,
    run_args::{ModelMode, ReportFormat, ToolsMode},
    stored::{
        compare::{Difference, differences},
        turns::TurnReader,
    },
};

/// What to re-run.
pub struct Plan {
    pub original: String,
    /// Up to this ordinal of the original (its whole log by default).
    pub until: Option<u64>,
    pub tools: ToolsMode,
    pub model: ModelMode,
}

/// How a re-run went.
#[derive(Debug, Serialize)]
pub struct Report {
    pub session: String,
    pub rerun: String,
    pub equal: bool,
    /// The turns re-run (up to and with the one that diverged, with the recorded model).
    pub turns: usize,
    /// With the recorded model, the first divergence (the re-run stopped there); with the live
    /// model, every difference of every turn.
    pub divergences: Vec<Divergence>,
}

/// Where and how the re-run went another way than the recording.
#[derive(Debug, Serialize)]
pub struct Divergence {
    pub turn: usize,
    /// `request`, `prompt`, `text`, `tool call N`, `tool result N`, `status`, `usage` or
    /// `model calls`.
    pub kind: String,
    /// For a request: the part that differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// The original's events (the recorded call's start for a request).
    pub original: (u64, u64),
    /// The re-run's events of that turn.
    pub rerun: (u64, u64),
    pub recorded: String,
    pub now: String,
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
    let mut report = Report {
        session: plan.original.clone(),
        rerun: session.id().to_owned(),
        equal: true,
        turns: 0,
        divergences: Vec::new(),
    };
    let mut originals = TurnReader::new(&plan.original, until);
    while let Some((turn, events)) = originals.next_with_events(store).await? {
        if turn.status.is_empty() {
            // The recording ends in the middle of this run (--until, or it still goes on).
            break;
        }
        refuse_unsupported(&plan.original, &events)?;
        report.turns += 1;
        let mut recorder = CallRecorder::default();
        events.iter().for_each(|entry| recorder.apply(entry));
        let recorded = RecordedProvider::new(recorder.calls());
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
        let request = RunRequest {
            request_id: Arc::clone(&none),
            prompt: turn.prompt.clone(),
            system_prompt: prepared.system_prompt.clone(),
            settings: prepared.settings.clone(),
            provider,
            tools,
            tool_client: false,
            approver: None,
            budgets: prepared.budgets,
            context_policy: prepared.context_policy.clone(),
        };
        session.run(request, cancel).await;
        session.flush().await;
        if let Err(failure) = session.storage_holds().await {
            bail!("the re-run's store failed: {}", failure.message);
        }
        let after = session.log().last_ordinal();
        let rerun_span = (before + 1, after);
        let mut again = TurnReader::between(session.id(), before, after);
        let Some(rerun_turn) = again.next(store).await? else {
            bail!(
                "the re-run of turn {} left no run in the store",
                report.turns
            );
        };
        let found = differences(&turn, &rerun_turn);
        if plan.model == ModelMode::Live {
            // An evaluation: every difference, and on to the next turn.
            let every = found
                .into_iter()
                .map(|d| from_difference(report.turns, d, turn.ordinals, rerun_span));
            report.divergences.extend(every);
            continue;
        }
        // A tool result the re-run made comes before the model call that reads it: when it
        // differs, it is the first divergence.
        let result_index = |d: &Difference| {
            let k = d
                .field
                .strip_prefix("tool result ")?
                .parse::<usize>()
                .ok()?;
            (k >= 1 && k <= rerun_turn.tool_results.len()).then_some(k - 1)
        };
        let tool_result = found.iter().position(|d| result_index(d).is_some());
        let divergence = if let Some(at) = tool_result {
            let k = result_index(&found[at]).expect("found above");
            let at_ordinal = |t: &crate::stored::turns::Turn, span: (u64, u64)| {
                t.result_ordinals.get(k).map_or(span, |o| (*o, *o))
            };
            let original = at_ordinal(&turn, turn.ordinals);
            let rerun = at_ordinal(&rerun_turn, rerun_span);
            let first = found.into_iter().nth(at).expect("found above");
            Some(from_difference(report.turns, first, original, rerun))
        } else if let Some(request) = recorded.divergence() {
            Some(Divergence {
                turn: report.turns,
                kind: "request".into(),
                part: Some(request.part.as_str().to_owned()),
                original: (request.ordinal, request.ordinal),
                rerun: rerun_span,
                recorded: request.recorded,
                now: request.now,
            })
        } else if let Some(first) = found.into_iter().next() {
            Some(from_difference(
                report.turns,
                first,
                turn.ordinals,
                rerun_span,
            ))
        } else if recorded.calls_left() > 0 {
            Some(Divergence {
                turn: report.turns,
                kind: "model calls".into(),
                part: None,
                original: turn.ordinals,
                rerun: rerun_span,
                recorded: format!("{} more model calls", recorded.calls_left()),
                now: "no more".into(),
            })
        } else {
            None
        };
        if let Some(divergence) = divergence {
            report.divergences.push(divergence);
            break;
        }
    }
    report.equal = report.divergences.is_empty();
    Ok(report)
}

impl Report {
    /// Writes the report on stdout as `format` says.
    pub fn print(&self, format: ReportFormat) -> std::io::Result<()> {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if format == ReportFormat::Json {
            serde_json::to_writer(&mut out, self)?;
            return writeln!(out);
        }
        if self.divergences.is_empty() {
            return writeln!(
                out,
                "equal: {} re-ran {} turns of {} the same way",
                self.rerun, self.turns, self.session
            );
        }
        for divergence in &self.divergences {
            let what = match &divergence.part {
                Some(part) => format!("{} ({part})", divergence.kind),
                None => divergence.kind.clone(),
            };
            writeln!(
                out,
                "diverged at turn {}: {what}\n  original: events {}-{} of {}\n  re-run: events {}-{} of {}\n  recorded: {}\n  now: {}",
                divergence.turn,
                divergence.original.0,
                divergence.original.1,
                self.session,
                divergence.rerun.0,
                divergence.rerun.1,
                self.rerun,
                divergence.recorded,
                divergence.now
            )?;
        }
        Ok(())
    }
}

fn from_difference(
    turn: usize,
    difference: Difference,
    original: (u64, u64),
    rerun: (u64, u64),
) -> Divergence {
    Divergence {
        turn,
        kind: difference.field,
        part: None,
        original,
        rerun,
        recorded: difference.a,
        now: difference.b,
    }
}

/// Refuses a turn with an input a re-run does not feed back yet, naming its event.
fn refuse_unsupported(original: &str, events: &[LogEntry]) -> anyhow::Result<()> {
    for entry in events {
        let what = match &entry.event {
            // A follow-up queued during a run is the next run's prompt: fed as such.
            Any::ChatPromptQueued(queued) if queued.kind == "follow_up" => continue,
            Any::ChatPromptQueued(_) | Any::ChatPromptDelivered(_) => "a steer",
            Any::ChatToolApprovalRequested(_) => "a person's decision on a tool call",
            Any::ChatToolExecutionStarted(started) if started.status == "awaiting_client" => {
                "a client tool's answer"
            }
            Any::ChatRunStopped(_) => "a cancel",
            _ => continue,
        };
        bail!(
            "event {} of session {original:?} is {what}: re-running it is not supported yet; re-run up to the event before it with --until {}",
            entry.ordinal,
            entry.ordinal.saturating_sub(1)
        );
    }
    Ok(())
}

/// The recorded results of a turn's tool calls, by call id: what `--tools recorded` answers.
#[derive(Debug)]
struct RecordedResults(HashMap<String, ToolOutput>);

impl RecordedResults {
    fn of(events: &[LogEntry]) -> Self {
        let results = events
            .iter()
            .filter_map(|entry| match &entry.event {
                Any::ChatToolResultReady(result) => Some((
                    result.tool_call_id.clone(),
                    ToolOutput {
                        result: result.result.clone(),
                        is_error: result.is_error,
                    },
                )),
                _ => None,
            })
            .collect();
        Self(results)
    }
}

impl ToolService for RecordedResults {
    fn call<'a>(
        &'a self,
        _arguments: &'a str,
        context: &'a ToolCallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        let output = self
            .0
            .get(&context.tool_call_id)
            .cloned()
            .unwrap_or_else(|| {
                ToolOutput::error(format!(
                    "the recording has no result for call {}",
                    context.tool_call_id
                ))
            });
        futures::future::ready(output).boxed()
    }
}
