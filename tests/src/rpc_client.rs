//! An interactive stdin-RPC client: a `reel --stdin-rpc` child whose frames are read by a thread
//! as they arrive, so a test can write a request, wait for a given frame, and write the next.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, ChildStdin, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::Duration,
};

use crate::{FrameLine, parse_frames, reel};

/// Waiting longer than this for a frame means reel hung: a guard against hangs, not a timing
/// assertion (the machines are shared and slow at times).
const HANG_GUARD: Duration = Duration::from_secs(60);

pub struct RpcClient {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: mpsc::Receiver<FrameLine>,
    stderr: Option<thread::JoinHandle<String>>,
    /// Every frame received so far, in order.
    pub frames: Vec<FrameLine>,
}

impl RpcClient {
    /// Starts `reel ARGS` with stdin and stdout piped.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_stdin(args, Stdio::piped())
    }

    /// Starts `reel ARGS` reading `stdin`.
    pub fn start_with_stdin(args: &[&str], stdin: Stdio) -> Self {
        let mut child = reel(args)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("reel starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, incoming) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let frame = parse_frames(format!("{line}\n").as_bytes()).remove(0);
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        let mut stderr_pipe = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr_pipe.read_to_string(&mut text);
            text
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            incoming,
            stderr: Some(stderr),
            frames: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one request line.
    pub fn send(&mut self, line: &str) {
        self.send_bytes(line.as_bytes());
    }

    /// Writes raw bytes, no newline.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .expect("write bytes");
    }

    /// Writes raw bytes followed by a newline.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush())
            .expect("write a request");
    }

    /// Closes stdin: end of input.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the first frame not yet seen that matches `wanted`, keeping all frames seen.
    pub fn wait_for(&mut self, what: &str, wanted: impl Fn(&FrameLine) -> bool) -> FrameLine {
        loop {
            let frame = self.incoming.recv_timeout(HANG_GUARD).unwrap_or_else(|_| {
                panic!(
                    "no {what} within {HANG_GUARD:?}; frames so far: {:#?}",
                    self.texts()
                )
            });
            self.frames.push(frame.clone());
            if wanted(&frame) {
                return frame;
            }
        }
    }

    /// Waits for the done of request `rid` and returns its status.
    pub fn done_of(&mut self, rid: &str) -> String {
        let done = self.wait_for(&format!("done of {rid}"), |f| {
            f.line.request_id == rid && f.done_status().is_some()
        });
        done.done_status().unwrap().to_owned()
    }

    /// Waits for the process to exit; returns its status, and its stderr.
    pub fn finish(mut self) -> (ExitStatus, Vec<FrameLine>, String) {
        self.close_stdin();
        while let Ok(frame) = self.incoming.recv_timeout(HANG_GUARD) {
            self.frames.push(frame);
        }
        let status = self.child.wait().expect("reel exits");
        let stderr = self.stderr.take().unwrap().join().unwrap();
        (status, std::mem::take(&mut self.frames), stderr)
    }

    /// The frames seen so far for request `rid`.
    pub fn frames_of(&self, rid: &str) -> Vec<&FrameLine> {
        self.frames
            .iter()
            .filter(|f| f.line.request_id == rid)
            .collect()
    }

    /// The first entity of `kind` in the snapshot request `rid` was answered with.
    pub fn snapshot_entity(&self, rid: &str, kind: &str) -> serde_json::Value {
        let snapshot = self
            .frames
            .iter()
            .find(|f| f.line.request_id == rid && f.json.get("snapshot").is_some())
            .expect("the snapshot");
        let entities = snapshot.json["snapshot"]["entities"].as_array().unwrap();
        (entities.iter())
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} entity in the snapshot"))
            .clone()
    }

    fn texts(&self) -> Vec<&str> {
        self.frames.iter().map(|f| f.text.as_str()).collect()
    }
}

impl Drop for RpcClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The request-scoped invariants of a stdin-RPC stream: hello first and once, and for every
/// request id exactly one done, which is the last frame stamped with that id.
pub fn assert_request_scoped(frames: &[FrameLine]) {
    use reel_proto::rpc::rpc_line::Frame;
    assert!(
        matches!(frames.first().map(FrameLine::frame), Some(Frame::Hello(_))),
        "hello first"
    );
    assert_eq!(
        frames
            .iter()
            .filter(|f| matches!(f.frame(), Frame::Hello(_)))
            .count(),
        1
    );
    let mut ids: Vec<&str> = frames
        .iter()
        .map(|f| f.line.request_id.as_str())
        .filter(|id| !id.is_empty())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let scoped: Vec<&FrameLine> = frames.iter().filter(|f| f.line.request_id == id).collect();
        let dones = scoped.iter().filter(|f| f.done_status().is_some()).count();
        assert_eq!(dones, 1, "request {id} has exactly one done");
        assert!(
            scoped.last().unwrap().done_status().is_some(),
            "done is the last frame of request {id}"
        );
    }
}
