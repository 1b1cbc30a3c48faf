//! `reel verify`: rebuilds a stored session from its log alone and reports every difference
//! from what the database holds (its entities and its newest snapshot). Nothing is written.

use std::path::PathBuf;

use reel_engine::{LogStore, Projection, SessionState, TimelineProjection};
use reel_proto::rpc::SnapshotEntity;
use reel_storage::open_timeline;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The session to check.
    #[arg(long, value_name = "ID")]
    pub session_id: String,
    /// The timeline database (SQLite file).
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "timeline_dsn",
        required_unless_present = "timeline_dsn"
    )]
    pub timeline_db: Option<PathBuf>,
    /// The timeline database as a DSN: sqlite://PATH or postgres://...
    #[arg(long, value_name = "URL")]
    pub timeline_dsn: Option<String>,
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
            tracing::error!("{error}");
            1
        }
    }
}

async fn verify(args: &VerifyArgs) -> Result<Vec<String>, String> {
    let location = args
        .timeline_dsn
        .clone()
        .or_else(|| args.timeline_db.as_ref().map(|p| p.display().to_string()));
    let mut store = open_timeline(&location.expect("clap requires a database"))
        .await
        .map_err(|e| e.to_string())?;
    let id = &args.session_id;
    if !store.exists(id).await.map_err(|e| e.to_string())? {
        return Err(format!("there is no session {id:?} in this database"));
    }
    let events = store.events(id, 0).await.map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    for (at, entry) in events.iter().enumerate() {
        if entry.ordinal != at as u64 + 1 {
            problems.push(format!(
                "the log has a gap: ordinal {} where {} was due",
                entry.ordinal,
                at + 1
            ));
            break;
        }
    }
    println!("session {id}: {} events", events.len());

    let (entities_ordinal, stored) = store.entities(id).await.map_err(|e| e.to_string())?;
    let up_to = |ordinal: u64| events.iter().take_while(move |e| e.ordinal <= ordinal);
    let mut rebuilt = TimelineProjection::replay(up_to(entities_ordinal))
        .snapshot()
        .entities;
    rebuilt.sort_by(|a, b| (a.created_ordinal, &a.id).cmp(&(b.created_ordinal, &b.id)));
    compare_entities(&stored, &rebuilt, &mut problems);
    println!(
        "entities as of ordinal {entities_ordinal}: {} stored, {} rebuilt from the log",
        stored.len(),
        rebuilt.len()
    );

    let snapshot = store.load(id).await.map_err(|e| e.to_string())?.state;
    let snapshot_ordinal = snapshot.ordinal();
    if snapshot_ordinal > 0 {
        let mut replayed = SessionState::default();
        for entry in up_to(snapshot_ordinal) {
            replayed.apply(entry);
        }
        let as_json = |state: &SessionState| serde_json::to_value(state).map_err(|e| e.to_string());
        if as_json(&snapshot)? != as_json(&replayed)? {
            problems.push(format!("the snapshot at ordinal {snapshot_ordinal} differs from a replay of the log up to it"));
        }
        println!("snapshot at ordinal {snapshot_ordinal}: compared with a replay of the log");
    }
    if problems.is_empty() {
        println!("OK: the log, the entities and the snapshot agree");
    }
    Ok(problems)
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
