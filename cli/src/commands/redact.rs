//! `reel redact SESSION (--ordinals A..B | --match REGEX | --entity ID | --all) [--reason TEXT]`:
//! erases content from a stored session without breaking its log. The covered events keep
//! their ordinals with "[redacted]" where the content was, one `ChatContentRedacted` event
//! records what was covered and why, and the entities, snapshot, search index and turns are
//! rebuilt from the erased log in the same transaction (see `reel_engine::Survey` and
//! `reel_storage::Redacted`). Refused, changing nothing, while another process writes the
//! session.

use std::{collections::BTreeSet, io::Write, sync::Arc};

use anyhow::Context;
use reel_engine::{
    CommittedEvent, ContextMessage, Fanout, LogEntry, LogStore, Output, OutputKind, RedactionScope,
    SessionCatalog, SessionState, Survey, now_ms, session_title,
};
use reel_proto::{
    Any,
    rpc::{SnapshotEntity, UiEventFrame},
};
use reel_storage::{Erasure, Redacted, TimelineStore};

use crate::{
    sink_uri::SinkUri,
    stored::{Database, TurnsDatabase, each_event},
};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["ordinals", "pattern", "entity", "all"])))]
pub struct RedactArgs {
    /// The session to erase content from.
    pub session_id: String,
    /// The entities whose content the events A to B (inclusive) carried, e.g. 12..40.
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    pub ordinals: Option<(u64, u64)>,
    /// Every message, reasoning block, tool call, tool result, queued prompt and summary whose
    /// content matches this regular expression (the pattern itself is not recorded).
    #[arg(long = "match", value_name = "REGEX")]
    pub pattern: Option<String>,
    /// One entity, by id (`reel search --json` and `reel export SESSION --format jsonl` name them).
    #[arg(long, value_name = "ID")]
    pub entity: Option<String>,
    /// All of the session's content.
    #[arg(long)]
    pub all: bool,
    /// Why, recorded on the log with the redaction.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub reason: String,
    /// Rewrite the database's files afterwards: PostgreSQL's VACUUM FULL of the tables that
    /// held the content (its old row versions stay in the files otherwise; the tables are
    /// locked while it runs), SQLite's VACUUM (for a file an older reel wrote).
    #[arg(long)]
    pub vacuum: bool,
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub turns: TurnsDatabase,
    /// Tell this sink of the redaction (repeatable; exec:COMMAND, nats://HOST:PORT/STREAM or
    /// a webhook URL, as run-command's --sink): it gets the `ChatContentRedacted` event, so
    /// whatever consumes it can erase its own copies.
    #[arg(long = "sink", value_name = "URI", value_parser = SinkUri::parse)]
    pub sinks: Vec<SinkUri>,
}

/// `A..B` as a pair of ordinals.
fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (first, last) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?} is not a range: write FIRST..LAST, e.g. 12..40"))?;
    let ordinal = |part: &str| {
        part.trim()
            .parse::<u64>()
            .map_err(|_| format!("{part:?} in {text:?} is not an ordinal"))
    };
    Ok((ordinal(first)?, ordinal(last)?))
}

impl RedactArgs {
    fn scope(&self) -> anyhow::Result<RedactionScope> {
        Ok(match (&self.ordinals, &self.pattern, &self.entity) {
            (Some((first, last)), _, _) => RedactionScope::Ordinals {
                first: *first,
                last: *last,
            },
            (None, Some(pattern), _) => {
                let regex = regex::Regex::new(pattern)
                    .with_context(|| format!("--match {pattern:?} is not a regular expression"))?;
                if regex.is_match("") {
                    return Err(anyhow::anyhow!(
                        "--match {pattern:?} matches empty text, so it would cover everything; use --all for that"
                    ));
                }
                RedactionScope::Matching(Box::new(move |text| regex.is_match(text)))
            }
            (None, None, Some(id)) => RedactionScope::Entity(id.clone()),
            (None, None, None) => RedactionScope::All,
        })
    }
}

pub async fn run(args: RedactArgs) -> anyhow::Result<()> {
    let id = args.session_id.as_str();
    let scope = args.scope()?;
    let mut store = args.database.lease_existing(id, "redacting").await?;
    let redacted = redact(&args, &mut store, scope).await;
    let released = store.release(id).await;
    let message = redacted?;
    released?;
    writeln!(std::io::stdout().lock(), "{message}")?;
    Ok(())
}

