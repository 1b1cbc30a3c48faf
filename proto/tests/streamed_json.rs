//! What a reply streams, written directly, is byte for byte what serde writes: a patch's line
//! (`json::line_to_string`, `json::write_line_ref`) for every patch and every other frame, and
//! a delta's payload (`json::payload_to_string`) for every delta and every other payload.

use proptest::prelude::*;
use reel_proto::{
    Any,
    chat::{
        ChatReasoningDelta, ChatReasoningPatch, ChatTextDelta, ChatTextPatch,
        ChatToolArgumentsDelta, ChatToolArgumentsPatch, ChatUserMessageAccepted, CorrelationInfo,
    },
    json::{self, FrameRef, LineRef},
    rpc::UiEventFrame,
};

/// Strings with what JSON escapes: quotes, backslashes, control characters, the line
/// separators JavaScript splits on, and text beyond ASCII; empty ones are left out.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z ]{1,12}",
        "[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}\u{2029}é漢😀a]{1,16}",
        any::<String>(),
    ]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), 1..1_000u64, Just(u64::MAX), any::<u64>()]
}

/// Modes in the enum, none, and ones outside it (which serde refuses, and so must the line).
fn mode() -> impl Strategy<Value = i32> {
    prop_oneof![0..4i32, Just(-1), Just(7)]
}

fn correlation() -> impl Strategy<Value = Option<CorrelationInfo>> {
    prop_oneof![
        4 => Just(None),
        1 => text().prop_map(|run_id| Some(CorrelationInfo { run_id, ..Default::default() })),
    ]
}

prop_compose! {
    fn text_patch()(
        (message_id, role, stream_id, text, status) in (text(), text(), text(), text(), text()),
        (sequence, offset, mode, last) in (number(), number(), mode(), any::<bool>()),
        (finish_reason, prompt, correlation) in (text(), text(), correlation()),
    ) -> Any {
        ChatTextPatch {
            message_id, role, stream_id, sequence, offset, text, mode, status,
            r#final: last, finish_reason, prompt, correlation,
        }.into()
    }
}

prop_compose! {
    fn reasoning_patch()(
        (message_id, role, stream_id, text, status) in (text(), text(), text(), text(), text()),
        (sequence, offset, mode, last) in (number(), number(), mode(), any::<bool>()),
        (finish_reason, prompt, correlation) in (text(), text(), correlation()),
        (parent_message_id, source) in (text(), text()),
    ) -> Any {
        ChatReasoningPatch {
            message_id, role, stream_id, sequence, offset, text, mode, status,
            r#final: last, finish_reason, prompt, correlation, parent_message_id, source,
        }.into()
    }
}

prop_compose! {
    fn arguments_patch()(
        (message_id, tool_call_id, tool_name, stream_id) in (text(), text(), text(), text()),
        (sequence, offset, mode, last) in (number(), number(), mode(), any::<bool>()),
        (arguments, status, correlation) in (text(), text(), correlation()),
    ) -> Any {
        ChatToolArgumentsPatch {
            message_id, tool_call_id, tool_name, stream_id, sequence, offset, arguments,
            mode, status, r#final: last, correlation,
        }.into()
    }
}

/// Any payload a ui event carries here: the three patches, and one that is not a patch.
fn payload() -> impl Strategy<Value = Option<Any>> {
    prop_oneof![
        3 => text_patch().prop_map(Some),
        2 => reasoning_patch().prop_map(Some),
        2 => arguments_patch().prop_map(Some),
        1 => text().prop_map(|text| Some(ChatUserMessageAccepted { text, ..Default::default() }.into())),
        1 => Just(None),
    ]
}

/// A payload a log event carries: the three deltas, and two that are not deltas.
fn event() -> impl Strategy<Value = Any> {
    prop_oneof![
        (text(), text()).prop_map(|(message_id, text)| ChatTextDelta { message_id, text }.into()),
        (text(), text())
            .prop_map(|(message_id, text)| ChatReasoningDelta { message_id, text }.into()),
        (text(), text()).prop_map(|(message_id, arguments)| {
            ChatToolArgumentsDelta {
                message_id,
                arguments,
            }
            .into()
        }),
        text().prop_map(|text| ChatUserMessageAccepted {
            text,
            ..Default::default()
        }
        .into()),
        text_patch(),
    ]
}

/// One path's results: the string, and the line as written to a writer (or the errors).
type Encoded = (Result<String, String>, Result<Vec<u8>, String>);

/// Both paths' results: the direct one's, then serde's.
fn both_ways(line: &LineRef<'_>) -> [Encoded; 2] {
    let written = |direct: bool| {
        let mut out = Vec::new();
        let result = match direct {
            true => json::write_line_ref(&mut out, line),
            false => json::write_line(&mut out, line),
        };
        result.map(|()| out).map_err(|e| e.to_string())
    };
    [
        (
            json::line_to_string(line).map_err(|e| e.to_string()),
            written(true),
        ),
        (
            json::to_string(line).map_err(|e| e.to_string()),
            written(false),
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn a_patch_line_is_the_line_serde_writes(
        session_id in text(),
        request_id in text(),
        ordinal in number(),
        name in text(),
        payload in payload(),
    ) {
        let ui = UiEventFrame { ordinal, name, payload };
        let line = LineRef { session_id: &session_id, request_id: &request_id, frame: FrameRef::UiEvent(&ui) };
        let [direct, serde] = both_ways(&line);
        // Both fail together (a mode outside the enum), or both write the same bytes.
        prop_assert_eq!(direct.0.is_ok(), serde.0.is_ok());
        prop_assert_eq!(direct.1.is_ok(), serde.1.is_ok());
        prop_assert_eq!(direct.0.ok(), serde.0.ok());
        prop_assert_eq!(direct.1.ok(), serde.1.ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn a_delta_s_payload_is_the_json_serde_writes(event in event()) {
        let direct = json::payload_to_string(&event).map_err(|e| e.to_string());
        prop_assert_eq!(direct, json::to_string(&event).map_err(|e| e.to_string()));
    }
}

#[test]
fn a_delta_s_patch_is_written_directly_and_its_string_has_no_spare_room() {
    let ui = UiEventFrame {
        ordinal: 6,
        name: "ChatTextPatch".into(),
        payload: Some(
            ChatTextPatch {
                message_id: "m1".into(),
                role: "assistant".into(),
                sequence: 2,
                offset: 4,
                text: "tok \"\u{2028}".into(),
                mode: 1,
                status: "streaming".into(),
                ..Default::default()
            }
            .into(),
        ),
    };
    let line = LineRef {
        session_id: "s1",
        request_id: "",
        frame: FrameRef::UiEvent(&ui),
    };
    let encoded = json::line_to_string(&line).unwrap();
    assert_eq!(
        encoded,
        r#"{"version":1,"sessionId":"s1","uiEvent":{"ordinal":"6","name":"ChatTextPatch","payload":{"@type":"type.googleapis.com/reel.chat.v1.ChatTextPatch","messageId":"m1","role":"assistant","sequence":"2","offset":"4","text":"tok \"\u2028","mode":"CHAT_STREAM_PATCH_MODE_APPEND","status":"streaming"}}}"#
    );
    assert_eq!(encoded.capacity(), encoded.len());
}
