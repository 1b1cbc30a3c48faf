//! The canonical proto3 JSON mapping, one frame per line.
//!
//! Three things on top of the serde impls pbjson generates:
//!
//! * U+2028 and U+2029 are written as `\u2028` / `\u2029`. JSON allows them raw, but JavaScript's
//!   readline (and other splitters) treat them as line ends and would cut a frame in two.
//! * [`LineRef`] serializes an `RpcLine` from borrowed parts, byte for byte as the owned
//!   `RpcLine` would, so a sink can write a ui event without cloning its payload.
//! * What a reply streams, a delta's stored event and its patch's frame, is written without
//!   serde ([`payload_to_string`], [`line_to_string`], [`write_line_ref`]), byte for byte as
//!   serde would: a thousand sessions' replies at once are encoded on one thread.

mod streamed;

use std::io;

use serde::{Serialize, Serializer, ser::SerializeStruct};
use serde_json::ser::Formatter;

use crate::Any;
use crate::rpc::{
    self, BackendEventFrame, DoneFrame, ErrorFrame, HelloFrame, SnapshotFrame, UiEventFrame,
};

/// A compact JSON formatter that escapes the two Unicode line separators.
#[derive(Clone, Copy, Debug, Default)]
pub struct LineSafeFormatter;

impl Formatter for LineSafeFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // U+2028 / U+2029 are E2 80 A8 / E2 80 A9 in UTF-8; 0xE2 is rare in most text.
        let bytes = fragment.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while let Some(pos) = bytes[i..].iter().position(|&b| b == 0xE2) {
            let at = i + pos;
            if bytes.len() >= at + 3
                && bytes[at + 1] == 0x80
                && (bytes[at + 2] == 0xA8 || bytes[at + 2] == 0xA9)
            {
                writer.write_all(&bytes[start..at])?;
                writer.write_all(if bytes[at + 2] == 0xA8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                })?;
                start = at + 3;
            }
            i = at + 1;
        }
        writer.write_all(&bytes[start..])
    }
}

/// Writes `value` as one line of canonical JSON (terminated by `\n`) to `out`. Fragments go
/// to `out` as the serializer makes them: a `BufWriter` passes a long text straight through
/// instead of growing a buffer to its size.
pub fn write_line<W, T>(mut out: W, value: &T) -> serde_json::Result<()>
where
    W: io::Write,
    T: Serialize + ?Sized,
{
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, LineSafeFormatter);
    value.serialize(&mut serializer)?;
    out.write_all(b"\n").map_err(serde_json::Error::io)
}

/// Values whose JSON fits in this many bytes are encoded in one pass.
const ONE_PASS_BYTES: usize = 64 * 1024;

/// `value` as one line of canonical JSON, without the trailing newline, in a string of exactly
/// its length.
///
/// It is written into this thread's scratch buffer and copied out once: one allocation of the
/// right size. Written into a string grown as it goes, a frame of a streamed delta (about 330
/// bytes) took three: a buffer, its regrowth, and the shared header `Bytes` adds to a vector
/// with spare room when the frame goes to a subscriber.
///
/// A bigger value (a long reply's text in a stored entity or snapshot) is measured first and
/// encoded into a string of exactly its size: grown by doubling, its buffer would end up to
/// twice the text, and the allocator keeps such pages for the life of the process.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    with_scratch(|scratch| encode(scratch, value))
}

/// The room a thread's scratch buffer keeps between values: a frame of a delta or a tool call
/// fits; a bigger value (a snapshot) grows it for its own encoding only.
const SCRATCH_KEPT: usize = 16 * 1024;

