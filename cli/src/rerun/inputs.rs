//! The inputs a recorded run took from outside, fed back to its re-run at the point they came
//! (counted in the run's events, not in wall time):
//!
//! - a steer or a follow-up when the re-run's run has as many events as the original's had
//!   before it was queued;
//! - a client tool's answer when the re-run's run waits for that call's answer;
//! - a person's decision when the re-run's run waits for a decision on that call;
//! - a cancel where the original's run was stopped: before the first event the stop wrote.
//!
//! A call is the recorded call's id; a live model's calls have new ids, so then the first call
//! of the run that waits takes it.

use std::collections::VecDeque;

use reel_engine::{
    ActiveRun, ApprovalDecision, ApprovalOption, LogEntry, QueuedPromptKind, Session, ToolOutput,
    ToolResultStatus,
};
use reel_proto::Any;

/// One input of the recording.
#[derive(Clone, Debug, PartialEq)]
enum Input {
    Queued(QueuedPromptKind, String),
    ClientAnswer {
        call: String,
        output: ToolOutput,
    },
    Decision {
        call: String,
        option: ApprovalOption,
        message: String,
    },
    Cancel,
}

/// An input and where it came.
#[derive(Clone, Debug, PartialEq)]
struct Placed {
    /// How many events of the run (after its `ChatRunStarted`) came before it.
    after: u64,
    /// The original's event that says it.
    ordinal: u64,
    input: Input,
}

/// An input of the recording the re-run cannot feed back, with the event that says it.
#[derive(Debug, thiserror::Error)]
#[error("event {ordinal} is {what}, which a re-run cannot feed back")]
pub struct Unfeedable {
    pub ordinal: u64,
    pub what: &'static str,
}

/// What feeding did.
#[derive(Debug, PartialEq, Eq)]
pub enum Fed {
    /// An input went in; another may be due.
    Input,
    /// The run is to be cancelled now.
    Cancel,
    /// Nothing is due.
    Nothing,
}

/// The inputs of one recorded run, in the order they came.
#[derive(Debug, Default)]
pub struct RecordedInputs {
    queue: VecDeque<Placed>,
}

impl RecordedInputs {
    /// The inputs among a run's events (from its `ChatRunStarted` to its end).
    pub fn of(events: &[LogEntry]) -> Result<Self, Unfeedable> {
        let Some(started) = events.first().map(|e| e.ordinal) else {
            return Ok(Self::default());
        };
        let after = |entry: &LogEntry| entry.ordinal - started - 1;
        let stop = stop_begins(events);
        let mut client_calls: Vec<&str> = Vec::new();
        let mut queue = VecDeque::new();
        for (at, entry) in events.iter().enumerate() {
            if Some(at) == stop {
                queue.push_back(Placed {
                    after: after(entry),
                    ordinal: entry.ordinal,
                    input: Input::Cancel,
                });
                break;
            }
            let input = match &entry.event {
                Any::ChatPromptQueued(queued) => match QueuedPromptKind::parse(&queued.kind) {
                    Some(kind) => Input::Queued(kind, queued.prompt.clone()),
                    None => continue,
                },
                Any::ChatToolExecutionStarted(started) if started.status == "awaiting_client" => {
                    client_calls.push(&started.tool_call_id);
                    continue;
                }
                Any::ChatToolResultReady(result)
                    if client_calls.contains(&result.tool_call_id.as_str()) =>
                {
                    Input::ClientAnswer {
                        call: result.tool_call_id.clone(),
                        output: ToolOutput {
                            result: result.result.clone(),
                            is_error: result.is_error,
                        },
                    }
                }
                Any::ChatToolApprovalDecided(decided) if !decided.remembered => {
                    let option = match ApprovalDecision::parse(&decided.decision) {
                        Some(ApprovalDecision::Allowed) if decided.always => {
                            ApprovalOption::AllowAlways
                        }
                        Some(ApprovalDecision::Allowed) => ApprovalOption::AllowOnce,
                        Some(ApprovalDecision::Rejected) => ApprovalOption::RejectOnce,
                        _ => {
                            return Err(Unfeedable {
                                ordinal: entry.ordinal,
                                what: "a decision nobody made (it expired, or nobody was left to decide)",
                            });
                        }
                    };
                    let message = if option == ApprovalOption::RejectOnce {
                        declined_message(events, &decided.tool_call_id, &decided.tool_name)
                    } else {
                        String::new()
                    };
                    Input::Decision {
                        call: decided.tool_call_id.clone(),
                        option,
                        message,
                    }
                }
                _ => continue,
            };
            queue.push_back(Placed {
                after: after(entry),
                ordinal: entry.ordinal,
                input,
            });
        }
        Ok(Self { queue })
    }

