//! Tools a model may call, and how reel runs them.
//!
//! A [`Toolbox`] holds the declared tools: what the model is told about each (a
//! [`ToolDefinition`]: name, description, JSON Schema of the arguments) and who executes it (a
//! [`ToolExecutor`]): a [`ToolService`] (a local command of the `reel-command-tools` crate, a
//! tool of an MCP server) or the stdin-RPC client ([`ToolExecutor::Client`]). The engine spawns
//! no process and opens no connection itself: the services do. The run loop asks the toolbox for an execution per tool call and
//! records the outcome on the log; the toolbox itself knows nothing of the log.

mod approval;

use std::time::Duration;

use futures::future::BoxFuture;

pub use approval::{AllowedAlways, Approval, ApprovalRequest, Approver};

/// How many model calls one run may make before reel stops answering tool calls.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;

/// Whether a model call must call a tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call one of the tools.
    Required,
}

/// What a model is told about a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Which call a tool is running, for a tool whose side effect must happen once: the same on
/// every attempt of the call, in every process that runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallContext {
    pub session_id: String,
    pub run_id: String,
    /// The call's id as the model named it (the frames' `toolCallId`).
    pub tool_call_id: String,
    /// `SESSION_ID:ORDINAL`, the ordinal of the call's `ChatToolCallRequested`: unique in the
    /// session and the same when the call is run again.
    pub idempotency_key: String,
}

impl ToolCallContext {
    /// The context of the call requested at `requested_ordinal` of session `session_id`.
    pub fn new(session_id: &str, run_id: &str, tool_call_id: &str, requested_ordinal: u64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            run_id: run_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            idempotency_key: format!("{session_id}:{requested_ordinal}"),
        }
    }
}

/// Who runs a tool outside the engine: a local command (the `reel-command-tools` crate), a
/// tool of an MCP server (the `reel-mcp` crate).
pub trait ToolService: Send + Sync + std::fmt::Debug {
    /// Runs the call `context` with `arguments` (JSON text). Dropping the future cancels it.
    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolCallContext,
    ) -> BoxFuture<'a, ToolOutput>;

    /// The same tool running in `dir` (an editor's project), for a service that runs in a
    /// working directory and was given none; `None` keeps this one as it is.
    fn in_dir(&self, _dir: &std::path::Path) -> Option<std::sync::Arc<dyn ToolService>> {
        None
    }
}

/// Who runs a tool.
#[derive(Clone, Debug)]
pub enum ToolExecutor {
    /// A service outside the engine: a local command, a tool of an MCP server.
    Service(std::sync::Arc<dyn ToolService>),
    /// The stdin-RPC client: reel announces the call and waits up to `timeout` for a
    /// `tool_result` request.
    Client { timeout: Duration },
}

/// A declared tool.
#[derive(Clone, Debug)]
pub struct Tool {
    pub definition: ToolDefinition,
    pub executor: ToolExecutor,
    /// Whether a person decides each call first.
    pub approval: Approval,
    /// How long a call waits for a person's decision before it is decided `expired` (and not
    /// run); `None` waits as long as it takes.
    pub approval_timeout: Option<Duration>,
    /// What becomes of a call that started and whose process ended before it finished.
    pub on_interrupted: OnInterrupted,
}

/// What becomes of a call that started and whose process ended before it finished (its
/// side effect may or may not have happened), when the session is opened again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInterrupted {
    /// It is recorded interrupted, and the model reads that.
    #[default]
    Fail,
    /// It runs again with the same idempotency key (for a tool declared `idempotent`).
    Retry,
    /// A person decides whether it runs again: a durable approval.
    Ask,
}

/// What a tool call returned, as the model will read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    pub result: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(result: impl Into<String>) -> Self {
        Self {
            result: result.into(),
            is_error: false,
        }
    }

    pub fn error(result: impl Into<String>) -> Self {
        Self {
            result: result.into(),
            is_error: true,
        }
    }
}

