//! `--output json` / `--output yaml`: one result document when the run is done.
//!
//! The document is built from what every sink sees: the last snapshot gives the messages, the
//! `ChatProviderCallFinished` events give the usage, error frames give the errors.

use std::io::Write;

use reel_engine::{Acks, OutputBatch, OutputKind, Sink, SinkError};
use reel_proto::{Any, rpc::SnapshotFrame};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

/// The format of the result document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentFormat {
    Json,
    Yaml,
}

/// The final result of a run, as `--output json|yaml` prints it.
#[derive(Debug, Default, Serialize)]
pub struct ResultDocument {
    pub session_id: String,
    pub status: String,
    pub messages: Vec<DocumentMessage>,
    pub usage: DocumentUsage,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct DocumentMessage {
    /// user, assistant, thinking, error, tool_call or tool_result.
    pub role: String,
    pub text: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tool_call_id: String,
}

#[derive(Debug, Default, Serialize)]
pub struct DocumentUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
}

/// Prints a [`ResultDocument`] at `done`.
pub struct ResultDocumentSink<W> {
    writer: W,
    format: DocumentFormat,
}

impl<W: Write + Send + 'static> ResultDocumentSink<W> {
    pub fn new(writer: W, format: DocumentFormat) -> Self {
        Self { writer, format }
    }
}

impl ResultDocument {
    fn messages_from(snapshot: &SnapshotFrame) -> Vec<DocumentMessage> {
        let message = |role: &str, text: &str| DocumentMessage {
            role: role.into(),
            text: text.into(),
            ..Default::default()
        };
        snapshot
            .entities
            .iter()
            .filter_map(|entity| match entity.payload.as_ref()? {
                Any::ChatMessageEntity(m) => Some(message(&m.role, &m.text)),
                Any::ToolCallEntity(c) => Some(DocumentMessage {
                    tool_name: c.tool_name.clone(),
                    tool_call_id: c.tool_call_id.clone(),
                    ..message("tool_call", &c.input)
                }),
                Any::ToolResultEntity(r) => Some(DocumentMessage {
                    tool_name: r.tool_name.clone(),
                    tool_call_id: r.tool_call_id.clone(),
                    ..message("tool_result", &r.result)
                }),
                _ => None,
            })
            .collect()
    }

    fn render(&self, format: DocumentFormat) -> Result<String, SinkError> {
        match format {
            DocumentFormat::Json => serde_json::to_string_pretty(self)
                .map(|s| s + "\n")
                .map_err(|e| SinkError::Encode(e.to_string())),
            DocumentFormat::Yaml => {
                serde_saphyr::to_string(self).map_err(|e| SinkError::Encode(e.to_string()))
            }
        }
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for ResultDocumentSink<W> {
    fn name(&self) -> String {
        "stdout".into()
    }

    async fn run(
        self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let mut document = ResultDocument::default();
        while let Some(batch) = input.recv().await {
            for output in batch.iter() {
                match &output.kind {
                    OutputKind::Snapshot(snapshot) => {
                        document.messages = ResultDocument::messages_from(snapshot)
                    }
                    OutputKind::Event(committed) => {
                        if let Any::ChatProviderCallFinished(call) = &committed.entry.event
                            && let Some(usage) = call.usage
                        {
                            document.usage.input_tokens += u64::from(usage.input_tokens);
                            document.usage.output_tokens += u64::from(usage.output_tokens);
                            document.usage.cached_tokens += u64::from(usage.cached_tokens);
                        }
                    }
                    OutputKind::Error(error) => document
                        .errors
                        .push(format!("{}: {}", error.code, error.message)),
                    OutputKind::Done(done) => {
                        document.session_id = output.session_id.to_string();
                        document.status.clone_from(&done.status);
                        let text = document.render(self.format)?;
                        let mut writer = self.writer;
                        return write_blocking(move || {
                            writer.write_all(text.as_bytes())?;
                            writer.flush()
                        })
                        .await;
                    }
                    OutputKind::Hello(_) => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    #[tokio::test]
    async fn one_document_with_the_conversation() {
        let out = SharedWriter::default();
        let sink = ResultDocumentSink::new(out.clone(), DocumentFormat::Json);
        assert!(run_sink(sink).await.is_empty());
        let document: serde_json::Value = serde_json::from_str(&out.text()).unwrap();
        assert_eq!(document["session_id"], "s1");
        assert_eq!(document["status"], "ok");
        let texts: Vec<&str> = document["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["Say hello", "Hello"]);
    }

    #[tokio::test]
    async fn yaml_says_the_same() {
        let out = SharedWriter::default();
        run_sink(ResultDocumentSink::new(out.clone(), DocumentFormat::Yaml)).await;
        let text = out.text();
        assert!(text.contains("session_id: s1"), "{text}");
        assert!(text.contains("text: Hello"), "{text}");
    }
}
