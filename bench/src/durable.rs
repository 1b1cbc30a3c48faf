//! The durable benchmark: a scripted reply through the session into the timeline database
//! (SQLite, and PostgreSQL when one answers), with the run's done waiting for the commit, as
//! `run-command --session-id` does. Bytes written are the file's size for SQLite and the WAL
//! written during the run for PostgreSQL.
//!
//! * committed events per second;
//! * database bytes per delta, for a reply and one ten times longer: the ratio must stay near 1
//!   (events are compact deltas; no row re-stores accumulated text), or the command fails;
//! * resume time (open, load the newest snapshot and the events after it, replay) for a log and
//!   one ten times longer.

use anyhow::Context;
use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Instant,
};

use reel_engine::{DoneStatus, Fanout, LogStore, Session, SessionState, new_id};
use reel_providers::{Repeat, Script, ScriptedProvider, Step};
use reel_sinks::TimelineDbSink;
use reel_storage::{Access, Location, TimelineStore, open_timeline};
use sqlx::{Connection, PgConnection, Row};

pub async fn run(
    deltas: usize,
    resume_events: usize,
    postgres: Option<String>,
) -> anyhow::Result<bool> {
    let mut ok = true;
    let dir = tempfile::tempdir()?;
    ok &= bench_database(
        &Database::Sqlite(dir.path().to_path_buf()),
        deltas,
        resume_events,
    )
    .await?;
    println!();
    if let Some(dsn) = postgres {
        // A schema of the bench's own, dropped at the end: the bench leaves nothing behind.
        let schema = Schema::create(&dsn).await?;
        let measured = bench_database(
            &Database::Postgres(schema.dsn.clone()),
            deltas,
            resume_events,
        )
        .await;
        schema.drop().await?;
        ok &= measured?;
        println!();
    }
    Ok(ok)
}

/// A PostgreSQL schema made for one bench run.
pub(super) struct Schema {
    /// The server's DSN.
    server: String,
    name: String,
    /// A DSN whose connections work in the schema.
    pub(super) dsn: String,
}

impl Schema {
    pub(super) async fn create(server: &str) -> anyhow::Result<Self> {
        // One process may make several at once.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("reel_bench_{}_{next}", std::process::id());
        let mut conn = PgConnection::connect(server)
            .await
            .with_context(|| format!("cannot connect to {server}"))?;
        let sql = format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await?;
        let separator = if server.contains('?') { '&' } else { '?' };
        let dsn = format!("{server}{separator}options=-csearch_path%3D{name}");
        Ok(Self {
            server: server.to_owned(),
            name,
            dsn,
        })
    }

    pub(super) async fn drop(self) -> anyhow::Result<()> {
        let mut conn = PgConnection::connect(&self.server).await?;
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await?;
        Ok(())
    }
}

/// A database to measure.
enum Database {
    /// A folder for SQLite files.
    Sqlite(PathBuf),
    /// A PostgreSQL DSN.
    Postgres(String),
}

impl Database {
    fn name(&self) -> &'static str {
        match self {
            Database::Sqlite(_) => "SQLite",
            Database::Postgres(_) => "PostgreSQL",
        }
    }

    /// Where the session `session` is stored.
    fn location(&self, session: &str) -> Location {
        match self {
            Database::Sqlite(folder) => Location::path(folder.join(format!("{session}.db"))),
            Database::Postgres(dsn) => Location::Postgres(dsn.clone()),
        }
    }

    /// Bytes the database has written so far for `session`'s store.
    async fn bytes_written(&self, session: &str) -> anyhow::Result<u64> {
        match self {
            Database::Sqlite(folder) => {
                let path = folder.join(format!("{session}.db"));
                let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
                Ok(size(&path) + size(&path.with_extension("db-wal")))
            }
            Database::Postgres(dsn) => {
                let mut conn = PgConnection::connect(dsn).await?;
                let row =
                    sqlx::query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
                        .fetch_one(&mut conn)
                        .await?;
                Ok(row.get::<i64, _>(0) as u64)
            }
        }
    }
}