/// Why a set of tools cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolboxError {
    #[error(
        "tool name {0:?} must be 1 to 64 ASCII letters, digits, '_' or '-' (what model APIs accept)"
    )]
    BadName(String),
    #[error("tool {0:?} is declared twice")]
    Duplicate(String),
    #[error("tool {0:?}: parameters must be a JSON Schema object")]
    BadParameters(String),
    #[error("max iterations must be at least 1")]
    NoIterations,
}

/// The tools of a session and the limit on model calls per run.
#[derive(Clone, Debug)]
pub struct Toolbox {
    tools: Vec<Tool>,
    max_iterations: u32,
    /// The choice for the first model call of each run; later calls are `Auto`, or the loop
    /// would never end.
    first_call: ToolChoice,
}

/// A toolbox without tools: tool calls get an error result.
pub static NO_TOOLS: Toolbox = Toolbox {
    tools: Vec::new(),
    max_iterations: DEFAULT_MAX_ITERATIONS,
    first_call: ToolChoice::Auto,
};

/// How a tool call will be answered.
pub enum Execution<'a> {
    /// Already known (an unknown tool, arguments that are not JSON, ...).
    Ready(ToolOutput),
    /// Running; the future resolves with the output. Dropping it kills the work.
    Running(BoxFuture<'a, ToolOutput>),
    /// The client runs it; wait at most this long for its answer.
    Client(Duration),
}

impl Toolbox {
    pub fn new(tools: Vec<Tool>, max_iterations: u32) -> Result<Self, ToolboxError> {
        if max_iterations == 0 {
            return Err(ToolboxError::NoIterations);
        }
        let mut seen = std::collections::HashSet::new();
        for tool in &tools {
            let name = &tool.definition.name;
            let valid = (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(ToolboxError::BadName(name.clone()));
            }
            if !seen.insert(name.as_str()) {
                return Err(ToolboxError::Duplicate(name.clone()));
            }
            if !tool.definition.parameters.is_object() {
                return Err(ToolboxError::BadParameters(name.clone()));
            }
        }
        Ok(Self {
            tools,
            max_iterations,
            first_call: ToolChoice::Auto,
        })
    }

    /// The toolbox with `choice` for the first model call of each run.
    pub fn with_first_call(mut self, choice: ToolChoice) -> Self {
        self.first_call = choice;
        self
    }

    /// The tool choice for a run's model call number `call` (1 for the first).
    pub fn choice_for_call(&self, call: u32) -> ToolChoice {
        if call == 1 && !self.tools.is_empty() {
            self.first_call
        } else {
            ToolChoice::Auto
        }
    }

