//! Runs that wait for a person in `reel serve`: the store's inbox (`GET
//! /v1/sessions?waiting=true`) lists them across restarts and evictions, a decision posted
//! after a restart, after an idle unload or to another node continues the same run, and an
//! `approval_timeout` passes also while no server holds the session.

use std::path::{Path, PathBuf};

use reel_tests::{
    approval_fixture::{runs, send_command},
    served::Served,
    write_file,
};
use serde_json::Value;

/// The inbox of a server: the ids of the sessions `GET /v1/sessions?waiting=true` lists, and
/// the first one's pending calls.
async fn inbox(served: &Served) -> (Vec<String>, Value) {
    let (status, body) = served.get("/v1/sessions?waiting=true").await;
    assert_eq!(status, 200, "{body}");
    let sessions = body["sessions"].as_array().unwrap();
    let ids = sessions
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    let pending = sessions
        .first()
        .map_or(Value::Null, |s| s["pending"].clone());
    (ids, pending)
}

/// The inbox, once it lists a session (the store commits a moment after the frames go out).
async fn inbox_once_filled(served: &Served) -> (Vec<String>, Value) {
    for _ in 0..100 {
        let (ids, pending) = inbox(served).await;
        if !ids.is_empty() {
            return (ids, pending);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the inbox stayed empty for 5 s");
}

/// A server evicting idle sessions after 200 ms, whose session `mail` (the shared command, with
/// `extra` on its tool) waits for a decision and has been unloaded; the tool's run count file
/// and the database.
async fn waiting_and_unloaded(dir: &Path, extra: &str) -> (Served, PathBuf, PathBuf) {
    let (cmd, count) = send_command(dir, extra);
    let db = dir.join("t.db");
    let served = Served::start(
        &cmd,
        &db,
        &["--idle-timeout", "200ms"],
        &[("REEL_LOG", "info,reel_engine=debug")],
    );
    served.create("mail").await;
    let mut events = served.events("mail", None).await;
    served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    question_on(&mut events).await;
    drop(events);
    served.wait_for_log("session mail unloaded").await;
    (served, count, db)
}

/// `reel serve`: a run waits; the server stops (SIGTERM), the submit's stream ends with done
/// `waiting`; a new server lists the session in its inbox, an HTTP `approve` continues the
/// run, and a subscriber that comes back with its last event id sees the rest with no gap.
#[tokio::test]
async fn a_served_run_waits_across_a_restart_and_the_inbox_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = send_command(dir.path(), "");
    let db = dir.path().join("t.db");
    let served = Served::start(&cmd, &db, &[], &[]);
    served.create("mail").await;
    // A session that waits for nobody.
    served.create("quiet").await;
    let mut events = served.events("mail", None).await;
    let submit = served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    let last_id = question_on(&mut events).await;
    // The store commits the question a moment after subscribers see it.
    let (ids, pending) = inbox_once_filled(&served).await;
    assert_eq!(ids, ["mail"], "only the waiting session is in the inbox");
    assert_eq!(pending[0]["call_id"], "c1");
    assert_eq!(pending[0]["tool_name"], "send");
    assert_eq!(pending[0]["arguments"], r#"{"to":"team"}"#);
    assert!(pending[0]["asked_at_ms"].as_u64().unwrap() > 1_700_000_000_000);

    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let ended = events.until_done(&submit).await;
    assert_eq!(ended.last().unwrap().frame.done_status(), Some("waiting"));
    drop(served);

    let served = Served::start(&cmd, &db, &[], &[]);
    let (ids, _) = inbox(&served).await;
    assert_eq!(
        ids,
        ["mail"],
        "the inbox is the store's: it survives the restart"
    );
    let mut events = served.events("mail", Some(&last_id)).await;
    let approve = served
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    let rest = events.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1, "allowed once, run once");
    // No gap: the first event after the cursor is the next one, and they go in order.
    let ordinal = |id: &str| id.split('.').next()?.parse::<u64>().ok();
    let ordinals: Vec<u64> = rest.iter().filter_map(|f| ordinal(&f.id)).collect();
    let first = ordinal(&last_id).unwrap();
    assert_eq!(
        ordinals.first(),
        Some(&(first + 1)),
        "{ordinals:?} after {first}"
    );
    assert!(ordinals.windows(2).all(|w| w[0] <= w[1]), "{ordinals:?}");
    assert!(
        rest.iter()
            .any(|f| f.frame.ui_name() == Some("ChatRunFinished")),
        "the run ends on the new server"
    );
    let (ids, _) = inbox(&served).await;
    assert!(ids.is_empty(), "decided: the inbox is empty ({ids:?})");
}

/// A waiting session is idle like any other: it unloads after `--idle-timeout`, and a
/// decision posted later loads it and continues its run.
#[tokio::test]
async fn a_waiting_session_unloads_when_idle_and_a_later_decision_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let (served, count, _) = waiting_and_unloaded(dir.path(), "").await;
    assert_eq!(runs(&count), 0);
    let mut events = served.events("mail", None).await;
    let approve = served
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    let rest = events.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1);
}

/// Waits on `events` for the question; the SSE id of its frame.
async fn question_on(events: &mut reel_tests::served::Events) -> String {
    loop {
        let frame = events.next().await.expect("the question arrives");
        if frame.frame.ui_name() == Some("ChatToolApprovalRequested") {
            return frame.id;
        }
    }
}

