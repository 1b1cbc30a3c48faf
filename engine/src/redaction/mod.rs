//! Erasing content from a session's log (`reel redact`) without breaking it.
//!
//! The log stays gap-free and every event keeps its ordinal, type, ids, statuses and usage;
//! only content changes: each content field (see [`content`]) of the events that made the
//! covered entities becomes [`TOMBSTONE`], and one `ChatContentRedacted` event is appended to
//! say what was covered and why. Because the erased events fold exactly as they did (the
//! projections are pure), replaying them gives the timeline, model context and usage with the
//! tombstone where the text was: what a store keeps instead of the old entities, snapshots
//! and turns.
//!
//! It takes two passes over the log. A [`Survey`] folds it as it is and finds what the scope
//! covers (a message's text only exists whole in its entity: the deltas hold pieces). An
//! [`Eraser`] then rewrites each event and folds the rewritten log.

use std::collections::{HashMap, HashSet};

use reel_proto::{
    Any,
    chat::{ChatContentRedacted, ToolCallEntity},
};

use crate::{LogEntry, RedactionScopeName, SessionState, ToolCallStatus, new_id};

mod content;

use content::{Owner, Part, entity_texts, fields};

/// What erased content reads as.
pub const TOMBSTONE: &str = "[redacted]";

/// Which content to erase.
pub enum RedactionScope {
    /// The entities whose content the events `first..=last` carried.
    Ordinals { first: u64, last: u64 },
    /// One entity (a message, reasoning block, tool call, tool result, queued prompt or
    /// compaction summary), by id.
    Entity(String),
    /// Every entity whose content (or one of whose events) the predicate accepts: a pattern.
    Matching(Box<dyn Fn(&str) -> bool + Send + Sync>),
    /// All of the session's content.
    All,
}

impl RedactionScope {
    /// How the scope is recorded on the log (a pattern itself is not: it holds what it erases).
    fn name(&self) -> RedactionScopeName {
        match self {
            RedactionScope::Ordinals { .. } => RedactionScopeName::Ordinals,
            RedactionScope::Entity(_) => RedactionScopeName::Entity,
            RedactionScope::Matching(_) => RedactionScopeName::Match,
            RedactionScope::All => RedactionScopeName::All,
        }
    }
}

/// Why a redaction cannot be made; nothing is changed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedactionError {
    #[error("the range {first}..{last} ends before it starts")]
    Backwards { first: u64, last: u64 },
    #[error("the range {first}..{last} starts before ordinal 1")]
    BeforeStart { first: u64, last: u64 },
    #[error("the range {first}..{last} goes past the session's last event, ordinal {end}")]
    PastEnd { first: u64, last: u64, end: u64 },
    #[error(
        "the session has no entity {0:?} (`reel search --json` and `reel export SESSION --format jsonl` name them)"
    )]
    NoSuchEntity(String),
    #[error("the session has nothing to redact (it is empty)")]
    Empty,
    #[error(
        "tool call {0} waits for a person's decision, and erasing its arguments would run it with \"[redacted]\": decide it first (reel approve), then redact"
    )]
    Waiting(String),
}

/// The first pass: folds the log as it is and finds the entities the scope covers.
pub struct Survey {
    scope: RedactionScope,
    state: SessionState,
    covered: HashSet<String>,
    /// Provider tool call id -> the entity of the newest call with that id.
    calls: CallOwners,
    /// A delivered steer's queued prompt and the user message it became: one text, two
    /// entities, erased together.
    steers: Vec<(String, String)>,
}

impl Survey {
    pub fn new(scope: RedactionScope) -> Self {
        Self {
            scope,
            state: SessionState::default(),
            covered: HashSet::new(),
            calls: CallOwners::default(),
            steers: Vec::new(),
        }
    }

    /// Looks at the next entry of the log.
    pub fn look(&mut self, entry: &LogEntry) {
        self.state.apply(entry);
        self.calls.note(&entry.event);
        if let Any::ChatPromptDelivered(d) = &entry.event {
            self.steers
                .push((d.message_id.clone(), d.user_message_id.clone()));
        }
        let in_range = match &self.scope {
            RedactionScope::Ordinals { first, last } => (*first..=*last).contains(&entry.ordinal),
            RedactionScope::All => true,
            RedactionScope::Matching(_) | RedactionScope::Entity(_) => false,
        };
        let matching = match &self.scope {
            RedactionScope::Matching(accepts) => Some(accepts),
            _ => None,
        };
        if !in_range && matching.is_none() {
            return;
        }
        let mut event = entry.event.clone();
        let fields = fields(&mut event);
        let covers = in_range && fields.has_content()
            || matching.is_some_and(|accepts| fields.parts.iter().any(|(_, v)| accepts(v)));
        if covers {
            for owner in &fields.owners {
                self.covered.insert(self.calls.entity(owner).to_owned());
            }
        }
    }

