//! A commit of a session's log to SQLite in one trip to the connection's thread.
//!
//! sqlx runs an SQLite connection on a thread of its own, and every statement is a round trip
//! to it: two thread switches, which on a busy machine cost far more than the statement does.
//! Written a statement at a time (seven of them), a commit held the connection, which every
//! session of a `reel serve` shares, for 0.8 ms with a hundred sessions streaming, and sessions
//! queued 100 ms behind each other for their turn. So one script opens the transaction, checks
//! that this process still holds the session and that the commit continues the stored log
//! (a trigger of the connection's own raises an error when either does not hold, which stops
//! the script before it writes), writes everything and commits. Only a failure takes a second
//! trip, to roll back. (The checks used to come back as rows that the writer judged before a
//! trip of its own committed: with a thousand sessions streaming, a third of the connection
//! thread's time went to being woken.)
//! The statements are the shared SQL of [`crate::sql_store`], their `$N` made plain `?`: sqlx
//! binds a script's values to its `?`s in order, while it looks a named parameter up in a list
//! as long as the statement's parameters, for each of them (quadratic in a multi-row INSERT).

use std::sync::Arc;

use futures::StreamExt;
use reel_engine::{
    Commit, DeadlineChanges, LogEntry, RunStatus, StoreError, approval_tally, run_tally,
};
use reel_proto::rpc::SnapshotEntity;
use sqlx::{
    Arguments, AssertSqlSafe, Encode, Executor, Sqlite, SqliteConnection, Type,
    sqlite::SqliteArguments,
};

use crate::{
    lease,
    rows::{ENTITY_COLUMNS, ENTITY_UPSERT, EntityRow, event_json, now_ms, to_i64},
    sql_store::{
        CLEAR_DEADLINES, CREATE_SESSION, INSERT_SNAPSHOT, LAST_ORDINAL, PRUNE_SNAPSHOTS,
        REMOVE_DEADLINE, SET_DEADLINE, UPDATE_SESSION, check_continues,
    },
    sqlite_lease::{RENEW_LEASE, lost_lease},
};

/// Rows per multi-row INSERT.
const ROWS_PER_STATEMENT: usize = 200;

/// The checks a commit makes before it writes, as a trigger of this connection's own (a TEMP
/// one, so that no file holds it): inserting a row into the view raises an error, which stops
/// the script with nothing written, when this process no longer holds the session's lease
/// ([`LEASE_LOST`]) or when the stored log does not end just before the commit's first event
/// ([`LOG_MOVED`]). Made on the connection by the first commit's script.
const CHECKS: &str = "CREATE TEMP VIEW IF NOT EXISTS reel_commit_check \
         (session_id, owner, next_ordinal) AS SELECT NULL, NULL, NULL; \
     CREATE TEMP TRIGGER IF NOT EXISTS reel_commit_check INSTEAD OF INSERT ON reel_commit_check \
     BEGIN \
         SELECT RAISE(ABORT, 'reel: lease lost') WHERE NOT EXISTS \
             (SELECT 1 FROM leases WHERE session_id = new.session_id AND owner = new.owner); \
         SELECT RAISE(ABORT, 'reel: log moved') WHERE new.next_ordinal IS NOT NULL \
             AND (SELECT last_ordinal + 1 FROM sessions WHERE session_id = new.session_id) \
                 IS NOT new.next_ordinal; \
     END";

/// The checks' errors.
const LEASE_LOST: &str = "reel: lease lost";
const LOG_MOVED: &str = "reel: log moved";

/// A commit made into a script, before the connection is taken: encoding its events is no
/// work to do while every other session waits for the connection.
pub(crate) struct CommitScript<'c> {
    session_id: &'c str,
    commit: &'c Commit,
    script: Script,
}