/// Two nodes on PostgreSQL: either node's inbox is the database's; an approve posted to the
/// node that does not hold the session is forwarded to the one that does; and a run waiting on
/// a node that is killed goes on where the decision is posted, once the lock is free.
#[tokio::test]
async fn on_postgresql_a_decision_posted_to_any_node_continues_the_run() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = send_command(dir.path(), "");
    // Two runs, each with a call that asks.
    write_file(
        dir.path(),
        "script.yaml",
        "turns:\n  - - tool_call: {id: c1, name: send, arguments: {to: team}}\n  - - text: sent\n  - - tool_call: {id: c2, name: send, arguments: {to: all}}\n  - - text: sent again\n",
    );
    let mut a = Served::start_node(&cmd, &schema.dsn, reel_tests::free_port());
    let b = Served::start_node(&cmd, &schema.dsn, reel_tests::free_port());
    a.create("mail").await;
    let mut on_a = a.events("mail", None).await;
    let submit = a
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    question_on(&mut on_a).await;
    let (ids, pending) = inbox_once_filled(&b).await;
    assert_eq!(ids, ["mail"]);
    assert_eq!(pending[0]["call_id"], "c1");
    let approve = b
        .request(
            "mail",
            r#"{"approve":{"callId":"c1","decision":"allow_once"}}"#,
        )
        .await;
    // A holds the run: the approve gets its own done, and the submit goes on to its end.
    let rest = on_a.until_done(&approve).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    let rest = on_a.until_done(&submit).await;
    assert_eq!(rest.last().unwrap().frame.done_status(), Some("ok"));
    assert_eq!(runs(&count), 1, "allowed once on the other node, run once");

    // A second run waits on A, and A is killed: B continues it.
    let mut on_a = a.events("mail", None).await;
    a.request("mail", r#"{"submit":{"prompt":"Again."}}"#).await;
    question_on(&mut on_a).await;
    inbox_once_filled(&b).await;
    a.kill();
    let started = std::time::Instant::now();
    loop {
        let (status, answer) = b
            .post(
                "/v1/sessions/mail/requests",
                r#"{"requestId":"later","approve":{"callId":"c2","decision":"allow_once"}}"#,
            )
            .await;
        if status == 202 {
            break;
        }
        // Until PostgreSQL has seen A's connection close, B forwards to A and A is gone.
        assert!(matches!(status, 409 | 502), "{status} {answer}");
        assert!(started.elapsed().as_secs() < 30, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for _ in 0..100 {
        if runs(&count) == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(runs(&count), 2, "the killed node's waiting run ran on B");
    let (ids, _) = inbox(&b).await;
    assert!(ids.is_empty(), "{ids:?}");
}

/// An `approval_timeout` passes while no server holds the session (it unloaded, idle): the
/// server loads it when the call is due, the call is decided `expired` and not run, and the
/// inbox is empty again.
#[tokio::test]
async fn a_call_of_an_unloaded_session_expires_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let (served, count, db) = waiting_and_unloaded(dir.path(), "    approval_timeout: 1s\n").await;
    let (_, pending) = inbox_once_filled(&served).await;
    assert!(pending[0]["expires_at_ms"].as_u64().is_some(), "{pending}");
    expires_unrun(&served, &count, db).await;
}

/// A database from before the store kept the deadlines (migration 9): the first server to
/// open it reads the waiting calls' deadlines from their stored entities, and a call of a
/// session nobody holds expires on time as on any other.
#[tokio::test]
async fn a_call_stored_before_deadlines_were_kept_expires_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, count) = send_command(dir.path(), "    approval_timeout: 2s\n");
    let db = dir.path().join("t.db");
    let mut served = Served::start(&cmd, &db, &[], &[]);
    served.create("mail").await;
    served
        .request("mail", r#"{"submit":{"prompt":"Mail the team."}}"#)
        .await;
    inbox_once_filled(&served).await;
    // A crash while the call waits, well before its deadline.
    served.kill();
    let undone = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("DROP TABLE approval_deadlines; DELETE FROM _sqlx_migrations WHERE version = 9;")
        .status()
        .expect("sqlite3 runs (.ci/run installs it)");
    assert!(undone.success());
    let served = Served::start(&cmd, &db, &[], &[]);
    let (ids, _) = inbox_once_filled(&served).await;
    assert_eq!(ids, ["mail"]);
    expires_unrun(&served, &count, db).await;
}

/// Waits until the inbox is empty again, then checks that session `mail`'s call was decided
/// `expired` and never ran.
async fn expires_unrun(served: &Served, count: &Path, db: PathBuf) {
    let mut emptied = false;
    for _ in 0..200 {
        if inbox(served).await.0.is_empty() {
            emptied = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(emptied, "the call expired and left the inbox");
    assert_eq!(runs(count), 0, "an expired call never runs");
    let events =
        tokio::task::spawn_blocking(move || reel_tests::TimelineDb::open(&db).events("mail"))
            .await
            .unwrap();
    let decided: Vec<String> = events
        .into_iter()
        .filter_map(|e| match e.event {
            reel_proto::Any::ChatToolApprovalDecided(d) => Some(d.decision),
            _ => None,
        })
        .collect();
    assert_eq!(decided, ["expired"]);
}