    /// What the survey found: the eraser for the second pass. Fails, changing nothing, when
    /// the scope names what the log does not hold.
    pub fn finish(mut self) -> Result<Eraser, RedactionError> {
        let end = self.state.ordinal();
        if end == 0 {
            return Err(RedactionError::Empty);
        }
        let entities = self.state.timeline.snapshot().entities;
        match &self.scope {
            RedactionScope::Ordinals { first, last } => {
                let (first, last) = (*first, *last);
                if first > last {
                    return Err(RedactionError::Backwards { first, last });
                }
                if first == 0 {
                    return Err(RedactionError::BeforeStart { first, last });
                }
                if last > end {
                    return Err(RedactionError::PastEnd { first, last, end });
                }
            }
            RedactionScope::Entity(id) => {
                if !entities.iter().any(|e| &e.id == id) {
                    return Err(RedactionError::NoSuchEntity(id.clone()));
                }
                self.covered.insert(id.clone());
            }
            RedactionScope::Matching(accepts) => {
                for entity in &entities {
                    let texts = entity.payload.as_ref().map(entity_texts);
                    if texts.is_some_and(|texts| texts.into_iter().any(accepts)) {
                        self.covered.insert(entity.id.clone());
                    }
                }
            }
            RedactionScope::All => {
                self.covered.extend(entities.iter().map(|e| e.id.clone()));
            }
        }
        for (queued, user) in &self.steers {
            if self.covered.contains(queued) || self.covered.contains(user) {
                self.covered.insert(queued.clone());
                self.covered.insert(user.clone());
            }
        }
        // A call that waits for a decision runs with its stored arguments once allowed.
        let waiting = self.state.timeline.unanswered_tool_calls();
        let asks = |call: &&ToolCallEntity| {
            ToolCallStatus::parse(&call.status) == Some(ToolCallStatus::AwaitingApproval)
        };
        if let Some(call) = waiting
            .iter()
            .filter(asks)
            .find(|call| self.covered.contains(&call.message_id))
        {
            return Err(RedactionError::Waiting(call.message_id.clone()));
        }
        // The covered ids in the order the entities were made (the timeline lists them so).
        let covered: Vec<String> = entities
            .iter()
            .filter(|e| self.covered.contains(&e.id))
            .map(|e| e.id.clone())
            .collect();
        let (first, last) = match self.scope {
            RedactionScope::Ordinals { first, last } => (first, last),
            _ => (0, 0),
        };
        Ok(Eraser {
            record: ChatContentRedacted {
                message_id: new_id(),
                scope: self.scope.name().into(),
                first_ordinal: first,
                last_ordinal: last,
                entity_ids: match self.scope {
                    RedactionScope::All => Vec::new(),
                    _ => covered,
                },
                events_rewritten: 0,
                reason: String::new(),
            },
            covered: self.covered,
            calls: CallOwners::default(),
            marked: HashSet::new(),
            state: SessionState::default(),
        })
    }
}

/// The second pass: rewrites each event of the log and folds the rewritten log.
pub struct Eraser {
    record: ChatContentRedacted,
    covered: HashSet<String>,
    calls: CallOwners,
    /// The covered entities whose first streamed piece already holds the tombstone.
    marked: HashSet<String>,
    state: SessionState,
}

impl Eraser {
    /// How many entities the redaction covers (0: nothing to erase).
    pub fn covered(&self) -> usize {
        self.covered.len()
    }

    /// The next entry of the log with its covered content erased: `Some` when it changed.
    pub fn rewrite(&mut self, entry: &LogEntry) -> Option<LogEntry> {
        self.calls.note(&entry.event);
        let mut event = entry.event.clone();
        let mut changed = false;
        let fields = fields(&mut event);
        let owners: Vec<String> = fields
            .owners
            .iter()
            .map(|owner| self.calls.entity(owner).to_owned())
            .collect();
        if owners.iter().any(|id| self.covered.contains(id)) {
            let owner = &owners[0];
            for (part, value) in fields.parts {
                changed |= self.erase(owner, part, value);
            }
        }
        let rewritten = LogEntry {
            ordinal: entry.ordinal,
            recorded_at_ms: entry.recorded_at_ms,
            event,
        };
        self.state.apply(&rewritten);
        changed.then(|| {
            self.record.events_rewritten += 1;
            rewritten
        })
    }

    /// Erases one value of `owner`'s; whether it changed.
    fn erase(&mut self, owner: &str, part: Part, value: &mut String) -> bool {
        let erased = match part {
            Part::Whole if !value.is_empty() => TOMBSTONE,
            Part::Piece if !value.is_empty() && self.marked.insert(owner.to_owned()) => TOMBSTONE,
            _ => "",
        };
        if value == erased {
            return false;
        }
        value.clear();
        value.push_str(erased);
        true
    }

    /// The state the rewritten log folds into, as of the last entry rewritten.
    pub fn state(&self) -> &SessionState {
        &self.state
    }

    /// The event that records the redaction, to append at `ordinal` (folded in), and the
    /// state after it.
    pub fn finish(
        mut self,
        ordinal: u64,
        recorded_at_ms: u64,
        reason: &str,
    ) -> (LogEntry, SessionState) {
        self.record.reason = reason.to_owned();
        let entry = LogEntry {
            ordinal,
            recorded_at_ms,
            event: self.record.into(),
        };
        self.state.apply(&entry);
        (entry, self.state)
    }
}

/// Which entity a tool call event belongs to: the timeline's rule (the newest call with the
/// provider's id), kept as the log goes.
#[derive(Default)]
struct CallOwners(HashMap<String, String>);

impl CallOwners {
    fn note(&mut self, event: &Any) {
        let (call_id, entity) = match event {
            Any::ChatToolCallStarted(t) => (&t.tool_call_id, &t.message_id),
            Any::ChatToolCallRequested(t) => (&t.tool_call_id, &t.message_id),
            _ => return,
        };
        self.0.insert(call_id.clone(), entity.clone());
    }

    fn entity<'a>(&'a self, owner: &'a Owner<'_>) -> &'a str {
        match owner {
            Owner::Entity(id) => id,
            Owner::ToolCall(call_id) => self.0.get(*call_id).map_or(call_id, String::as_str),
        }
    }
}

#[cfg(test)]
mod tests;