impl<'c> CommitScript<'c> {
    /// The script that writes `commit` of `session_id`, ending at ordinal `last`.
    pub(crate) fn new(
        session_id: &'c str,
        commit: &'c Commit,
        last: u64,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            session_id,
            commit,
            script: script(session_id, commit, last)?,
        })
    }

    /// Runs it, which commits; `place` names the database in errors, and `error` says the
    /// database's own. Nothing is left half-written: every failure rolls back.
    pub(crate) async fn write(
        self,
        conn: &mut SqliteConnection,
        place: &str,
        error: impl Fn(sqlx::Error) -> StoreError,
    ) -> Result<(), StoreError> {
        let Self {
            session_id,
            commit,
            script,
        } = self;
        let Some(failure) = run(conn, script).await? else {
            return Ok(());
        };
        let refused = match failure.as_database_error().map(|e| e.message()) {
            Some(LEASE_LOST) => lost_lease(session_id),
            Some(LOG_MOVED) => log_moved(conn, (session_id, commit), place, &error).await,
            _ => error(failure),
        };
        // With BEGIN itself refused there is nothing to roll back, and that is no error.
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        Err(refused)
    }
}

/// The error of `commit` of `session_id` when it does not continue the stored log, which says
/// where that ends (read inside the transaction the check failed in).
async fn log_moved(
    conn: &mut SqliteConnection,
    (session_id, commit): (&str, &Commit),
    place: &str,
    error: &impl Fn(sqlx::Error) -> StoreError,
) -> StoreError {
    let stored = sqlx::query_scalar(LAST_ORDINAL)
        .bind(session_id)
        .fetch_optional(&mut *conn)
        .await;
    match stored {
        Ok(stored) => check_continues(session_id, place, stored.unwrap_or(0), commit)
            .err()
            .unwrap_or_else(|| StoreError::Damaged(LOG_MOVED.into())),
        Err(failure) => error(failure),
    }
}

/// Runs the script to its end: the failure that stopped it, if one did.
async fn run(
    conn: &mut SqliteConnection,
    script: Script,
) -> Result<Option<sqlx::Error>, StoreError> {
    let args = script
        .args
        .map_err(|e| StoreError::database("cannot bind a value", e))?;
    let query = sqlx::query_with(AssertSqlSafe(script.sql), args);
    let mut results = conn.fetch_many(query);
    while let Some(result) = results.next().await {
        if let Err(failure) = result {
            return Ok(Some(failure));
        }
    }
    Ok(None)
}

/// The commit's statements in one script, which begins the transaction with the checks and
/// ends it with COMMIT.
fn script(session_id: &str, commit: &Commit, last: u64) -> Result<Script, StoreError> {
    use Value::{Int, MaybeInt, MaybeText, Text};
    let mut script = Script::default();
    let now = now_ms();
    script.push(CHECKS);
    script.statement("BEGIN IMMEDIATE", &[]);
    // BEGIN IMMEDIATE holds the write lock already: the rows need no lock of their own.
    let owner = lease::this_process();
    script.statement(RENEW_LEASE, &[Int(now), Text(session_id), Text(owner)]);
    script.statement(CREATE_SESSION, &[Text(session_id), Int(now)]);
    let next = commit.events.first().map(|entry| to_i64(entry.ordinal));
    script.statement(
        "INSERT INTO reel_commit_check VALUES ($1, $2, $3)",
        &[Text(session_id), Text(owner), MaybeInt(next)],
    );
    for chunk in commit.events.chunks(ROWS_PER_STATEMENT) {
        insert_events(&mut script, session_id, chunk)?;
    }
    for chunk in commit.entities.chunks(ROWS_PER_STATEMENT) {
        upsert_entities(&mut script, session_id, chunk)?;
    }
    if let Some((ordinal, state)) = &commit.snapshot {
        let values = [
            Text(session_id),
            Int(to_i64(*ordinal)),
            Text(state),
            Int(now),
        ];
        script.statement(INSERT_SNAPSHOT, &values);
        script.statement(PRUNE_SNAPSHOTS, &[Text(session_id)]);
    }
    let (runs, status) = run_tally(&commit.events);
    let (reset, asking) = approval_tally(&commit.events);
    let values = [
        Int(to_i64(last)),
        Int(now),
        MaybeInt(commit.entities_ordinal.map(to_i64)),
        MaybeText(commit.title.as_deref()),
        Int(to_i64(runs)),
        MaybeText(status.map(RunStatus::as_str)),
        Text(session_id),
        Int(i64::from(reset)),
        Int(asking),
    ];
    script.statement(UPDATE_SESSION, &values);
    let deadlines = DeadlineChanges::of(&commit.events);
    if deadlines.cleared {
        script.statement(CLEAR_DEADLINES, &[Text(session_id)]);
    }
    for call_id in &deadlines.removed {
        script.statement(REMOVE_DEADLINE, &[Text(session_id), Text(call_id)]);
    }
    for (call_id, until_ms) in &deadlines.set {
        let values = [Text(session_id), Text(call_id), Int(to_i64(*until_ms))];
        script.statement(SET_DEADLINE, &values);
    }
    script.statement("COMMIT", &[]);
    Ok(script)
}