    /// What the model is told about the tools.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.iter().map(|t| t.definition.clone()).collect()
    }

    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The toolbox with `more` tools besides its own (a session's MCP servers'), checked as
    /// [`Toolbox::new`] checks them.
    pub fn with_tools(self, more: Vec<Tool>) -> Result<Self, ToolboxError> {
        let mut tools = self.tools;
        tools.extend(more);
        Ok(Self::new(tools, self.max_iterations)?.with_first_call(self.first_call))
    }

    /// The same tools, offered to the model as they are, every call answered by `service`
    /// instead (a re-run that answers with the recorded results). Nobody is asked first.
    pub fn answered_by(&self, service: std::sync::Arc<dyn ToolService>) -> Self {
        let tools = self
            .tools
            .iter()
            .map(|tool| Tool {
                definition: tool.definition.clone(),
                executor: ToolExecutor::Service(std::sync::Arc::clone(&service)),
                approval: Approval::Never,
                approval_timeout: None,
                on_interrupted: OnInterrupted::Fail,
            })
            .collect();
        Self {
            tools,
            ..self.clone()
        }
    }

    /// What becomes of an interrupted call of `name` (see [`Tool::on_interrupted`]); an unknown
    /// tool's call fails.
    pub fn on_interrupted(&self, name: &str) -> OnInterrupted {
        self.tools
            .iter()
            .find(|t| t.definition.name == name)
            .map_or(OnInterrupted::Fail, |t| t.on_interrupted)
    }

    /// How long a call of `name` may wait for a decision (see [`Tool::approval_timeout`]).
    pub fn approval_timeout(&self, name: &str) -> Option<Duration> {
        let tool = self.tools.iter().find(|t| t.definition.name == name)?;
        tool.approval_timeout
    }

    /// Whether a call of `name` waits for a person's decision first.
    pub fn asks_approval(&self, name: &str) -> bool {
        self.tools
            .iter()
            .any(|t| t.definition.name == name && t.approval == Approval::Ask)
    }

    /// The toolbox with its command tools that name no working directory running in `dir`
    /// (an editor's project, for a session it opened).
    pub fn in_dir(mut self, dir: &std::path::Path) -> Self {
        for tool in &mut self.tools {
            if let ToolExecutor::Service(service) = &mut tool.executor
                && let Some(moved) = service.in_dir(dir)
            {
                *service = moved;
            }
        }
        self
    }

    /// How the call of `name` with `arguments` (JSON text) is answered; `has_client` says
    /// whether a stdin-RPC client is there to run client tools; `context` is which call it is.
    pub fn execute(
        &self,
        name: &str,
        arguments: &str,
        has_client: bool,
        context: ToolCallContext,
    ) -> Execution<'_> {
        let Some(tool) = self.tools.iter().find(|t| t.definition.name == name) else {
            let known: Vec<&str> = self
                .tools
                .iter()
                .map(|t| t.definition.name.as_str())
                .collect();
            let known = if known.is_empty() {
                "this session declares no tools".to_owned()
            } else {
                format!("the tools are: {}", known.join(", "))
            };
            return Execution::Ready(ToolOutput::error(format!(
                "there is no tool named {name:?}; {known}"
            )));
        };
        if let Err(error) = serde_json::from_str::<serde_json::Value>(arguments) {
            return Execution::Ready(ToolOutput::error(format!(
                "the arguments are not valid JSON ({error}); call {name} again with a JSON object"
            )));
        }
        match &tool.executor {
            ToolExecutor::Service(service) => {
                let arguments = arguments.to_owned();
                Execution::Running(Box::pin(
                    async move { service.call(&arguments, &context).await },
                ))
            }
            ToolExecutor::Client { timeout } if has_client => Execution::Client(*timeout),
            ToolExecutor::Client { .. } => Execution::Ready(ToolOutput::error(format!(
                "tool {name} is run by the stdin-RPC client, and this session has none"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        Tool {
            approval: Approval::Never,
            approval_timeout: None,
            on_interrupted: OnInterrupted::Fail,
            definition: ToolDefinition {
                name: name.into(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            },
            executor: ToolExecutor::Client {
                timeout: Duration::from_secs(1),
            },
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(Toolbox::new(vec![tool("get_weather"), tool("a-b")], 3).is_ok());
        assert_eq!(
            Toolbox::new(vec![tool("bad name")], 3).unwrap_err(),
            ToolboxError::BadName("bad name".into())
        );
        assert_eq!(
            Toolbox::new(vec![tool("x"), tool("x")], 3).unwrap_err(),
            ToolboxError::Duplicate("x".into())
        );
        assert_eq!(
            Toolbox::new(vec![], 0).unwrap_err(),
            ToolboxError::NoIterations
        );
    }

    fn context() -> ToolCallContext {
        ToolCallContext::new("s", "r", "c1", 7)
    }

    #[test]
    fn the_idempotency_key_is_the_session_and_the_calls_ordinal() {
        assert_eq!(context().idempotency_key, "s:7");
    }

    #[test]
    fn unknown_tools_bad_arguments_and_missing_clients_are_answered_with_errors() {
        let toolbox = Toolbox::new(vec![tool("ask")], 3).unwrap();
        let error = |e: Execution<'_>| match e {
            Execution::Ready(output) => {
                assert!(output.is_error);
                output.result
            }
            _ => panic!("expected a ready error"),
        };
        assert!(
            error(toolbox.execute("nope", "{}", true, context())).contains("the tools are: ask")
        );
        assert!(
            error(toolbox.execute("ask", "{not json", true, context())).contains("not valid JSON")
        );
        assert!(error(toolbox.execute("ask", "{}", false, context())).contains("has none"));
        assert!(matches!(
            toolbox.execute("ask", "{}", true, context()),
            Execution::Client(_)
        ));
    }
}
