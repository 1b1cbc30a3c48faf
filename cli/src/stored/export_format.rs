//! The formats a stored session is exported in: `reel export --format` and `reel serve`'s
//! export route.

use reel_sinks::TranscriptFormat;

use crate::outputs::Rendering;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The frame stream a client would have seen: hello, snapshot, ui events, snapshot, done.
    Jsonl,
    /// A readable transcript.
    Markdown,
    /// One self-contained HTML page (no script, nothing loaded from the network).
    Html,
    /// The model context as a JSON list of messages in the OpenAI chat format, led by the
    /// newest run's system prompt.
    Turns,
}

impl Format {
    pub fn rendering(self) -> Rendering {
        match self {
            Format::Jsonl => Rendering::Frames {
                backend_events: false,
            },
            Format::Markdown => Rendering::Transcript(TranscriptFormat::Markdown),
            Format::Html => Rendering::Transcript(TranscriptFormat::Html),
            Format::Turns => Rendering::Turns,
        }
    }
}
