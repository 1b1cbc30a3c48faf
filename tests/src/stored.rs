//! Shared pieces of the durable-session tests: where sessions are kept (SQLite or PostgreSQL),
//! unique session ids, and the check that a stored log and its entities agree.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use reel_engine::{LogEntry, Projection, TimelineProjection, new_id};
use reel_proto::rpc::rpc_line::Frame;

use crate::{FrameLine, RpcClient, TimelineDb, reel, write_file};

/// Where a test keeps its sessions.
pub enum Backend {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Backend {
    /// The flags that select this database.
    pub fn flags(&self) -> [String; 2] {
        match self {
            Backend::Sqlite(path) => ["--timeline-db".into(), path.display().to_string()],
            Backend::Postgres(dsn) => ["--timeline-dsn".into(), dsn.clone()],
        }
    }

    /// The flags that select this database as the turns database too (a second SQLite file).
    pub fn turns_flags(&self) -> [String; 2] {
        match self {
            Backend::Sqlite(path) => [
                "--turns-db".into(),
                path.with_file_name("turns.db").display().to_string(),
            ],
            Backend::Postgres(dsn) => ["--turns-dsn".into(), dsn.clone()],
        }
    }

    /// A reading connection to the turns database.
    pub fn turns_view(&self) -> TimelineDb {
        match self {
            Backend::Sqlite(path) => TimelineDb::open(&path.with_file_name("turns.db")),
            Backend::Postgres(dsn) => TimelineDb::connect(dsn),
        }
    }

    /// A reading connection, once the database exists.
    pub fn view(&self) -> Option<TimelineDb> {
        match self {
            Backend::Sqlite(path) => path.exists().then(|| TimelineDb::open(path)),
            Backend::Postgres(dsn) => Some(TimelineDb::connect(dsn)),
        }
    }

    /// `reel ARGS... DATABASE FLAGS` as a command, not started.
    pub fn reel(&self, args: &[&str]) -> std::process::Command {
        let flags = self.flags();
        let mut all = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        reel(&all)
    }

    /// `reel ARGS... DATABASE FLAGS`, run to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.reel(args).output().expect("reel runs")
    }

    /// `reel ARGS... DATABASE FLAGS` as a stdin-RPC client.
    pub fn client(&self, args: &[&str]) -> RpcClient {
        let flags = self.flags();
        let mut all = args.to_vec();
        all.extend(flags.iter().map(String::as_str));
        RpcClient::start(&all)
    }

    /// `reel run-command COMMAND --rpc --stdin-rpc --session-id ID`: a stdin-RPC client on one
    /// session of this backend (created, or resumed when it exists).
    pub fn session_client(&self, command: &str, id: &str) -> RpcClient {
        self.client(&[
            "run-command",
            command,
            "--rpc",
            "--stdin-rpc",
            "--session-id",
            id,
        ])
    }

    /// [`Backend::session_client`] continuing the stored session (`--resume`), with `extra`
    /// flags.
    pub fn resumed_client(&self, command: &str, id: &str, extra: &[&str]) -> RpcClient {
        let mut args = vec![
            "run-command",
            command,
            "--rpc",
            "--stdin-rpc",
            "--session-id",
            id,
            "--resume",
        ];
        args.extend(extra);
        self.client(&args)
    }
}

/// A session id no other test run uses (PostgreSQL tables outlive test runs).
pub fn unique(name: &str) -> String {
    format!("{name}-{}", new_id())
}

/// A command file playing `script`; returns its path.
pub fn command(dir: &Path, script: &str) -> String {
    let script = write_file(dir, "script.yaml", script);
    write_file(
        dir,
        "command.yaml",
        &format!(
            "name: t\ndescription: t\nprompt: \"{{{{ say }}}}\"\nvariables:\n  - name: say\n    default: hello\nprovider:\n  script: {script}\n"
        ),
    )
}

pub fn final_text(frames: &[FrameLine]) -> String {
    frames
        .iter()
        .filter(|f| f.ui_name() == Some("ChatTextSegmentFinished"))
        .map(|f| {
            f.json["uiEvent"]["payload"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

pub fn ui_ordinals(frames: &[FrameLine]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|f| match f.frame() {
            Frame::UiEvent(ui) => Some(ui.ordinal),
            _ => None,
        })
        .collect()
}

/// The stored log is gap-free from 1, and replaying it gives the stored entities exactly.
pub fn assert_log_and_entities_agree(db: &mut TimelineDb, session: &str) -> Vec<LogEntry> {
    let events = db.events(session);
    for (at, entry) in events.iter().enumerate() {
        assert_eq!(entry.ordinal, at as u64 + 1, "gap-free ordinals");
    }
    let (last, entities_ordinal) = db.ordinals(session);
    assert_eq!(last, events.len() as u64);
    let replayed = TimelineProjection::replay(events.iter().take(entities_ordinal as usize));
    let mut expected = replayed.snapshot().entities;
    expected.sort_by(|a, b| (a.created_ordinal, &a.id).cmp(&(b.created_ordinal, &b.id)));
    assert_eq!(
        db.entities(session),
        expected,
        "stored entities = a replay of the stored log"
    );
    assert_eq!(db.integrity_check(), "ok");
    events
}

/// Declares each scenario `fn(&Backend)` as two tests: `sqlite::NAME` (a fresh SQLite file) and
/// `postgres::NAME` (a schema of its own on the machine's PostgreSQL, dropped afterwards;
/// skipped with a message where the server does not answer, never under CI).
#[macro_export]
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $scenario() {
                    let dir = $crate::__tempfile::tempdir().unwrap();
                    super::$scenario(&$crate::stored::Backend::Sqlite(dir.path().join("data/timeline.db")));
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $scenario() {
                    if let Some(schema) = $crate::postgres() {
                        super::$scenario(&$crate::stored::Backend::Postgres(schema.dsn.clone()));
                    }
                }
            )*
        }
    };
}