thread_local! {
    /// Where [`to_string`] writes before it copies out.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `encode` with this thread's scratch buffer, and gives back what it grew past
/// [`SCRATCH_KEPT`]. A value whose encoding encodes another (not one of reel's) gets a buffer
/// of its own.
fn with_scratch<R>(encode: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    SCRATCH.with(|scratch| {
        let Ok(mut scratch) = scratch.try_borrow_mut() else {
            return encode(&mut Vec::new());
        };
        let encoded = encode(&mut scratch);
        if scratch.capacity() > SCRATCH_KEPT {
            scratch.clear();
            scratch.shrink_to(SCRATCH_KEPT);
        }
        encoded
    })
}

fn encode<T: Serialize + ?Sized>(scratch: &mut Vec<u8>, value: &T) -> serde_json::Result<String> {
    scratch.clear();
    let mut capped = Capped {
        out: scratch,
        overflowed: false,
    };
    let out = match write_line(&mut capped, value) {
        Ok(()) => scratch[..scratch.len() - 1].to_vec(),
        Err(_) if capped.overflowed => {
            let mut counted = Counted(0);
            write_line(&mut counted, value)?;
            let mut out = Vec::with_capacity(counted.0);
            write_line(&mut out, value)?;
            out.pop();
            out
        }
        Err(error) => return Err(error),
    };
    // Only valid UTF-8 is ever written by serde_json.
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// `line` as one line of canonical JSON, without the trailing newline: [`to_string`], with a
/// streamed patch's line written directly (see `streamed`).
pub fn line_to_string(line: &LineRef<'_>) -> serde_json::Result<String> {
    directly_or_by_serde(line, streamed::write_line)
}

/// An event's payload as canonical JSON: [`to_string`], with a streamed delta written
/// directly (see `streamed`).
pub fn payload_to_string(payload: &Any) -> serde_json::Result<String> {
    directly_or_by_serde(payload, streamed::write_payload)
}

/// `value` written by `direct` into the scratch buffer when it writes it, else by serde.
fn directly_or_by_serde<T: Serialize + ?Sized>(
    value: &T,
    direct: impl FnOnce(&mut Vec<u8>, &T) -> Option<io::Result<()>>,
) -> serde_json::Result<String> {
    with_scratch(|scratch| {
        scratch.clear();
        let Some(written) = direct(scratch, value) else {
            return encode(scratch, value);
        };
        written.map_err(serde_json::Error::io)?;
        // Only valid UTF-8 is written: whole strings, escaped or not, and ASCII.
        Ok(String::from_utf8(scratch.to_vec()).expect("UTF-8 written"))
    })
}

/// Writes `line` as one line of canonical JSON (terminated by `\n`) to `out`:
/// [`write_line`], with a streamed patch's line written directly (see `streamed`).
pub fn write_line_ref<W: io::Write>(mut out: W, line: &LineRef<'_>) -> serde_json::Result<()> {
    match streamed::write_line(&mut out, line) {
        Some(written) => written
            .and_then(|()| out.write_all(b"\n"))
            .map_err(serde_json::Error::io),
        None => write_line(out, line),
    }
}

/// A buffer that refuses to grow past [`ONE_PASS_BYTES`].
///
/// serde_json writes a frame in dozens of small pieces, so each write must cost what a `Vec`'s
/// does: inlined, with the refusal out of line. Written plainly (the error built in `write`),
/// a frame of a streamed delta took 570-600 ns to encode instead of 330 (about a sixth of
/// `reel serve`'s worker in a burst of replies, before `streamed` took the deltas over; every
/// other frame and stored event still passes here).
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    overflowed: bool,
}

impl Capped<'_> {
    #[cold]
    #[inline(never)]
    fn overflow(&mut self) -> io::Error {
        self.overflowed = true;
        io::Error::other("a big value: measured first")
    }
}

impl io::Write for Capped<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.out.len() + buf.len() > ONE_PASS_BYTES {
            return Err(self.overflow());
        }
        self.out.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Counts the bytes written to it.
struct Counted(usize);

