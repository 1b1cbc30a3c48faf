//! One tool of an MCP server, as the engine calls it: `tools/call` with the model's arguments,
//! the result's text (and structured content) as the model reads it.

use std::sync::Arc;

use futures::future::BoxFuture;
use reel_engine::{ToolCallContext, ToolOutput, ToolService};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, RequestMetaObject};

use crate::servers::Connection;

/// A tool of a connected MCP server.
pub struct McpTool {
    connection: Arc<Connection>,
    server: String,
    /// Its name on the server.
    name: String,
}

impl McpTool {
    pub(crate) fn new(connection: Arc<Connection>, server: &str, name: &str) -> Self {
        Self {
            connection,
            server: server.to_owned(),
            name: name.to_owned(),
        }
    }

    async fn run(&self, arguments: &str, context: &ToolCallContext) -> ToolOutput {
        let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(object)) => Some(object),
            Ok(serde_json::Value::Null) => None,
            Ok(_) | Err(_) => {
                return ToolOutput::error(format!(
                    "the arguments of {} must be a JSON object",
                    self.name
                ));
            }
        };
        let mut params = CallToolRequestParams::new(self.name.clone());
        params.arguments = arguments;
        params.meta = Some(call_meta(context));
        // Dropping this future (the run was stopped) cancels the request on the server.
        match self.connection.call_tool(params).await {
            Ok(result) => output_of(result),
            Err(error) => ToolOutput::error(format!(
                "MCP server {} failed to run {}: {error}",
                self.server, self.name
            )),
        }
    }
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "McpTool({}__{})", self.server, self.name)
    }
}

impl ToolService for McpTool {
    fn call<'a>(
        &'a self,
        arguments: &'a str,
        context: &'a ToolCallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.run(arguments, context))
    }
}

/// The request's `_meta`: which call it is, and the key a server keys a side effect on (the
/// same when the call is run again).
fn call_meta(context: &ToolCallContext) -> RequestMetaObject {
    let mut meta = serde_json::Map::new();
    for (key, value) in [
        ("reel/idempotencyKey", &context.idempotency_key),
        ("reel/sessionId", &context.session_id),
        ("reel/runId", &context.run_id),
        ("reel/toolCallId", &context.tool_call_id),
    ] {
        meta.insert(key.to_owned(), serde_json::Value::String(value.clone()));
    }
    RequestMetaObject::from(meta)
}

/// What the model reads of a result: its text blocks, one per line, and its structured
/// content as JSON when it has some the text does not already say; other blocks are named.
fn output_of(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
            ContentBlock::Resource(_) => "[an embedded resource]".to_owned(),
            ContentBlock::ResourceLink(link) => format!("[a resource: {}]", link.uri),
            _ => "[content reel does not read]".to_owned(),
        })
        .collect();
    if let Some(structured) = &result.structured_content {
        let json = structured.to_string();
        if !parts.iter().any(|part| part.trim() == json) {
            parts.push(json);
        }
    }
    let text = parts.join("\n");
    match result.is_error {
        Some(true) => ToolOutput::error(text),
        _ => ToolOutput::ok(text),
    }
}
