//! The one place the CLI turns what the user asked for (`run-command --output`, `export
//! --format`, `show`, `tail`) into a sink. Every command hands outputs, live or read from a
//! stored log, to what [`sink`] builds, so a new sink is one file in `reel-sinks` and one
//! line here.

use std::io::Write;

use reel_engine::Sink;
use reel_sinks::{
    DocumentFormat, EventCountSink, FollowTextSink, JsonlFrameSink, ResultDocumentSink, TextSink,
    Transcript, TranscriptFormat, TranscriptSink, TurnsDocumentSink,
};

use crate::run_args::OutputMode;

/// A way of writing a session.
pub enum Rendering {
    /// Protocol frames, one JSON line each; with the log's own events when asked.
    Frames { backend_events: bool },
    /// The assistant's reply as plain text, streamed.
    Text,
    /// One JSON or YAML result document at the end.
    Document(DocumentFormat),
    /// The session for people: markdown, HTML or terminal text, at the end.
    Transcript(TranscriptFormat),
    /// A followed session for people: `so_far` at hello, then each new event.
    Follow {
        colour: bool,
        so_far: Transcript,
        events_in_log: u64,
    },
    /// The model context as a JSON list of chat messages, at the end.
    Turns,
    /// Events counted by name, at the end.
    EventCounts,
}

impl Rendering {
    /// What `run-command --output MODE` writes on stdout (jsonl also for `--rpc`).
    pub fn for_output(mode: OutputMode, backend_events: bool) -> Self {
        match mode {
            OutputMode::Jsonl => Rendering::Frames { backend_events },
            OutputMode::Text => Rendering::Text,
            OutputMode::Json => Rendering::Document(DocumentFormat::Json),
            OutputMode::Yaml => Rendering::Document(DocumentFormat::Yaml),
            OutputMode::Markdown => Rendering::Transcript(TranscriptFormat::Markdown),
            OutputMode::Html => Rendering::Transcript(TranscriptFormat::Html),
            OutputMode::EventCounts => Rendering::EventCounts,
        }
    }
}

/// The sink that writes `rendering` to `writer`.
pub fn sink<W: Write + Send + 'static>(rendering: Rendering, writer: W) -> Box<dyn Sink> {
    match rendering {
        Rendering::Frames { backend_events } => {
            Box::new(JsonlFrameSink::new("stdout", writer, backend_events))
        }
        Rendering::Text => Box::new(TextSink::new(writer)),
        Rendering::Document(format) => Box::new(ResultDocumentSink::new(writer, format)),
        Rendering::Transcript(format) => Box::new(TranscriptSink::new(writer, format)),
        Rendering::Follow {
            colour,
            so_far,
            events_in_log,
        } => Box::new(FollowTextSink::new(writer, colour, so_far, events_in_log)),
        Rendering::Turns => Box::new(TurnsDocumentSink::new(writer)),
        Rendering::EventCounts => Box::new(EventCountSink::new(writer)),
    }
}

/// Colour when stdout is a terminal and NO_COLOR is not set.
pub fn colour_on_stdout() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}