/// The redaction, under the session's lease: what to tell the user.
async fn redact(
    args: &RedactArgs,
    store: &mut TimelineStore,
    scope: RedactionScope,
) -> anyhow::Result<String> {
    let id = args.session_id.as_str();
    let end = store.summary(id).await?.map_or(0, |summary| summary.events);
    let mut survey = Survey::new(scope);
    each_event(store, id, (0, end), "surveying", |entry| {
        survey.look(entry);
        Ok(())
    })
    .await?;
    let mut eraser = survey.finish()?;
    if eraser.covered() == 0 {
        return Ok(format!(
            "nothing in session {id} is covered; nothing was changed"
        ));
    }
    let mut turns_db = args.turns.open().await?;
    let mut turn_ends: BTreeSet<u64> = store.turn_ends(id).await?.into_iter().collect();
    if let Some(turns) = &mut turns_db {
        turn_ends.extend(turns.turn_ends(id).await?);
    }
    let mut rewritten = Vec::new();
    let mut turns = Vec::new();
    each_event(store, id, (0, end), "redacting", |entry| {
        rewritten.extend(eraser.rewrite(entry));
        if turn_ends.contains(&entry.ordinal) {
            turns.push((entry.ordinal, context_of(eraser.state())));
        }
        Ok(())
    })
    .await?;
    let covered = eraser.covered();
    if rewritten.is_empty() {
        return Ok(format!(
            "the {covered} entities covered in session {id} read \"[redacted]\" already; nothing was changed"
        ));
    }
    let (appended, state) = eraser.finish(end + 1, now_ms(), &args.reason);
    let entities = state.timeline.snapshot().entities;
    let redacted = Redacted {
        rewritten,
        appended,
        title: title(&entities),
        entities,
        snapshot: serde_json::to_string(&state)?,
        turns,
    };
    // The turns database first: if the timeline's transaction then failed, the log still
    // holds the content, and redacting again rewrites both.
    let erasure = if args.vacuum {
        Erasure::Vacuum
    } else {
        Erasure::Commit
    };
    let mut wal_kept = false;
    if let Some(turns_db) = &mut turns_db {
        wal_kept |= (turns_db.redact_turns(id, &redacted.turns, erasure).await?).wal_kept;
    }
    wal_kept |= (store.redact(id, &redacted, erasure).await?).wal_kept;
    tell_sinks(&args.sinks, id, store, redacted.appended.clone())
        .await
        .context("the redaction is stored, but a sink was not told of it")?;
    if wal_kept {
        tracing::warn!(
            "another process was reading the database, so its write-ahead log (the -wal file) still holds the old pages until the next checkpoint"
        );
    }
    Ok(format!(
        "redacted {covered} entities of session {id}: {} events rewritten, recorded at ordinal {}",
        redacted.rewritten.len(),
        redacted.appended.ordinal
    ))
}

/// Hands the redaction event to each sink, as a live session hands its events; a JetStream
/// sink first publishes what its stream lacks of the session (the erased events among them).
async fn tell_sinks(
    sinks: &[SinkUri],
    id: &str,
    store: &mut TimelineStore,
    entry: LogEntry,
) -> anyhow::Result<()> {
    if sinks.is_empty() {
        return Ok(());
    }
    let mut fanout = Fanout::new();
    for sink in sinks {
        let catalog: &mut dyn SessionCatalog = &mut *store;
        fanout.attach(sink.start(id, Some(catalog), entry.ordinal, None).await?);
    }
    let ui_event = UiEventFrame {
        ordinal: entry.ordinal,
        name: entry.name().to_owned(),
        payload: Some(entry.event.clone()),
    };
    let event = CommittedEvent {
        entry: Arc::new(entry),
        ui_events: vec![ui_event],
        context: None,
    };
    fanout
        .send(Output {
            session_id: Arc::from(id),
            request_id: Arc::from(""),
            kind: OutputKind::Event(Arc::new(event)),
        })
        .await;
    let failures = fanout.close().await;
    match failures.first() {
        None => Ok(()),
        Some(failure) => Err(anyhow::anyhow!(
            "sink {}: {}",
            failure.sink,
            failure.message
        )),
    }
}

/// The model context as a turn stores it.
fn context_of(state: &SessionState) -> Vec<Arc<ContextMessage>> {
    state.context.messages().iter().cloned().collect()
}

/// The session's title as it reads now: its first user message's.
fn title(entities: &[SnapshotEntity]) -> String {
    entities
        .iter()
        .find_map(|entity| match &entity.payload {
            Some(Any::ChatMessageEntity(m)) if m.role == "user" => Some(session_title(&m.text)),
            _ => None,
        })
        .unwrap_or_default()
}