fn insert_events(
    script: &mut Script,
    session_id: &str,
    chunk: &[Arc<LogEntry>],
) -> Result<(), StoreError> {
    script.push_rows(
        "INSERT INTO events (session_id, ordinal, name, payload_json, created_at) VALUES ",
        (chunk.len(), 5),
        "",
    );
    for entry in chunk {
        script.bind_shared(session_id);
        script.bind(to_i64(entry.ordinal));
        script.bind_shared(entry.name());
        script.bind(event_json(entry)?);
        script.bind(to_i64(entry.recorded_at_ms));
    }
    Ok(())
}

fn upsert_entities(
    script: &mut Script,
    session_id: &str,
    chunk: &[SnapshotEntity],
) -> Result<(), StoreError> {
    let head = format!("INSERT INTO {ENTITY_COLUMNS} VALUES ");
    script.push_rows(&head, (chunk.len(), 7), &format!(" {ENTITY_UPSERT}"));
    for entity in chunk {
        let row = EntityRow::of(entity)?;
        script.bind_shared(session_id);
        script.bind(row.id);
        script.bind_shared(row.kind);
        script.bind(row.created_ordinal);
        script.bind(row.last_event_ordinal);
        script.bind(row.tombstone);
        script.bind(row.payload_json);
    }
    Ok(())
}

/// A value of one of the shared statements.
#[derive(Clone, Copy)]
enum Value<'a> {
    Int(i64),
    Text(&'a str),
    MaybeInt(Option<i64>),
    MaybeText(Option<&'a str>),
}

/// Statements sent together, with their values in the order of their `?`s.
struct Script {
    sql: String,
    /// The first failure to bind a value stops the script before it is sent.
    args: Result<SqliteArguments, sqlx::error::BoxDynError>,
    /// The texts every event row repeats (the session's id, the events' names), each bound as
    /// one shared copy: sqlx copies a `&str` into a string of its own at every bind.
    shared: Vec<Arc<str>>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            sql: String::new(),
            args: Ok(SqliteArguments::default()),
            shared: Vec::new(),
        }
    }
}

