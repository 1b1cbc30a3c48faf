//! `reel serve`'s event streams over real HTTP and Server-Sent Events on 127.0.0.1: every
//! subscriber sees the same frames, a stream resumes exactly from any event id (after a drop and
//! after the server was killed), a cursor past the end is an error, and a subscriber that falls
//! behind catches up from the store without a gap.

use std::time::Duration;

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    served::{Served, StreamedFrame, echo_command, text_of, ui_events},
    write_file,
};
use serde_json::Value;

#[tokio::test]
async fn two_subscribers_see_the_same_frames() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    let mut one = served.events("s", None).await;
    let mut two = served.events("s", None).await;
    served
        .request(
            "s",
            r#"{"requestId":"a","submit":{"prompt":"one two three four"}}"#,
        )
        .await;
    let (seen_one, seen_two) = (one.until_done("a").await, two.until_done("a").await);
    let texts = |frames: &[StreamedFrame]| -> Vec<(String, String)> {
        frames
            .iter()
            .map(|f| (f.id.clone(), f.frame.text.clone()))
            .collect()
    };
    assert_eq!(texts(&seen_one), texts(&seen_two));
    assert_eq!(text_of(&seen_one), "one two three four");
}

#[tokio::test]
async fn a_stream_resumes_exactly_from_every_event_id_and_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let mut served = Served::start(&echo_command(), &db, &[], &[]);
    served.create("s").await;
    served
        .request(
            "s",
            r#"{"requestId":"a","submit":{"prompt":"alpha beta gamma"}}"#,
        )
        .await;
    served
        .request("s", r#"{"requestId":"b","followUp":{"prompt":"delta"}}"#)
        .await;
    // The whole stream, from before the first event.
    let mut all = served.events("s", Some("0")).await;
    assert!(matches!(
        all.next().await.unwrap().frame.frame(),
        Frame::Hello(_)
    ));
    let (_, summary) = wait_for_runs(&served, "s", 2).await;
    let last = summary["events"].as_u64().unwrap().to_string();
    let whole = ui_events(&all.until_id(&last).await);
    let ids: Vec<String> = {
        let mut again = served.events("s", Some("0")).await;
        again.next().await;
        again
            .until_id(&last)
            .await
            .into_iter()
            .map(|f| f.id)
            .collect()
    };
    assert_eq!(ids.len(), whole.len());
    assert!(
        ids.iter().any(|id| id.contains('.')),
        "an event with several frames: {ids:?}"
    );
    // Dropped after any frame, a client resumes with the next one: no gap, no duplicate.
    for (at, id) in ids.iter().enumerate().take(ids.len() - 1) {
        let mut resumed = served.events("s", Some(id)).await;
        assert!(matches!(
            resumed.next().await.unwrap().frame.frame(),
            Frame::Hello(_)
        ));
        let rest = ui_events(&resumed.until_id(&last).await);
        assert_eq!(rest, whole[at + 1..], "resumed after {id}");
    }

    // Killed and started again on the same database, the server resumes streams the same way,
    // and the session goes on gap-free.
    served.kill();
    let served = Served::start(&echo_command(), &db, &[], &[]);
    let middle = &ids[ids.len() / 2];
    let mut resumed = served.events("s", Some(middle)).await;
    resumed.next().await;
    let at = ids.iter().position(|id| id == middle).unwrap();
    assert_eq!(ui_events(&resumed.until_id(&last).await), whole[at + 1..]);
    served
        .request("s", r#"{"requestId":"c","submit":{"prompt":"epsilon"}}"#)
        .await;
    let next = resumed.until_done("c").await;
    let ordinals: Vec<u64> = ui_events(&next).iter().map(|(o, _, _)| *o).collect();
    assert_eq!(
        ordinals[0],
        last.parse::<u64>().unwrap() + 1,
        "{ordinals:?}"
    );
    assert_eq!(text_of(&next), "epsilon");
}

/// Waits until session `id` has `runs` runs stored; returns its summary.
async fn wait_for_runs(served: &Served, id: &str, runs: u64) -> (u16, Value) {
    for _ in 0..500 {
        let (status, body) = served.get(&format!("/v1/sessions/{id}")).await;
        if body["session"]["runs"].as_u64() == Some(runs)
            && body["session"]["last_run_status"] == "finished"
        {
            return (status, body["session"].clone());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("session {id} never had {runs} finished runs");
}

#[tokio::test]
async fn a_cursor_past_the_end_is_an_error_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    let mut events = served.events("s", Some("5")).await;
    assert!(matches!(
        events.next().await.unwrap().frame.frame(),
        Frame::Hello(_)
    ));
    let error = events.next().await.unwrap();
    let Frame::Error(error) = error.frame.frame() else {
        panic!("an error frame: {error:?}")
    };
    assert_eq!(error.code, "cursor_out_of_range");
    assert!(error.terminal && error.message.contains('5'), "{error:?}");
    assert!(events.next().await.is_none(), "the stream ends");

    let response = served
        .client
        .get(served.url("/v1/sessions/s/events?after=nonsense"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "cursor_out_of_range");
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_catches_up_from_the_store_without_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let delta = "tok ";
    let script = write_file(
        dir.path(),
        "long.yaml",
        &format!("turns:\n  - - repeat: {{times: 20000, steps: [{{text: \"{delta}\"}}]}}\n"),
    );
    let command = write_file(
        dir.path(),
        "long-command.yaml",
        &format!("name: long\ndescription: long\nprompt: unused\nprovider:\n  script: {script}\n"),
    );
    let log = [("REEL_LOG", "info,reel_server=debug")];
    let served = Served::start(&command, &dir.path().join("t.db"), &[], &log);
    served.create("s").await;
    let mut slow = served.events_slowly("s").await;
    slow.next().await;
    slow.next().await;
    let mut fast = served.events("s", None).await;
    served
        .request("s", r#"{"requestId":"long","submit":{"prompt":"go"}}"#)
        .await;
    // The fast one reads as the reply streams; the slow one reads nothing meanwhile, so it
    // falls far behind the broadcast (20,000 events, more than the kernel buffers a socket
    // with; the broadcast holds about a thousand
    // frames, the socket a few kilobytes).
    let fast_frames = fast.until_done("long").await;
    let slow_frames = slow.until_done("long").await;
    let expected = delta.repeat(20000);
    assert_eq!(text_of(&fast_frames), expected);
    assert_eq!(ui_events(&slow_frames), ui_events(&fast_frames));
    let said: Vec<String> = served.stderr.try_iter().collect();
    assert!(
        said.iter().any(|line| line.contains("missed")),
        "the slow subscriber fell behind the broadcast: {said:?}"
    );
}

#[tokio::test]
async fn sessions_are_served_and_resumed_from_postgresql_too() {
    let Some(schema) = reel_tests::postgres() else {
        return;
    };
    let mut served = Served::start_postgres(&echo_command(), &schema.dsn);
    served.create("pg").await;
    let mut events = served.events("pg", None).await;
    let rid = served
        .request("pg", r#"{"submit":{"prompt":"from postgres"}}"#)
        .await;
    let first = events.until_done(&rid).await;
    assert_eq!(text_of(&first), "from postgres");
    let ids: Vec<String> = first.iter().map(|f| f.id.clone()).collect();
    let whole = ui_events(&first);
    // Killed and started again, it streams the rest after any id from the database.
    served.kill();
    let served = Served::start_postgres(&echo_command(), &schema.dsn);
    let middle = ids
        .iter()
        .position(|id| id.contains('.'))
        .expect("an event with several frames");
    let mut resumed = served.events("pg", Some(&ids[middle])).await;
    resumed.next().await;
    let last = whole.last().unwrap().0.to_string();
    let rest = ui_events(&resumed.until_id(&last).await);
    let at = whole
        .iter()
        .position(|(o, _, _)| ids[middle].starts_with(&format!("{o}.")))
        .unwrap();
    assert_eq!(rest, whole[at + 1..]);
}
