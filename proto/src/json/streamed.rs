//! The JSON of what a reply streams, written straight out instead of through serde: each
//! delta's stored event (`ChatTextDelta`, `ChatReasoningDelta`, `ChatToolArgumentsDelta`) and
//! each patch's frame line (`ChatTextPatch`, `ChatReasoningPatch`, `ChatToolArgumentsPatch`).
//!
//! A reply streams one of each per delta, and `reel serve` encodes a thousand sessions' replies
//! at once on one thread. Through pbjson's impls each `uint64` field is first formatted into a
//! string of its own, each field goes through `Any`'s map adapter, and every key and value is
//! escaped byte by byte; here a string with nothing to escape (ids, roles, most deltas) is
//! copied as it is, and any other is escaped by serde_json itself with the same formatter, so
//! the escaping cannot differ. A delta's patch line: 260 ns instead of 580.
//!
//! Each message is destructured whole: a field added to chat.proto stops this from compiling
//! until it is written here too. A patch with a `correlation` (a nested message the patches of
//! a delta never carry) or a mode outside the enum takes the serde path. The tests compare
//! both paths on generated values.

use std::io::{self, Write};

use serde::Serializer as _;

use super::{FrameRef, LineRef, LineSafeFormatter};
use crate::{
    Any,
    chat::{
        ChatReasoningDelta, ChatReasoningPatch, ChatStreamPatchMode, ChatTextDelta, ChatTextPatch,
        ChatToolArgumentsDelta, ChatToolArgumentsPatch,
    },
    rpc::{PROTOCOL_VERSION, UiEventFrame},
};

/// Writes `payload` if it is a delta this writes (`Some`); `None` leaves it to serde.
pub(super) fn write_payload<W: Write>(out: &mut W, payload: &Any) -> Option<io::Result<()>> {
    let (id, key, text) = match payload {
        Any::ChatTextDelta(delta) => {
            let ChatTextDelta { message_id, text } = &**delta;
            (message_id, "text", text)
        }
        Any::ChatReasoningDelta(delta) => {
            let ChatReasoningDelta { message_id, text } = &**delta;
            (message_id, "text", text)
        }
        Any::ChatToolArgumentsDelta(delta) => {
            let ChatToolArgumentsDelta {
                message_id,
                arguments,
            } = &**delta;
            (message_id, "arguments", arguments)
        }
        _ => return None,
    };
    Some((|| {
        let mut fields = Object::open(&mut *out)?;
        fields.string("@type", payload.type_url())?;
        fields.string("messageId", id)?;
        fields.string(key, text)?;
        fields.close()
    })())
}

/// Writes `line` if it is a patch this writes (`Some`); `None` leaves it to serde, untouched.
pub(super) fn write_line<W: Write>(out: &mut W, line: &LineRef<'_>) -> Option<io::Result<()>> {
    let FrameRef::UiEvent(ui) = line.frame else {
        return None;
    };
    let UiEventFrame {
        ordinal,
        name,
        payload,
    } = ui;
    let payload = payload.as_ref()?;
    // Known before a byte is written: a patch this cannot write goes to serde whole.
    let patch = Patch::of(payload)?;
    Some((|| {
        let mut object = Object::open(&mut *out)?;
        object.number("version", u64::from(PROTOCOL_VERSION))?;
        object.string("sessionId", line.session_id)?;
        object.string("requestId", line.request_id)?;
        object.key("uiEvent")?;
        let mut frame = Object::open(&mut *object.out)?;
        frame.quoted_number("ordinal", *ordinal)?;
        frame.string("name", name)?;
        frame.key("payload")?;
        let mut fields = Object::open(&mut *frame.out)?;
        fields.string("@type", payload.type_url())?;
        patch.write_fields(&mut fields)?;
        fields.close()?;
        frame.close()?;
        object.close()
    })())
}