impl Script {
    /// Adds `sql` with its `$N` made `?`, binding `values[N - 1]` for each in turn (a `$N`
    /// may come more than once).
    fn statement(&mut self, sql: &str, values: &[Value]) {
        let mut plain = String::with_capacity(sql.len());
        let mut chars = sql.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '$' {
                plain.push(c);
                continue;
            }
            let mut number = String::new();
            while let Some(digit) = chars.next_if(char::is_ascii_digit) {
                number.push(digit);
            }
            plain.push('?');
            let value = number
                .parse::<usize>()
                .ok()
                .and_then(|n| values.get(n.checked_sub(1)?));
            match value {
                Some(Value::Int(value)) => self.bind(*value),
                Some(Value::Text(value)) => self.bind(*value),
                Some(Value::MaybeInt(value)) => self.bind(*value),
                Some(Value::MaybeText(value)) => self.bind(*value),
                None => {
                    let message = format!("${number} of a statement has no value: {sql}");
                    self.args = Err(message.into());
                }
            }
        }
        self.push(&plain);
    }

    fn push(&mut self, sql: &str) {
        self.sql.push_str(sql);
        self.sql.push_str(";\n");
    }

    /// Adds a statement of `rows` rows of `columns` placeholders each (`(?, ?), (?, ?)`)
    /// between `head` and `tail`, written straight into the script: a commit of a streamed
    /// reply has hundreds of rows.
    fn push_rows(&mut self, head: &str, (rows, columns): (usize, usize), tail: &str) {
        self.sql.push_str(head);
        for row in 0..rows {
            self.sql.push_str(if row == 0 { "(?" } else { ", (?" });
            for _ in 1..columns {
                self.sql.push_str(", ?");
            }
            self.sql.push(')');
        }
        self.push(tail);
    }

    /// Binds `text`, a text many rows repeat, as the script's one copy of it.
    fn bind_shared(&mut self, text: &str) {
        let copy = match self.shared.iter().find(|shared| ***shared == *text) {
            Some(shared) => Arc::clone(shared),
            None => {
                let copy: Arc<str> = Arc::from(text);
                self.shared.push(Arc::clone(&copy));
                copy
            }
        };
        self.bind(copy);
    }

    fn bind<'q, T: Encode<'q, Sqlite> + Type<Sqlite>>(&mut self, value: T) {
        if let Ok(args) = &mut self.args
            && let Err(error) = args.add(value)
        {
            self.args = Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_parameters_become_plain_ones_bound_in_order() {
        let mut script = Script::default();
        script.statement("SELECT $1, $2", &[Value::Int(1), Value::Int(2)]);
        let values = [Value::Int(3), Value::Text("b")];
        script.statement("UPDATE t SET a = $2 WHERE b = $1 AND c = $1", &values);
        assert_eq!(
            script.sql,
            "SELECT ?, ?;\nUPDATE t SET a = ? WHERE b = ? AND c = ?;\n"
        );
        assert_eq!(script.args.as_ref().unwrap().len(), 5);
        script.push_rows("INSERT INTO t VALUES ", (2, 2), " ON CONFLICT DO NOTHING");
        assert!(
            script
                .sql
                .ends_with("INSERT INTO t VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING;\n")
        );
        script.statement("SELECT $3", &[Value::Int(1)]);
        assert!(script.args.is_err(), "a parameter without a value");
    }

    #[tokio::test]
    async fn a_writer_whose_lease_was_taken_writes_nothing() {
        use reel_engine::{LogStore, SessionCatalog};
        use sqlx::ConnectOptions;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let at = crate::Location::path(&path);
        let mut store = crate::open_timeline(&at, crate::Access::ReadWrite)
            .await
            .unwrap();
        store.lease("s").await.unwrap();
        // Another process takes the lease (as `--steal-lease` does).
        let mut other = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .connect()
            .await
            .unwrap();
        sqlx::query("UPDATE leases SET owner = 'host/1/1' WHERE session_id = 's'")
            .execute(&mut other)
            .await
            .unwrap();
        let commit = Commit {
            events: vec![std::sync::Arc::new(LogEntry {
                ordinal: 1,
                recorded_at_ms: 1,
                event: reel_proto::chat::ChatRunStarted::default().into(),
            })],
            ..Commit::default()
        };
        let refused = store.commit("s", &commit).await.unwrap_err();
        assert!(
            matches!(&refused, StoreError::Busy(m) if m.contains("no longer holds")),
            "{refused}"
        );
        assert_eq!(store.summary("s").await.unwrap(), None, "rolled back");
    }
}
