//! `reel export --format turns`: the model context the session's next run would start from, as
//! a JSON list of messages in the OpenAI chat format, led by the newest run's system prompt.
//!
//! The sink folds committed events through the engine's model-context projection (the same
//! fold a live session makes) and writes the document when the stream ends.

use std::io::{self, BufWriter, Write};

use reel_engine::{
    Acks, ModelContextProjection, OutputBatch, OutputKind, Projection, Reads, Sink, SinkError,
};
use reel_proto::Any;
use reel_providers::openai_messages;
use tokio::sync::mpsc;

use crate::blocking::write_blocking;

/// Writes the session's model context as one JSON document at the end.
pub struct TurnsDocumentSink<W> {
    writer: W,
}

impl<W: Write + Send + 'static> TurnsDocumentSink<W> {
    pub fn new(writer: W) -> Self {
        Self { writer }
    }

    fn write_all(self, mut input: mpsc::Receiver<OutputBatch>) -> io::Result<()> {
        let mut context = ModelContextProjection::new();
        // The system prompt is not part of the conversation: the newest run's is used.
        let mut system_prompt = String::new();
        while let Some(batch) = input.blocking_recv() {
            for output in batch.iter() {
                if let OutputKind::Event(committed) = &output.kind {
                    context.apply(&committed.entry);
                    if let Any::ChatRunStarted(run) = &committed.entry.event {
                        system_prompt.clone_from(&run.system_prompt);
                    }
                }
            }
        }
        let system = Some(system_prompt.as_str()).filter(|s| !s.is_empty());
        let messages = openai_messages(system, context.messages());
        let mut out = BufWriter::new(self.writer);
        serde_json::to_writer_pretty(&mut out, &messages)?;
        writeln!(out)?;
        out.flush()
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for TurnsDocumentSink<W> {
    fn name(&self) -> String {
        "turns-document".into()
    }

    /// The model context is a fold of the log's events alone.
    fn reads(&self) -> Reads {
        Reads::LogOnly
    }

    async fn run(
        self: Box<Self>,
        input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let this = *self;
        write_blocking(move || this.write_all(input)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    #[tokio::test]
    async fn the_system_prompt_then_the_conversation() {
        let out = SharedWriter::default();
        assert!(
            run_sink(TurnsDocumentSink::new(out.clone()))
                .await
                .is_empty()
        );
        let messages: serde_json::Value = serde_json::from_str(&out.text()).unwrap();
        let roles: Vec<&str> = messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant"], "{messages}");
        assert_eq!(messages[0]["content"], "Be brief.");
        assert_eq!(messages[2]["content"], "Hello");
    }
}
