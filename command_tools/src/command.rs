//! Command tools: a subprocess gets the call's arguments as JSON on stdin and answers on stdout.
//!
//! The subprocess runs in its own process group, so that everything it started dies with it:
//! when the call times out, when its output passes the cap, and when the run is cancelled (the
//! future is dropped, and a drop guard kills the group). Started through the tool guard
//! ([`crate::run_tool_guard`]), the group also dies when reel itself is killed. The tool sees only the
//! environment variables it is allowed ([`CommandTool::env`]), never the others' secrets.
//! Exit status 0 is a result; anything else is an error result carrying what the tool printed,
//! so the model can read why.

use std::{ffi::OsString, path::PathBuf, process::Stdio, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use reel_engine::{ToolCallContext, ToolOutput, ToolService};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// A tool run as a local command.
#[derive(Clone, Debug)]
pub struct CommandTool {
    /// The program and its arguments.
    pub argv: Vec<String>,
    pub timeout: Duration,
    /// At most this many bytes of stdout reach the model; a tool that prints more is stopped.
    pub max_output_bytes: usize,
    /// The environment variables the tool gets from reel's environment, by name; every other
    /// variable is left out.
    pub env: Vec<String>,
    /// Where it runs; `None` for reel's own working directory.
    pub working_dir: Option<PathBuf>,
    /// The tool guard's command (program and arguments, the tool's command follows): it kills
    /// the tool's process group when reel dies. `None` starts the tool directly.
    pub guard: Option<Vec<OsString>>,
}

impl CommandTool {
    /// Runs the command with `arguments` on stdin, as the call `context` (see `call_variables`).
    pub async fn run(&self, arguments: &str, context: &ToolCallContext) -> ToolOutput {
        let Some(program) = self.argv.first() else {
            return ToolOutput::error("the tool has an empty command");
        };
        let argv: Vec<OsString> = match &self.guard {
            Some(guard) => guard
                .iter()
                .cloned()
                .chain(self.argv.iter().map(OsString::from))
                .collect(),
            None => self.argv.iter().map(OsString::from).collect(),
        };
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .env_clear();
        for name in &self.env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for (name, value) in call_variables(context) {
            command.env(name, value);
        }
        if let Some(dir) = &self.working_dir {
            command.current_dir(dir);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                return ToolOutput::error(format!(
                    "cannot start the tool command {program:?}: {error}"
                ));
            }
        };
        let group = GroupKill(child.id());
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = self.max_output_bytes;
        let guarded = self.guard.is_some();
        let input = if guarded {
            crate::guard::frame_arguments(arguments)
        } else {
            [arguments.as_bytes(), b"\n"].concat()
        };
        let work = async {
            let feed = async {
                let mut stdin = stdin?;
                // A tool that does not read its input closes the pipe: not an error.
                let _ = stdin.write_all(&input).await;
                // The guard watches this pipe: it stays open while the call runs.
                guarded.then_some(stdin)
            };
            let out = async {
                let out = read_capped(stdout, cap).await;
                if out.1 {
                    group.kill();
                }
                out
            };
            let (watched, (out, overflowed), (err, _)) =
                tokio::join!(feed, out, read_capped(stderr, cap));
            let status = child.wait().await;
            drop(watched);
            (out, overflowed, err, status)
        };
        let outcome = tokio::time::timeout(self.timeout, work).await;
        group.kill();
        let Ok((out, overflowed, err, status)) = outcome else {
            return ToolOutput::error(format!(
                "the tool did not finish within {} ms and was stopped",
                self.timeout.as_millis()
            ));
        };
        let out = String::from_utf8_lossy(&out).into_owned();
        if overflowed {
            return ToolOutput::ok(format!(
                "{out}\n[reel: the tool printed more than {cap} bytes; the rest was cut and the tool stopped]"
            ));
        }
        match status {
            Ok(status) if status.success() => ToolOutput::ok(out),
            Ok(status) => {
                let err = String::from_utf8_lossy(&err);
                let mut message = format!("the tool failed ({status})");
                for part in [out.trim(), err.trim()] {
                    if !part.is_empty() {
                        message.push('\n');
                        message.push_str(part);
                    }
                }
                ToolOutput::error(message)
            }
            Err(error) => ToolOutput::error(format!("cannot wait for the tool: {error}")),
        }
    }
}

/// The variables that tell a command tool which call it runs, set for every call: a tool with a
/// side effect keys it on `REEL_IDEMPOTENCY_KEY`, the same when the call is run again.
fn call_variables(context: &ToolCallContext) -> [(&'static str, &str); 4] {
    [
        ("REEL_SESSION_ID", &context.session_id),
        ("REEL_RUN_ID", &context.run_id),
        ("REEL_TOOL_CALL_ID", &context.tool_call_id),
        ("REEL_IDEMPOTENCY_KEY", &context.idempotency_key),
    ]
}

impl ToolService for CommandTool {
    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolCallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.run(arguments, context))
    }

    /// A tool that names its own working directory keeps it; the others run in `dir`.
    fn in_dir(&self, dir: &std::path::Path) -> Option<Arc<dyn ToolService>> {
        if self.working_dir.is_some() {
            return None;
        }
        let mut moved = self.clone();
        moved.working_dir = Some(dir.to_path_buf());
        Some(Arc::new(moved))
    }
}

