//! `reel serve`'s WebSocket (`/v1/sessions/{id}/ws`) with a real WebSocket client
//! (tokio-tungstenite): request lines in, frames out, exactly as stdin RPC; what one socket
//! asks shows on every stream of the session; a line that cannot be taken is answered to its
//! socket alone.

use reel_proto::rpc::rpc_line::Frame;
use reel_tests::{
    FrameLine,
    served::{Served, echo_command},
    stored::final_text,
};

#[tokio::test]
async fn a_websocket_is_a_stdin_rpc_client_of_a_served_session() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(&echo_command(), &dir.path().join("t.db"), &[], &[]);
    served.create("s").await;
    let mut socket = served.websocket("/v1/sessions/s/ws").await;
    assert!(matches!(socket.next_frame().await.frame(), Frame::Hello(_)));
    assert!(matches!(
        socket.next_frame().await.frame(),
        Frame::Snapshot(_)
    ));
    let mut watcher = served.events("s", None).await;
    watcher.next().await;
    watcher.next().await;

    let submit = r#"{"requestId":"w1","submit":{"prompt":"over the socket"}}"#;
    socket.send_text(submit).await;
    let frames = socket.until_done("w1").await;
    assert_eq!(final_text(&frames), "over the socket");
    assert_eq!(frames.last().unwrap().done_status(), Some("ok"));
    // The event stream of the same session shows the same frames.
    let watched = watcher.until_done("w1").await;
    let lines = |frames: Vec<&FrameLine>| -> Vec<String> {
        frames.into_iter().map(|f| f.text.clone()).collect()
    };
    assert_eq!(
        lines(frames.iter().collect()),
        lines(watched.iter().map(|w| &w.frame).collect())
    );

    // Lines that cannot be taken are answered on this socket, under their id when they have one.
    socket.send_text(r#"{"requestId":"bad","submit":"#).await;
    let refused = socket.until_done("bad").await;
    let Frame::Error(error) = refused[0].frame() else {
        panic!("an error first: {refused:?}")
    };
    assert_eq!(error.code, "invalid_request_json");
    assert_eq!(refused[1].done_status(), Some("failed"));
    socket.send_binary(vec![1, 2, 3]).await;
    let Frame::Error(error) = socket.next_frame().await.line.frame.unwrap() else {
        panic!("an error for a binary message")
    };
    assert_eq!(error.code, "invalid_request_json");
    // ... and the session goes on; the watcher never saw the refusals.
    socket
        .send_text(r#"{"requestId":"w2","submit":{"prompt":"again"}}"#)
        .await;
    assert_eq!(final_text(&socket.until_done("w2").await), "again");
    let watched = watcher.until_done("w2").await;
    assert!(
        watched.iter().all(|w| w.frame.line.request_id != "bad"),
        "{watched:?}"
    );

    // A socket opened with a cursor starts after it.
    let mut later = served.websocket("/v1/sessions/s/ws?after=3").await;
    assert!(matches!(later.next_frame().await.frame(), Frame::Hello(_)));
    let Frame::UiEvent(first) = later.next_frame().await.line.frame.unwrap() else {
        panic!("a ui event after the cursor")
    };
    assert_eq!(first.ordinal, 4);
    socket.close().await;
}