    /// Feeds the next input into `run` of `session` if it is due now; `run_started` is the
    /// ordinal of the run's `ChatRunStarted`. A cancel is left to the caller. `blocked`: the
    /// run cannot go on without an input, so a steer, a follow-up or a cancel is due at once.
    pub async fn feed_next(
        &mut self,
        session: &mut Session,
        run: &mut ActiveRun<'_>,
        run_started: u64,
        blocked: bool,
    ) -> Fed {
        let Some(next) = self.queue.front() else {
            return Fed::Nothing;
        };
        let reached = blocked || session.log().last_ordinal() - run_started >= next.after;
        let fed = match &next.input {
            Input::Cancel if reached => {
                self.queue.pop_front();
                return Fed::Cancel;
            }
            Input::Queued(kind, prompt) if reached => {
                let rid = std::sync::Arc::clone(run.request_id());
                let correlation = run.correlation().clone();
                session
                    .queue_prompt(&rid, *kind, prompt.clone(), &correlation)
                    .await;
                true
            }
            Input::ClientAnswer { call, output } => {
                match waiting(run.calls_awaiting_client(), call) {
                    Some(id) => run.answer_client_tool(&id, output.clone()),
                    None => false,
                }
            }
            Input::Decision {
                call,
                option,
                message,
            } => match waiting(run.calls_awaiting_decision(), call) {
                Some(id) => session.decide_call(run, &id, *option, message).await,
                None => false,
            },
            _ => false,
        };
        if !fed {
            return Fed::Nothing;
        }
        self.queue.pop_front();
        Fed::Input
    }

    /// The first input not fed, as a report names it: its event and what it is.
    pub fn first_left(&self) -> Option<(u64, String)> {
        let placed = self.queue.front()?;
        let what = match &placed.input {
            Input::Queued(kind, prompt) => format!("a {} {prompt:?}", kind.as_str()),
            Input::ClientAnswer { call, .. } => format!("the client's answer to call {call}"),
            Input::Decision { call, option, .. } => {
                format!("the decision {} on call {call}", option.as_str())
            }
            Input::Cancel => "a cancel".to_owned(),
        };
        Some((placed.ordinal, what))
    }
}

/// The call of the run that takes the recorded call's input: the one with its id, or the
/// first that waits.
fn waiting<'a>(mut calls: impl Iterator<Item = &'a str>, recorded: &str) -> Option<String> {
    let first = calls.next()?;
    if first == recorded {
        return Some(first.to_owned());
    }
    let same = calls.find(|id| *id == recorded);
    Some(same.unwrap_or(first).to_owned())
}

/// Where the events a cancel wrote begin, if the run was stopped: the end of the model call
/// it cut, the results of the calls it left, the steers it dropped, then `ChatRunStopped`.
fn stop_begins(events: &[LogEntry]) -> Option<usize> {
    let last = events.len().checked_sub(1)?;
    if !matches!(events[last].event, Any::ChatRunStopped(_)) {
        return None;
    }
    let written_by_stop = |entry: &LogEntry| match &entry.event {
        Any::ChatProviderCallFinished(finished) => finished.finish_class == "cancelled",
        Any::ChatToolResultReady(result) => {
            result.status == ToolResultStatus::Error.as_str()
                && result.result == "cancelled: the run was stopped"
        }
        Any::ChatToolCallFinished(finished) => finished.status == "cancelled",
        Any::ChatPromptDropped(_) => true,
        _ => false,
    };
    let kept = events[..last]
        .iter()
        .rposition(|entry| !written_by_stop(entry))
        .map_or(0, |at| at + 1);
    Some(kept)
}

/// What the person said when declining call `call` of tool `tool`, read back from the result
/// the model got ("not run: the person declined this call of TOOL: MESSAGE").
fn declined_message(events: &[LogEntry], call: &str, tool: &str) -> String {
    let prefix = format!("not run: the person declined this call of {tool}: ");
    events
        .iter()
        .find_map(|entry| match &entry.event {
            Any::ChatToolResultReady(result) if result.tool_call_id == call => {
                result.result.strip_prefix(&prefix).map(str::to_owned)
            }
            _ => None,
        })
        .unwrap_or_default()
}