/// A patch this writes.
enum Patch<'a> {
    Text(&'a ChatTextPatch),
    Reasoning(&'a ChatReasoningPatch),
    Arguments(&'a ChatToolArgumentsPatch),
}

/// The [`Prose`] of a text or reasoning patch, destructured whole (with its own `extra`
/// fields, given back beside it).
macro_rules! prose {
    ($patch:expr, $message:ident { $($extra:ident),* }) => {{
        let $message {
            message_id,
            role,
            stream_id,
            sequence,
            offset,
            text,
            mode,
            status,
            r#final,
            finish_reason,
            prompt,
            correlation: _,
            $($extra),*
        } = $patch;
        let prose = Prose {
            message_id,
            role,
            stream_id,
            sequence: *sequence,
            offset: *offset,
            text,
            mode: *mode,
            status,
            last: *r#final,
            finish_reason,
            prompt,
        };
        (prose, ($($extra),*))
    }};
}

impl<'a> Patch<'a> {
    /// The patch `payload` is, when this writes it: one with no `correlation` and a mode in
    /// the enum.
    fn of(payload: &'a Any) -> Option<Self> {
        let (patch, mode, correlated) = match payload {
            Any::ChatTextPatch(p) => (Self::Text(p), p.mode, p.correlation.is_some()),
            Any::ChatReasoningPatch(p) => (Self::Reasoning(p), p.mode, p.correlation.is_some()),
            Any::ChatToolArgumentsPatch(p) => (Self::Arguments(p), p.mode, p.correlation.is_some()),
            _ => return None,
        };
        (!correlated && ChatStreamPatchMode::try_from(mode).is_ok()).then_some(patch)
    }

    /// The patch's own fields, in pbjson's order, defaults left out.
    fn write_fields<W: Write>(&self, fields: &mut Object<'_, W>) -> io::Result<()> {
        match *self {
            Self::Text(patch) => {
                let (prose, ()) = prose!(patch, ChatTextPatch {});
                prose.write(fields)
            }
            Self::Reasoning(patch) => {
                let (prose, (parent_message_id, source)) = prose!(
                    patch,
                    ChatReasoningPatch {
                        parent_message_id,
                        source
                    }
                );
                prose.write(fields)?;
                fields.string("parentMessageId", parent_message_id)?;
                fields.string("source", source)
            }
            Self::Arguments(patch) => {
                let ChatToolArgumentsPatch {
                    message_id,
                    tool_call_id,
                    tool_name,
                    stream_id,
                    sequence,
                    offset,
                    arguments,
                    mode,
                    status,
                    r#final,
                    correlation: _,
                } = patch;
                fields.string("messageId", message_id)?;
                fields.string("toolCallId", tool_call_id)?;
                fields.string("toolName", tool_name)?;
                fields.string("streamId", stream_id)?;
                fields.quoted_number("sequence", *sequence)?;
                fields.quoted_number("offset", *offset)?;
                fields.string("arguments", arguments)?;
                fields.mode(*mode)?;
                fields.string("status", status)?;
                fields.boolean("final", *r#final)
            }
        }
    }
}

/// The fields a text patch and a reasoning patch share, in their order.
struct Prose<'a> {
    message_id: &'a str,
    role: &'a str,
    stream_id: &'a str,
    sequence: u64,
    offset: u64,
    text: &'a str,
    mode: i32,
    status: &'a str,
    last: bool,
    finish_reason: &'a str,
    prompt: &'a str,
}

impl Prose<'_> {
    fn write<W: Write>(&self, fields: &mut Object<'_, W>) -> io::Result<()> {
        fields.string("messageId", self.message_id)?;
        fields.string("role", self.role)?;
        fields.string("streamId", self.stream_id)?;
        fields.quoted_number("sequence", self.sequence)?;
        fields.quoted_number("offset", self.offset)?;
        fields.string("text", self.text)?;
        fields.mode(self.mode)?;
        fields.string("status", self.status)?;
        fields.boolean("final", self.last)?;
        fields.string("finishReason", self.finish_reason)?;
        fields.string("prompt", self.prompt)
    }
}

/// The bytes a JSON string may not hold as they are: the control characters, `"` and `\\`
/// (JSON's escapes), and 0xE2, which starts U+2028 and U+2029 (the line-safe formatter's).
const NEEDS_A_LOOK: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0xE2] = true;
    table
};

/// A JSON object being written: proto3's JSON leaves a field at its default value out.
struct Object<'a, W> {
    out: &'a mut W,
    first: bool,
}

impl<'a, W: Write> Object<'a, W> {
    fn open(out: &'a mut W) -> io::Result<Self> {
        out.write_all(b"{")?;
        Ok(Self { out, first: true })
    }

    fn close(self) -> io::Result<()> {
        self.out.write_all(b"}")
    }

    /// `"key":`, after a comma unless it is the first (the keys are field names: nothing in
    /// them to escape).
    fn key(&mut self, key: &str) -> io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.out.write_all(b",")?;
        }
        self.out.write_all(b"\"")?;
        self.out.write_all(key.as_bytes())?;
        self.out.write_all(b"\":")
    }

    /// `value` as a JSON string: as it is when nothing in it needs escaping (ids, roles, most
    /// deltas), else escaped by serde_json with the line-safe formatter.
    fn escaped(&mut self, value: &str) -> io::Result<()> {
        if value.bytes().all(|b| !NEEDS_A_LOOK[usize::from(b)]) {
            self.out.write_all(b"\"")?;
            self.out.write_all(value.as_bytes())?;
            return self.out.write_all(b"\"");
        }
        let mut serializer =
            serde_json::Serializer::with_formatter(&mut *self.out, LineSafeFormatter);
        serializer.serialize_str(value).map_err(io::Error::from)
    }

    fn string(&mut self, key: &str, value: &str) -> io::Result<()> {
        if value.is_empty() {
            return Ok(());
        }
        self.key(key)?;
        self.escaped(value)
    }

    fn number(&mut self, key: &str, value: u64) -> io::Result<()> {
        if value == 0 {
            return Ok(());
        }
        self.key(key)?;
        self.out
            .write_all(itoa::Buffer::new().format(value).as_bytes())
    }

    /// A `uint64`, which proto3's JSON writes as a string.
    fn quoted_number(&mut self, key: &str, value: u64) -> io::Result<()> {
        if value == 0 {
            return Ok(());
        }
        self.key(key)?;
        self.out.write_all(b"\"")?;
        self.out
            .write_all(itoa::Buffer::new().format(value).as_bytes())?;
        self.out.write_all(b"\"")
    }

    fn boolean(&mut self, key: &str, value: bool) -> io::Result<()> {
        if !value {
            return Ok(());
        }
        self.key(key)?;
        self.out.write_all(b"true")
    }

    fn mode(&mut self, mode: i32) -> io::Result<()> {
        if mode == 0 {
            return Ok(());
        }
        let mode = ChatStreamPatchMode::try_from(mode).map_err(io::Error::other)?;
        self.key("mode")?;
        self.escaped(mode.as_str_name())
    }
}
