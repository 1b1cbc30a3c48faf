//! Many processes on one PostgreSQL server: sessions in parallel, and a server that goes away
//! in the middle of a session.

use std::process::Stdio;

use reel_proto::{Any, rpc::rpc_line::Frame};
use reel_tests::{
    postgres,
    stored::{Backend, assert_log_and_entities_agree, unique},
};

#[test]
fn sessions_in_parallel_share_one_postgres() {
    let Some(schema) = postgres() else { return };
    let backend = Backend::Postgres(schema.dsn.clone());
    let ids: Vec<String> = (0..4).map(|_| unique("parallel")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            backend
                .reel(&[
                    "run-command",
                    "examples/haiku.yaml",
                    "--rpc",
                    "--session-id",
                    id,
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut db = backend.view().unwrap();
    for id in &ids {
        let events = assert_log_and_entities_agree(&mut db, id);
        assert!(matches!(
            events.last().unwrap().event,
            Any::ChatRunFinished(_)
        ));
    }
}

#[test]
fn a_postgres_server_that_goes_away_ends_the_session_with_a_clear_error() {
    let Some(schema) = postgres() else { return };
    let dsn = schema.dsn.clone();
    let backend = Backend::Postgres(dsn.clone());
    let id = unique("gone");
    let mut client = backend.session_client("examples/echo.yaml", &id);
    client.send(r#"{"requestId":"a","submit":{"prompt":"before"}}"#);
    assert_eq!(client.done_of("a"), "ok");
    // The server ends reel's connection, as a restart or a failover would.
    let sql = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'reel/{}'",
        client.pid()
    );
    let terminated = std::process::Command::new("psql")
        .args([dsn.as_str(), "-tAc", &sql])
        .output()
        .expect("psql runs");
    assert!(
        terminated.status.success(),
        "{}",
        String::from_utf8_lossy(&terminated.stderr)
    );
    assert_ne!(
        String::from_utf8_lossy(&terminated.stdout).trim(),
        "0",
        "reel's connection was found"
    );
    client.send(r#"{"requestId":"b","submit":{"prompt":"after"}}"#);
    assert_eq!(client.done_of("b"), "failed");
    let (status, frames, stderr) = client.finish();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let error = frames.iter().find_map(|f| match f.frame() {
        Frame::Error(e) if e.code == "storage_failed" => Some(e.clone()),
        _ => None,
    });
    let error = error.expect("a storage_failed error");
    assert!(error.terminal);
    assert!(stderr.contains("timeline-db"), "{stderr}");
    // What was acknowledged before is stored.
    let mut db = backend.view().unwrap();
    let events = assert_log_and_entities_agree(&mut db, &id);
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Any::ChatUserMessageAccepted(m) if m.text == "before"))
    );
}
