//! `--output event-counts`: how many events of each kind a run appended, printed when the stream
//! ends, one `name count` line each, most frequent first. A quick look at what a run did (how
//! many deltas a reply took, how many tool calls), and the manual's example of a whole sink (docs/sinks-and-traces.md).

use std::{collections::HashMap, io::Write};

use reel_engine::{Acks, OutputBatch, OutputKind, Sink, SinkError};
use tokio::sync::mpsc;

/// Counts committed events by name and prints the counts at the end.
pub struct EventCountSink<W> {
    writer: W,
}

impl<W: Write + Send + 'static> EventCountSink<W> {
    pub fn new(writer: W) -> Self {
        Self { writer }
    }
}

#[async_trait::async_trait]
impl<W: Write + Send + 'static> Sink for EventCountSink<W> {
    fn name(&self) -> String {
        "event-counts".into()
    }

    async fn run(
        mut self: Box<Self>,
        mut input: mpsc::Receiver<OutputBatch>,
        _acks: Acks,
    ) -> Result<(), SinkError> {
        let mut counts: HashMap<String, u64> = HashMap::new();
        while let Some(batch) = input.recv().await {
            for output in batch.iter() {
                if let OutputKind::Event(committed) = &output.kind {
                    *counts.entry(committed.entry.name().to_owned()).or_default() += 1;
                }
            }
        }
        // A few lines, once, at the end: written inline. (A sink that writes as events come
        // writes on a blocking thread, as `JsonlFrameSink` does.)
        let mut counts: Vec<_> = counts.into_iter().collect();
        counts.sort_by(|(a, m), (b, n)| n.cmp(m).then_with(|| a.cmp(b)));
        for (name, count) in counts {
            writeln!(self.writer, "{name} {count}")?;
        }
        self.writer.flush().map_err(SinkError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SharedWriter, run_sink};

    #[tokio::test]
    async fn counts_events_by_name_most_frequent_first() {
        let out = SharedWriter::default();
        assert!(run_sink(EventCountSink::new(out.clone())).await.is_empty());
        assert_eq!(
            out.text(),
            "ChatTextDelta 2\nChatRunFinished 1\nChatRunStarted 1\n\
             ChatTextSegmentStarted 1\nChatUserMessageAccepted 1\n"
        );
    }
}
