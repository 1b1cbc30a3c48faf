//! A served session's copies over HTTP: exports in every format, equal byte for byte to what
//! `reel export` writes for the same session, and forks that continue on their own.

use reel_tests::{
    TimelineDb, run,
    served::{Served, echo_command},
};

#[tokio::test]
async fn exports_are_reel_export_s_bytes_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let served = Served::start(&echo_command(), &db, &[], &[]);
    served.create("s1").await;
    assert_eq!(served.reply("s1", "first words").await, "first words");
    assert_eq!(served.reply("s1", "second words").await, "second words");

    let db_arg = db.to_str().unwrap();
    for (format, kind) in [
        ("jsonl", "application/jsonl; charset=utf-8"),
        ("markdown", "text/markdown; charset=utf-8"),
        ("html", "text/html; charset=utf-8"),
        ("turns", "application/json"),
    ] {
        for at in [None, Some("3")] {
            let mut path = format!("/v1/sessions/s1/export?format={format}");
            let mut args = vec!["export", "s1", "--format", format, "--timeline-db", db_arg];
            if let Some(at) = at {
                path.push_str(&format!("&at={at}"));
                args.extend(["--at", at]);
            }
            let (status, content_type, body) = served.get_text(&path).await;
            assert_eq!(status, 200, "{path}: {body}");
            assert_eq!(content_type, kind, "{path}");
            let cli = run(&args);
            assert!(cli.status.success(), "{args:?}: {cli:?}");
            assert_eq!(body, String::from_utf8(cli.stdout).unwrap(), "{path}");
            assert!(body.contains("first words"), "{path}: {body}");
            assert_eq!(
                body.contains("second words"),
                at.is_none(),
                "{path}: {body}"
            );
        }
    }

    let refusals = [
        ("/v1/sessions/s1/export?format=pdf", 400, "invalid_query"),
        ("/v1/sessions/s1/export", 400, "invalid_query"),
        (
            "/v1/sessions/s1/export?format=html&at=x",
            400,
            "invalid_query",
        ),
        (
            "/v1/sessions/s1/export?format=html&at=999",
            400,
            "ordinal_out_of_range",
        ),
        (
            "/v1/sessions/nobody/export?format=html",
            404,
            "session_not_found",
        ),
    ];
    for (path, status, code) in refusals {
        let (got, body) = served.get(path).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn a_fork_holds_its_parent_s_history_up_to_an_ordinal_and_goes_on_alone() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("parent").await;
    served.reply("parent", "one").await;
    let (_, after_one) = served.get("/v1/sessions/parent").await;
    let at = after_one["session"]["events"].as_u64().unwrap();
    served.reply("parent", "two").await;

    let (status, fork) = served
        .post(
            "/v1/sessions/parent/fork",
            &format!(r#"{{"id":"child","at":{at}}}"#),
        )
        .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["session_id"], "child");
    assert_eq!(fork["events"].as_u64(), Some(at), "{fork}");
    assert_eq!(served.reply("child", "three").await, "three");

    // The child's context is the parent's first turn and its own; the parent is untouched.
    let (_, turns, child) = served
        .get_text("/v1/sessions/child/export?format=turns")
        .await;
    assert!(turns.contains("json"), "{turns}");
    for (text, held) in [("one", true), ("two", false), ("three", true)] {
        assert_eq!(child.contains(text), held, "{text}: {child}");
    }
    let (_, _, parent) = served
        .get_text("/v1/sessions/parent/export?format=turns")
        .await;
    assert!(
        parent.contains("two") && !parent.contains("three"),
        "{parent}"
    );

    // Without a body: a new id, all of the parent's events.
    let (status, whole) = served.post("/v1/sessions/parent/fork", "").await;
    assert_eq!(status, 201, "{whole}");
    let (_, parent_now) = served.get("/v1/sessions/parent").await;
    assert_eq!(whole["events"], parent_now["session"]["events"]);

    let refusals = [
        (
            "/v1/sessions/parent/fork",
            r#"{"id":"child"}"#,
            409,
            "session_exists",
        ),
        (
            "/v1/sessions/parent/fork",
            r#"{"at":99999}"#,
            400,
            "ordinal_out_of_range",
        ),
        // An empty fork would hold nothing to run (found by the OpenAPI fuzzer).
        (
            "/v1/sessions/parent/fork",
            r#"{"at":0}"#,
            400,
            "ordinal_out_of_range",
        ),
        (
            "/v1/sessions/parent/fork",
            r#"{"id":"no/slash"}"#,
            400,
            "invalid_session_id",
        ),
        (
            "/v1/sessions/parent/fork",
            r#"{"ad":1}"#,
            400,
            "invalid_request_json",
        ),
        ("/v1/sessions/nobody/fork", "", 404, "session_not_found"),
    ];
    for (path, body, status, code) in refusals {
        let (got, answer) = served.post(path, body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
    }
}

/// `--turns-db`: each run's closing context goes to the turns database, as `run-command
/// --turns-db` writes it, in its own file or in the timeline's.
#[tokio::test]
async fn turns_go_to_the_turns_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    for turns in [dir.path().join("turns.db"), db.clone()] {
        let turns_arg = turns.to_str().unwrap().to_owned();
        let served = Served::start(&echo_command(), &db, &["--turns-db", &turns_arg], &[]);
        let id = if turns == db { "same-file" } else { "own-file" };
        served.create(id).await;
        assert_eq!(served.reply(id, "first words").await, "first words");
        assert_eq!(served.reply(id, "second words").await, "second words");
        let owned = id.to_owned();
        let rows = tokio::task::spawn_blocking(move || TimelineDb::open(&turns).turns(&owned))
            .await
            .unwrap();
        let statuses: Vec<&str> = rows.iter().map(|(status, ..)| status.as_str()).collect();
        assert_eq!(statuses, ["finished", "finished"], "{id}: {rows:?}");
        let last = rows.last().unwrap().2.to_string();
        assert!(
            last.contains("first words") && last.contains("second words"),
            "{id}: {last}"
        );
    }
}
