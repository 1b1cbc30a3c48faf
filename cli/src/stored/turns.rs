//! A stored session as turns, as `reel diff` and `reel rerun` compare them: each run, from its
//! prompt to its end, read page by page (one turn in memory at a time, however long the
//! session).

use std::collections::VecDeque;

use reel_engine::{LogEntry, LogPages};
use reel_proto::{Any, chat::UsageInfo};
use reel_storage::TimelineStore;

/// What a run said and did, as a person compares two of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turn {
    /// The ordinals of its first and last events.
    pub ordinals: (u64, u64),
    pub prompt: String,
    /// The model's text over all its reply calls.
    pub text: String,
    /// Each tool call: the tool's name and the arguments.
    pub tool_calls: Vec<(String, String)>,
    /// Each tool result: the tool's name, the result and whether it is an error.
    pub tool_results: Vec<(String, String, bool)>,
    /// The ordinal of each tool result's event (where a report points; not compared).
    pub result_ordinals: Vec<u64>,
    /// How the run ended (`finished`, `stopped`, `failed`, ...); empty while it goes on.
    pub status: String,
    pub usage: UsageInfo,
}

/// Reads a session's turns in order.
pub struct TurnReader {
    pages: LogPages,
    buffered: VecDeque<LogEntry>,
    done: bool,
    /// The events read since the last turn ended that belong to no run (a compaction asked
    /// for between runs, the next run's user message).
    between: Vec<LogEntry>,
}

impl TurnReader {
    /// The turns of session `id`, whose log has `events` events.
    pub fn new(id: &str, events: u64) -> Self {
        Self::between(id, 0, events)
    }

    /// The turns of session `id` among its events after `after`, up to `up_to`.
    pub fn between(id: &str, after: u64, up_to: u64) -> Self {
        Self {
            pages: LogPages::new(id, after, up_to),
            buffered: VecDeque::new(),
            done: false,
            between: Vec::new(),
        }
    }

    /// The next turn; `None` after the last. A run the log leaves open (it waits, or its
    /// process died) is a turn without a status.
    pub async fn next(&mut self, store: &mut TimelineStore) -> anyhow::Result<Option<Turn>> {
        Ok(self.next_with_events(store).await?.map(|(turn, _)| turn))
    }

    /// The next turn with its events, from its `ChatRunStarted` to its end; the events
    /// before it that belong to no run are kept for [`TurnReader::take_between`].
    pub async fn next_with_events(
        &mut self,
        store: &mut TimelineStore,
    ) -> anyhow::Result<Option<(Turn, Vec<LogEntry>)>> {
        let mut turn: Option<(Turn, Vec<LogEntry>)> = None;
        self.between.clear();
        while let Some(entry) = self.next_entry(store).await? {
            let Some((current, events)) = turn.as_mut() else {
                match Turn::begin(&entry) {
                    Some(first) => turn = Some((first, vec![entry])),
                    None => self.between.push(entry),
                }
                continue;
            };
            let ended = current.fold(&entry);
            events.push(entry);
            if ended {
                return Ok(turn);
            }
        }
        Ok(turn)
    }

    /// The events before the turn [`TurnReader::next_with_events`] returned last that belong
    /// to no run.
    pub fn take_between(&mut self) -> Vec<LogEntry> {
        std::mem::take(&mut self.between)
    }

    async fn next_entry(&mut self, store: &mut TimelineStore) -> anyhow::Result<Option<LogEntry>> {
        if self.buffered.is_empty() && !self.done {
            let page = self.pages.next(store).await?;
            self.done = page.is_empty();
            self.buffered.extend(page);
        }
        Ok(self.buffered.pop_front())
    }
}

impl Turn {
    /// The turn a run's `ChatRunStarted` begins; `None` for any other event.
    pub fn begin(entry: &LogEntry) -> Option<Self> {
        let Any::ChatRunStarted(started) = &entry.event else {
            return None;
        };
        Some(Turn {
            ordinals: (entry.ordinal, entry.ordinal),
            prompt: started.prompt.clone(),
            ..Turn::default()
        })
    }

    /// The first turn among `events` (the events of one run, and maybe some before it).
    pub fn of<'a>(events: impl IntoIterator<Item = &'a LogEntry>) -> Option<Self> {
        let mut events = events.into_iter();
        let mut turn = events.by_ref().find_map(Turn::begin)?;
        for entry in events {
            if turn.fold(entry) {
                break;
            }
        }
        Some(turn)
    }

    /// Folds the next event of the run in; true when it ends the run.
    pub fn fold(&mut self, entry: &LogEntry) -> bool {
        self.ordinals.1 = entry.ordinal;
        fold(self, entry)
    }
}

/// Folds one event of a run into its turn; true when it ends the run.
fn fold(turn: &mut Turn, entry: &LogEntry) -> bool {
    let event = &entry.event;
    let (status, usage) = match event {
        Any::ChatTextDelta(delta) => {
            turn.text.push_str(&delta.text);
            return false;
        }
        Any::ChatToolCallRequested(call) => {
            turn.tool_calls
                .push((call.tool_name.clone(), call.input.clone()));
            return false;
        }
        Any::ChatToolResultReady(result) => {
            turn.tool_results.push((
                result.tool_name.clone(),
                result.result.clone(),
                result.is_error,
            ));
            turn.result_ordinals.push(entry.ordinal);
            return false;
        }
        Any::ChatRunFinished(end) => (&end.status, end.usage),
        Any::ChatRunStopped(end) => (&end.status, end.usage),
        Any::ChatRunFailed(end) => (&end.status, end.usage),
        _ => return false,
    };
    turn.status.clone_from(status);
    turn.usage = usage.unwrap_or_default();
    true
}
