//! Writing protocol frames for a stored session (`reel export --format jsonl`, `reel tail`):
//! the same `RpcLine`s, byte for byte, that a client of the live session read.

use std::io::Write;

use reel_engine::DoneStatus;
use reel_proto::{
    json,
    rpc::{self, DoneFrame, HelloFrame, RpcLine, SnapshotFrame, UiEventFrame, rpc_line::Frame},
};

/// Writes one session's frames, one per line.
pub struct FrameWriter<W: Write> {
    out: W,
    session_id: String,
    line: Vec<u8>,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(out: W, session_id: &str) -> Self {
        Self {
            out,
            session_id: session_id.to_owned(),
            line: Vec::new(),
        }
    }

    pub fn hello(&mut self) -> std::io::Result<()> {
        self.write(Frame::Hello(HelloFrame {
            protocol: rpc::PROTOCOL.into(),
            server: format!("reel/{}", env!("CARGO_PKG_VERSION")),
            capabilities: ["ui-events", "snapshot", "done"].map(String::from).to_vec(),
            protocol_version: rpc::PROTOCOL_VERSION,
        }))
    }

    pub fn snapshot(&mut self, snapshot: SnapshotFrame) -> std::io::Result<()> {
        self.write(Frame::Snapshot(snapshot))
    }

    pub fn ui_event(&mut self, event: UiEventFrame) -> std::io::Result<()> {
        self.write(Frame::UiEvent(event))
    }

    pub fn done(&mut self, status: DoneStatus) -> std::io::Result<()> {
        self.write(Frame::Done(DoneFrame {
            status: status.into(),
        }))
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn write(&mut self, frame: Frame) -> std::io::Result<()> {
        let line = RpcLine {
            version: rpc::PROTOCOL_VERSION,
            session_id: self.session_id.clone(),
            request_id: String::new(),
            frame: Some(frame),
        };
        self.line.clear();
        json::write_line(&mut self.line, &line).map_err(std::io::Error::other)?;
        self.out.write_all(&self.line)
    }
}
