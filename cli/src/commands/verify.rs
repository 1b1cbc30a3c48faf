//! `reel verify SESSION`: rebuilds a stored session from its log alone and reports every
//! difference from what the database holds (its entities and its newest snapshot). Nothing is
//! written, and the log is read page by page, so a session of millions of events costs the
//! memory of its timeline, not of its log.

use reel_engine::error_chain;
use reel_engine::{LogStore, SessionState, TimelineProjection};
use reel_proto::rpc::SnapshotEntity;

use reel_sinks::printable;

use crate::stored::{Database, each_event};

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The session to check.
    #[arg(value_name = "SESSION", required_unless_present = "session_id")]
    pub session: Option<String>,
    /// The session to check (the older spelling of SESSION).
    #[arg(long, value_name = "ID", hide = true, conflicts_with = "session")]
    pub session_id: Option<String>,
    #[command(flatten)]
    pub database: Database,
}

/// Exit status: 0 when the log, the entities and the snapshot agree, 1 otherwise.
pub async fn run(args: VerifyArgs) -> u8 {
    match verify(&args).await {
        Ok(problems) if problems.is_empty() => 0,
        Ok(problems) => {
            for problem in problems {
                println!("DIFFERENT: {problem}");
            }
            1
        }
        Err(error) => {
            tracing::error!("{}", error_chain(&*error));
            1
        }
    }
}

async fn verify(args: &VerifyArgs) -> anyhow::Result<Vec<String>> {
    let id = args
        .session
        .as_deref()
        .or(args.session_id.as_deref())
        .expect("clap requires a session");
    let mut reader = args.database.open().await?;
    let summary = reader.find_session(id).await?;
    let store = &mut reader.store;
    let (entities_ordinal, stored) = store.entities(id).await?;
    let mut snapshot = store.snapshot(id).await?;
    // A live session lets settled entities go before it snapshots: they come from the store.
    snapshot.timeline.restore(stored.clone());
    let snapshot_ordinal = snapshot.ordinal();
    println!("session {}: {} events", printable(id), summary.events);

    // One pass over the log: the state is folded event by event and looked at when it
    // reaches the entities' ordinal and the snapshot's.
    let mut problems = Vec::new();
    let mut replayed = SessionState::default();
    let mut rebuilt = None;
    let mut snapshot_agrees = None;
    let mut check = |state: &SessionState| -> anyhow::Result<()> {
        let at = state.ordinal();
        if at == entities_ordinal && rebuilt.is_none() {
            rebuilt = Some(sorted_entities(&state.timeline));
        }
        if at == snapshot_ordinal && snapshot_ordinal > 0 && snapshot_agrees.is_none() {
            snapshot_agrees = Some(same_state(&snapshot, state)?);
        }
        Ok(())
    };
    check(&replayed)?;
    let read = each_event(store, id, (0, summary.events), "verifying", |entry| {
        replayed.apply(entry);
        check(&replayed)
    })
    .await;
    if let Err(error) = read {
        problems.push(error_chain(&*error));
    }
    let rebuilt = rebuilt.unwrap_or_default();
    compare_entities(&stored, &rebuilt, &mut problems);
    println!(
        "entities as of ordinal {entities_ordinal}: {} stored, {} rebuilt from the log",
        stored.len(),
        rebuilt.len()
    );
    if snapshot_ordinal > 0 {
        if snapshot_agrees == Some(false) {
            problems.push(format!(
                "the snapshot at ordinal {snapshot_ordinal} differs from a replay of the log up to it"
            ));
        }
        println!("snapshot at ordinal {snapshot_ordinal}: compared with a replay of the log");
    }
    if problems.is_empty() {
        println!("OK: the log, the entities and the snapshot agree");
    }
    Ok(problems)
}

/// Whether a stored snapshot holds what a replay of the log up to it holds: the timeline's
/// entities, the model context and the usage (the timeline's bookkeeping for events to come,
/// such as which tool call ids it has seen, may differ where a live session let entities go).
fn same_state(stored: &SessionState, replayed: &SessionState) -> anyhow::Result<bool> {
    use serde_json::to_value;
    Ok(
        sorted_entities(&stored.timeline) == sorted_entities(&replayed.timeline)
            && to_value(&stored.context)? == to_value(&replayed.context)?
            && to_value(&stored.usage)? == to_value(&replayed.usage)?,
    )
}

/// The timeline's entities in the order the store lists them.
fn sorted_entities(timeline: &TimelineProjection) -> Vec<SnapshotEntity> {
    let mut entities = timeline.snapshot().entities;
    entities.sort_by(|a, b| (a.created_ordinal, &a.id).cmp(&(b.created_ordinal, &b.id)));
    entities
}

fn compare_entities(
    stored: &[SnapshotEntity],
    rebuilt: &[SnapshotEntity],
    problems: &mut Vec<String>,
) {
    for entity in rebuilt {
        match stored.iter().find(|s| s.id == entity.id) {
            None => problems.push(format!(
                "{} {} is missing from the database",
                entity.kind, entity.id
            )),
            Some(found) if found != entity => problems.push(format!(
                "{} {} differs from the log",
                entity.kind, entity.id
            )),
            Some(_) => {}
        }
    }
    for entity in stored {
        if !rebuilt.iter().any(|r| r.id == entity.id) {
            problems.push(format!(
                "{} {} is in the database but not in the log",
                entity.kind, entity.id
            ));
        }
    }
}
