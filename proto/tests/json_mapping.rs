//! The canonical proto3 JSON mapping of every frame kind, in both directions.

use prost::Message;
use reel_proto::{
    Any,
    chat::{
        ChatStreamPatchMode, ChatTextPatch, ChatToolCallRequested, ChatUserMessageAccepted,
        CorrelationInfo,
    },
    json::{self, FrameRef, LineRef},
    rpc::{self, RpcLine, RpcRequestLine, rpc_line::Frame},
};
use serde_json::{Value, json};

fn patch() -> Any {
    ChatTextPatch {
        message_id: "0190-msg".into(),
        role: "assistant".into(),
        sequence: 3,
        offset: 12,
        text: "Hello".into(),
        mode: ChatStreamPatchMode::Append as i32,
        status: "streaming".into(),
        correlation: Some(CorrelationInfo {
            run_id: "run-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .into()
}

fn line(frame: Frame) -> RpcLine {
    RpcLine {
        version: 1,
        session_id: "s1".into(),
        request_id: "r1".into(),
        frame: Some(frame),
    }
}

fn every_frame() -> Vec<RpcLine> {
    vec![
        line(Frame::Hello(rpc::HelloFrame {
            protocol: "reel.rpc.v1".into(),
            server: "reel/0.1.0".into(),
            capabilities: vec!["ui-events".into(), "done".into()],
            protocol_version: 1,
        })),
        line(Frame::Snapshot(rpc::SnapshotFrame {
            snapshot_ordinal: 42,
            entities: vec![rpc::SnapshotEntity {
                kind: "ChatMessage".into(),
                id: "m1".into(),
                created_ordinal: 1,
                last_event_ordinal: 42,
                tombstone: false,
                payload: Some(Any::ChatMessageEntity(Box::new(
                    reel_proto::chat::ChatMessageEntity {
                        message_id: "m1".into(),
                        role: "user".into(),
                        text: "hi".into(),
                        ..Default::default()
                    },
                ))),
            }],
        })),
        line(Frame::UiEvent(rpc::UiEventFrame {
            ordinal: 7,
            name: "ChatTextPatch".into(),
            payload: Some(patch()),
        })),
        line(Frame::BackendEvent(rpc::BackendEventFrame {
            ordinal: 8,
            name: "ChatToolCallRequested".into(),
            payload: Some(
                ChatToolCallRequested {
                    tool_call_id: "t1".into(),
                    tool_name: "lookup".into(),
                    input: r#"{"q":"x"}"#.into(),
                    ..Default::default()
                }
                .into(),
            ),
        })),
        line(Frame::Error(rpc::ErrorFrame {
            code: "run_failed".into(),
            message: "boom".into(),
            detail: String::new(),
            terminal: true,
        })),
        line(Frame::Done(rpc::DoneFrame {
            status: "ok".into(),
        })),
    ]
}

#[test]
fn every_frame_kind_round_trips_through_json() {
    for frame in every_frame() {
        let text = json::to_string(&frame).unwrap();
        let back: RpcLine = serde_json::from_str(&text).unwrap();
        assert_eq!(back, frame, "{text}");
        // And through protobuf binary, which exercises Any's own encoding.
        let binary = frame.encode_to_vec();
        assert_eq!(RpcLine::decode(binary.as_slice()).unwrap(), frame);
    }
}

#[test]
fn canonical_json_shape() {
    let frame = line(Frame::UiEvent(rpc::UiEventFrame {
        ordinal: 7,
        name: "ChatTextPatch".into(),
        payload: Some(patch()),
    }));
    let value: Value = serde_json::from_str(&json::to_string(&frame).unwrap()).unwrap();
    assert_eq!(
        value,
        json!({
            "version": 1,
            "sessionId": "s1",
            "requestId": "r1",
            "uiEvent": {
                "ordinal": "7",
                "name": "ChatTextPatch",
                "payload": {
                    "@type": "type.googleapis.com/reel.chat.v1.ChatTextPatch",
                    "messageId": "0190-msg",
                    "role": "assistant",
                    "sequence": "3",
                    "offset": "12",
                    "text": "Hello",
                    "mode": "CHAT_STREAM_PATCH_MODE_APPEND",
                    "status": "streaming",
                    "correlation": {"runId": "run-1"}
                }
            }
        })
    );
    // "@type" comes first, as every protobuf JSON printer writes it.
    let text = json::to_string(&frame).unwrap();
    assert!(text.contains(r#""payload":{"@type":"#), "{text}");
}

#[test]
fn unset_fields_are_omitted() {
    let frame = line(Frame::Done(rpc::DoneFrame {
        status: String::new(),
    }));
    assert_eq!(
        json::to_string(&frame).unwrap(),
        r#"{"version":1,"sessionId":"s1","requestId":"r1","done":{}}"#
    );
}

#[test]
fn line_separators_are_escaped() {
    let accepted: Any = ChatUserMessageAccepted {
        text: "a\u{2028}b\u{2029}c\u{e2}".into(),
        ..Default::default()
    }
    .into();
    let frame = line(Frame::UiEvent(rpc::UiEventFrame {
        ordinal: 1,
        name: "x".into(),
        payload: Some(accepted),
    }));
    let text = json::to_string(&frame).unwrap();
    assert!(text.contains(r"a\u2028b\u2029c"), "{text}");
    assert!(!text.contains('\u{2028}') && !text.contains('\u{2029}'));
    let back: RpcLine = serde_json::from_str(&text).unwrap();
    assert_eq!(back, frame);
}

#[test]
fn a_big_value_is_encoded_once_at_its_exact_size() {
    // A long reply's text: past the one-pass size, with separators to escape on the way.
    let text = "tok \u{2028}".repeat(40_000);
    let accepted: Any = ChatUserMessageAccepted {
        text: text.clone(),
        ..Default::default()
    }
    .into();
    let encoded = json::to_string(&accepted).unwrap();
    let mut line = Vec::new();
    json::write_line(&mut line, &accepted).unwrap();
    assert_eq!(format!("{encoded}\n").as_bytes(), line.as_slice());
    assert_eq!(
        encoded.capacity(),
        encoded.len() + 1,
        "one allocation of the exact size"
    );
    let back: Value = serde_json::from_str(&encoded).unwrap();
    assert_eq!(back["text"], Value::String(text));
    // A small one takes the one pass and the same bytes, in a string of exactly its length
    // (which becomes a frame's shared bytes without another allocation).
    let small = json::to_string(&patch()).unwrap();
    assert_eq!(small.capacity(), small.len());
    assert_eq!(
        serde_json::from_str::<Value>(&small).unwrap()["text"],
        "Hello"
    );
}

#[test]
fn borrowed_lines_serialize_exactly_as_owned_ones() {
    for owned in every_frame() {
        let frame = match owned.frame.as_ref().unwrap() {
            Frame::Hello(f) => FrameRef::Hello(f),
            Frame::Snapshot(f) => FrameRef::Snapshot(f),
            Frame::UiEvent(f) => FrameRef::UiEvent(f),
            Frame::BackendEvent(f) => FrameRef::BackendEvent(json::BackendEventRef {
                ordinal: f.ordinal,
                name: &f.name,
                payload: f.payload.as_ref().expect("a backend event has its event"),
            }),
            Frame::Error(f) => FrameRef::Error(f),
            Frame::Done(f) => FrameRef::Done(f),
        };
        for (session_id, request_id) in [("s1", "r1"), ("", "")] {
            let borrowed = LineRef {
                session_id,
                request_id,
                frame,
            };
            let mut expected = borrowed.to_owned_line();
            expected.frame.clone_from(&owned.frame);
            assert_eq!(
                json::to_string(&borrowed).unwrap(),
                json::to_string(&expected).unwrap()
            );
        }
    }
}

#[test]
fn requests_parse_with_unknown_fields_ignored() {
    let request: RpcRequestLine = serde_json::from_str(
        r#"{"version":1,"sessionId":"demo","requestId":"r1","submit":{"prompt":"hi","future":1},"extra":true}"#,
    )
    .unwrap();
    assert_eq!(request.request_id, "r1");
    match request.request {
        Some(rpc::rpc_request_line::Request::Submit(submit)) => assert_eq!(submit.prompt, "hi"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn unknown_any_type_is_an_error_not_a_panic() {
    let text =
        r#"{"ordinal":"1","name":"X","payload":{"@type":"type.googleapis.com/other.Thing","a":1}}"#;
    assert!(serde_json::from_str::<rpc::UiEventFrame>(text).is_err());
    let text = r#"{"ordinal":"1","name":"X","payload":{"a":1}}"#;
    assert!(serde_json::from_str::<rpc::UiEventFrame>(text).is_err());
}

#[test]
fn any_binary_fields_decode_in_either_order() {
    let typed = patch();
    let value = match &typed {
        Any::ChatTextPatch(p) => p.encode_to_vec(),
        _ => unreachable!(),
    };
    // value (field 2) before type_url (field 1)
    let mut buf = Vec::new();
    prost::encoding::bytes::encode(2, &value, &mut buf);
    prost::encoding::string::encode(1, &typed.type_url().to_owned(), &mut buf);
    assert_eq!(Any::decode(buf.as_slice()).unwrap(), typed);
}

/// A log entry written as a frame borrows it; the line is byte for byte the owned frame's.
#[test]
fn a_borrowed_backend_event_writes_the_owned_frames_bytes() {
    let payload = patch();
    for (ordinal, name) in [(7, "ChatTextPatch"), (u64::MAX, "x"), (0, "")] {
        let borrowed = json::BackendEventRef {
            ordinal,
            name,
            payload: &payload,
        };
        let owned = rpc::BackendEventFrame {
            ordinal,
            name: name.into(),
            payload: Some(payload.clone()),
        };
        assert_eq!(
            json::to_string(&borrowed).unwrap(),
            json::to_string(&owned).unwrap()
        );
        let line = |frame| LineRef {
            session_id: "s",
            request_id: "",
            frame,
        };
        let mut written = Vec::new();
        json::write_line(&mut written, &line(FrameRef::BackendEvent(borrowed))).unwrap();
        let parsed: RpcLine = serde_json::from_slice(&written).unwrap();
        assert_eq!(parsed.frame, Some(Frame::BackendEvent(owned)));
    }
}