impl io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One frame of an [`rpc::RpcLine`], borrowed.
#[derive(Clone, Copy, Debug)]
pub enum FrameRef<'a> {
    Hello(&'a HelloFrame),
    Snapshot(&'a SnapshotFrame),
    UiEvent(&'a UiEventFrame),
    BackendEvent(BackendEventRef<'a>),
    Error(&'a ErrorFrame),
    Done(&'a DoneFrame),
}

/// A [`BackendEventFrame`] made of borrowed parts (a log entry's), so that writing the log's
/// events as frames never copies an event; serializes exactly as the owned frame.
#[derive(Clone, Copy, Debug)]
pub struct BackendEventRef<'a> {
    pub ordinal: u64,
    pub name: &'a str,
    pub payload: &'a Any,
}

impl Serialize for BackendEventRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As pbjson writes a BackendEventFrame: defaults left out, a uint64 as a string.
        let len = usize::from(self.ordinal != 0) + usize::from(!self.name.is_empty()) + 1;
        let mut frame = serializer.serialize_struct("reel.rpc.v1.BackendEventFrame", len)?;
        if self.ordinal != 0 {
            frame.serialize_field("ordinal", self.ordinal.to_string().as_str())?;
        }
        if !self.name.is_empty() {
            frame.serialize_field("name", self.name)?;
        }
        frame.serialize_field("payload", self.payload)?;
        frame.end()
    }
}

impl BackendEventRef<'_> {
    /// The owned frame (for tests and rare paths).
    pub fn to_owned_frame(&self) -> BackendEventFrame {
        BackendEventFrame {
            ordinal: self.ordinal,
            name: self.name.to_owned(),
            payload: Some(self.payload.clone()),
        }
    }
}

/// An [`rpc::RpcLine`] made of borrowed parts; serializes exactly as the owned message.
#[derive(Clone, Copy, Debug)]
pub struct LineRef<'a> {
    pub session_id: &'a str,
    pub request_id: &'a str,
    pub frame: FrameRef<'a>,
}

impl Serialize for LineRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let len =
            2 + usize::from(!self.session_id.is_empty()) + usize::from(!self.request_id.is_empty());
        let mut line = serializer.serialize_struct("reel.rpc.v1.RpcLine", len)?;
        line.serialize_field("version", &rpc::PROTOCOL_VERSION)?;
        if !self.session_id.is_empty() {
            line.serialize_field("sessionId", self.session_id)?;
        }
        if !self.request_id.is_empty() {
            line.serialize_field("requestId", self.request_id)?;
        }
        match self.frame {
            FrameRef::Hello(f) => line.serialize_field("hello", f)?,
            FrameRef::Snapshot(f) => line.serialize_field("snapshot", f)?,
            FrameRef::UiEvent(f) => line.serialize_field("uiEvent", f)?,
            FrameRef::BackendEvent(f) => line.serialize_field("backendEvent", &f)?,
            FrameRef::Error(f) => line.serialize_field("error", f)?,
            FrameRef::Done(f) => line.serialize_field("done", f)?,
        }
        line.end()
    }
}

impl<'a> LineRef<'a> {
    /// The owned `RpcLine` this borrows from (for tests and rare paths).
    pub fn to_owned_line(&self) -> rpc::RpcLine {
        use rpc::rpc_line::Frame;
        let frame = match self.frame {
            FrameRef::Hello(f) => Frame::Hello(f.clone()),
            FrameRef::Snapshot(f) => Frame::Snapshot(f.clone()),
            FrameRef::UiEvent(f) => Frame::UiEvent(f.clone()),
            FrameRef::BackendEvent(f) => Frame::BackendEvent(f.to_owned_frame()),
            FrameRef::Error(f) => Frame::Error(f.clone()),
            FrameRef::Done(f) => Frame::Done(f.clone()),
        };
        rpc::RpcLine {
            version: rpc::PROTOCOL_VERSION,
            session_id: self.session_id.to_owned(),
            request_id: self.request_id.to_owned(),
            frame: Some(frame),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatUserMessageAccepted;

    #[test]
    fn a_thread_keeps_little_of_its_scratch_after_a_big_value() {
        let big: Any = ChatUserMessageAccepted {
            text: "tok ".repeat(10_000),
            ..Default::default()
        }
        .into();
        assert!(to_string(&big).unwrap().len() > 40_000);
        let kept = SCRATCH.with(|scratch| scratch.borrow().capacity());
        assert!(kept <= SCRATCH_KEPT, "{kept} bytes kept");
    }
}
