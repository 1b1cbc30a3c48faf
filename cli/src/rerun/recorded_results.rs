//! `--tools recorded`: every tool call of a re-run is answered with the recorded result of the
//! call with its id, and nothing runs.

use std::collections::HashMap;

use futures::{FutureExt, future::BoxFuture};
use reel_engine::{LogEntry, ToolCallContext, ToolOutput, ToolService};
use reel_proto::Any;

/// The recorded results of a turn's tool calls, by call id.
#[derive(Debug)]
pub struct RecordedResults(HashMap<String, ToolOutput>);

impl RecordedResults {
    /// The results among a turn's events.
    pub fn of(events: &[LogEntry]) -> Self {
        let results = events
            .iter()
            .filter_map(|entry| match &entry.event {
                Any::ChatToolResultReady(result) => Some((
                    result.tool_call_id.clone(),
                    ToolOutput {
                        result: result.result.clone(),
                        is_error: result.is_error,
                    },
                )),
                _ => None,
            })
            .collect();
        Self(results)
    }
}

impl ToolService for RecordedResults {
    fn call<'a>(
        &'a self,
        _arguments: &'a str,
        context: &'a ToolCallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        let output = self
            .0
            .get(&context.tool_call_id)
            .cloned()
            .unwrap_or_else(|| {
                ToolOutput::error(format!(
                    "the recording has no result for call {}",
                    context.tool_call_id
                ))
            });
        futures::future::ready(output).boxed()
    }
}