async fn bench_database(
    database: &Database,
    deltas: usize,
    resume_events: usize,
) -> anyhow::Result<bool> {
    println!(
        "reel bench: a scripted reply into the {} timeline database (done waits for the commit)",
        database.name()
    );
    println!(
        "{:>10} {:>10} {:>16} {:>14} {:>16}",
        "deltas", "seconds", "events/s stored", "bytes/delta", "RSS growth/delta"
    );
    let mut per_delta = Vec::new();
    for deltas in [deltas / 10, deltas] {
        let session = format!("bench-{}", new_id());
        let before = database.bytes_written(&session).await?;
        let (events, seconds, rss_growth) =
            store_reply(&database.location(&session), &session, deltas as u64).await?;
        let written = database.bytes_written(&session).await? - before;
        let bytes_per_delta = written as f64 / deltas as f64;
        println!(
            "{deltas:>10} {seconds:>10.3} {:>16.0} {bytes_per_delta:>14.1} {:>14.0} B",
            events as f64 / seconds,
            rss_growth as f64 * 1024.0 / deltas as f64
        );
        per_delta.push(bytes_per_delta);
    }
    let ratio = per_delta[1] / per_delta[0];
    println!("bytes written per delta, long / short reply: {ratio:.3} (must stay below 1.10)");

    println!("resume: open the database, load the newest snapshot and the events after it, replay");
    println!(
        "{:>10} {:>16} {:>16} {:>10}",
        "events", "snapshot at", "events replayed", "seconds"
    );
    for events in [resume_events / 10, resume_events] {
        let session = format!("bench-{}", new_id());
        store_reply(&database.location(&session), &session, events as u64).await?;
        let started = Instant::now();
        let mut store = open_timeline(&database.location(&session), Access::ReadWrite).await?;
        let stored = store.load(&session).await?;
        let (snapshot_at, replayed) = (stored.state.ordinal(), stored.events.len());
        let (state, log) = stored.replay()?;
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(state.ordinal(), log.last_ordinal());
        println!(
            "{:>10} {snapshot_at:>16} {replayed:>16} {seconds:>10.3}",
            log.last_ordinal()
        );
    }
    Ok(ratio < 1.10)
}

/// Streams a reply of `deltas` text deltas into a new timeline database; returns the events
/// stored, the seconds from the prompt to the commit of its last event, and how much the
/// resident memory grew meanwhile (KiB, measured once the reply is committed, before the
/// session is closed).
pub(super) async fn store_reply(
    location: &Location,
    session_id: &str,
    deltas: u64,
) -> anyhow::Result<(u64, f64, u64)> {
    let rss_before = super::proc_status_kib("self", "VmRSS");
    let fanout = timeline_fanout(location, session_id).await?;
    let mut rss_growth = 0;
    let (events, seconds) = reply_through(fanout, session_id, deltas, || {
        rss_growth = super::proc_status_kib("self", "VmRSS").saturating_sub(rss_before);
    })
    .await?;
    Ok((events, seconds, rss_growth))
}

/// A fanout whose one sink is the timeline database at `location`, `session_id` leased in it.
pub(super) async fn timeline_fanout(
    location: &Location,
    session_id: &str,
) -> anyhow::Result<Fanout> {
    let store = open_timeline(location, Access::ReadWrite).await?;
    store_fanout(store, session_id).await
}

/// [`timeline_fanout`] over `store`, already open.
pub(super) async fn store_fanout(
    mut store: TimelineStore,
    session_id: &str,
) -> anyhow::Result<Fanout> {
    store.lease(session_id).await?;
    let mut fanout = Fanout::new();
    fanout.attach(Box::new(TimelineDbSink::new(
        store,
        session_id,
        SessionState::default(),
        0,
    )));
    Ok(fanout)
}

/// Streams a scripted reply of `deltas` text deltas into a new session writing to `fanout`,
/// done waiting for every durable sink; returns the events and the seconds from the prompt to
/// the last acknowledgement. `measure` runs then, before the session is closed.
pub(super) async fn reply_through(
    fanout: Fanout,
    session_id: &str,
    deltas: u64,
    measure: impl FnOnce(),
) -> anyhow::Result<(u64, f64)> {
    let repeat = Repeat {
        times: deltas,
        steps: vec![Step::Text("tok ".into())],
    };
    let script = Script {
        turns: vec![vec![Step::Repeat(repeat)]],
        summary: None,
    };
    converse_through(fanout, session_id, script, measure).await
}

/// Plays each turn of `script` as a prompt of its own into a new session writing to `fanout`,
/// done waiting for every durable sink after each; returns the events and the seconds from the
/// first prompt to the last acknowledgement. `measure` runs then, before the session is closed.
pub(super) async fn converse_through(
    fanout: Fanout,
    session_id: &str,
    script: Script,
    measure: impl FnOnce(),
) -> anyhow::Result<(u64, f64)> {
    let turns = script.turns.len();
    let mut session = Session::new(session_id, fanout);
    let provider = ScriptedProvider::new(script);
    let started = Instant::now();
    for _ in 0..turns {
        play_turn(&mut session, &provider).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    measure();
    Ok((close_stored(session).await?, seconds))
}

/// The provider's next turn as a prompt into `session`, done waiting for every durable sink.
pub(super) async fn play_turn(session: &mut Session, provider: &ScriptedProvider) {
    super::run_prompt(session, provider).await;
    session.emit_done(&Arc::from(""), DoneStatus::Ok).await;
}

/// Closes `session`: the events it stored, or the error when storing them failed.
pub(super) async fn close_stored(session: Session) -> anyhow::Result<u64> {
    let events = session.log().last_ordinal();
    let failed = session.storage_failed();
    let failures = session.close().await;
    if failed || !failures.is_empty() {
        return Err(anyhow::anyhow!("storing the session failed: {failures:?}"));
    }
    Ok(events)
}