/// Reads up to `cap` bytes; the flag says there was more.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize) -> (Vec<u8>, bool) {
    let Some(pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut bytes = Vec::new();
    let mut limited = pipe.take(cap as u64 + 1);
    if limited.read_to_end(&mut bytes).await.is_err() {
        return (bytes, false);
    }
    let overflowed = bytes.len() > cap;
    bytes.truncate(cap);
    (bytes, overflowed)
}

/// Kills the tool's process group: on timeout, on too much output, and when the call is
/// dropped (a cancelled run), so no grandchild outlives it.
struct GroupKill(Option<u32>);

impl GroupKill {
    fn kill(&self) {
        let pid = self
            .0
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            // The group may be gone already; nothing else to do then.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout_ms: u64, cap: usize) -> CommandTool {
        CommandTool {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: cap,
            env: vec!["PATH".into(), "HOME".into()],
            working_dir: None,
            guard: None,
        }
    }

    #[tokio::test]
    async fn the_arguments_arrive_on_stdin_and_stdout_is_the_result() {
        let output = sh("read -r line; printf 'got %s' \"$line\"", 5_000, 1024)
            .run(r#"{"city":"Paris"}"#, &context())
            .await;
        assert_eq!(output, ToolOutput::ok(r#"got {"city":"Paris"}"#));
    }

    #[tokio::test]
    async fn a_failing_tool_is_an_error_result_with_what_it_printed() {
        let output = sh("echo partial; echo broken >&2; exit 3", 5_000, 1024)
            .run("{}", &context())
            .await;
        assert!(output.is_error);
        assert!(
            output.result.contains("exit status: 3"),
            "{}",
            output.result
        );
        assert!(output.result.contains("partial") && output.result.contains("broken"));
    }

    #[tokio::test]
    async fn a_slow_tool_and_its_children_are_stopped_at_the_timeout() {
        let dir = tempfile_dir();
        let marker = dir.join("survived");
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let output = sh(&script, 200, 1024).run("{}", &context()).await;
        assert!(
            output.is_error && output.result.contains("200 ms"),
            "{output:?}"
        );
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(!marker.exists(), "the grandchild was killed with the group");
    }

    #[tokio::test]
    async fn output_past_the_cap_is_cut_and_the_tool_stopped() {
        let output = sh("yes reel", 10_000, 100).run("{}", &context()).await;
        assert!(!output.is_error);
        assert!(output.result.starts_with("reel\nreel\n"));
        assert!(output.result.contains("more than 100 bytes"));
    }

    #[tokio::test]
    async fn a_dropped_call_kills_the_tool() {
        let dir = tempfile_dir();
        let marker = dir.join("survived");
        let script = format!("(sleep 1; touch {}) & wait", marker.display());
        let tool = sh(&script, 10_000, 100);
        let context = context();
        let call = tool.run("{}", &context);
        let _ = tokio::time::timeout(Duration::from_millis(100), call).await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(
            !marker.exists(),
            "cancelling the call killed the tool and its children"
        );
    }

    #[tokio::test]
    async fn only_allowed_variables_pass_and_a_missing_program_is_an_error() {
        let mut tool = sh("printf '%s' \"${HOME:-unset}\"", 5_000, 100);
        tool.env = vec!["PATH".into()];
        assert_eq!(tool.run("{}", &context()).await, ToolOutput::ok("unset"));
        let missing = CommandTool {
            argv: vec!["/nonexistent/tool".into()],
            ..tool
        };
        let output = missing.run("{}", &context()).await;
        assert!(output.is_error && output.result.contains("cannot start"));
    }

    #[tokio::test]
    async fn a_tool_without_a_working_dir_moves_into_the_project_and_one_with_keeps_its_own() {
        let project = tempfile::tempdir().unwrap();
        let tool = sh("pwd", 5_000, 1024);
        let moved = tool.in_dir(project.path()).expect("moved into the project");
        let pwd = moved.call("{}", &context()).await;
        assert_eq!(
            std::path::Path::new(pwd.result.trim())
                .canonicalize()
                .unwrap(),
            project.path().canonicalize().unwrap()
        );
        let pinned = CommandTool {
            working_dir: Some("/".into()),
            ..tool
        };
        assert!(pinned.in_dir(project.path()).is_none());
    }

    fn context() -> ToolCallContext {
        ToolCallContext::new("s1", "r1", "call_1", 9)
    }

    #[tokio::test]
    async fn the_tool_is_told_which_call_it_runs_and_its_idempotency_key() {
        let mut tool = sh(
            "printf '%s|%s|%s|%s' \"$REEL_SESSION_ID\" \"$REEL_RUN_ID\" \"$REEL_TOOL_CALL_ID\" \"$REEL_IDEMPOTENCY_KEY\"",
            5_000,
            1024,
        );
        tool.env = vec!["PATH".into()];
        assert_eq!(
            tool.run("{}", &context()).await,
            ToolOutput::ok("s1|r1|call_1|s1:9")
        );
    }

    fn tempfile_dir() -> PathBuf {
        tempfile::tempdir().unwrap().keep()
    }
}
