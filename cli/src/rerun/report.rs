//! What a re-run reports: equal, or where it went another way than the recording, as text for
//! a person or one JSON document for programs.

use reel_providers::RequestDivergence;
use serde::Serialize;

use crate::{run_args::ReportFormat, stored::compare::Difference};

/// How a re-run went.
#[derive(Debug, Serialize)]
pub struct Report {
    pub session: String,
    pub rerun: String,
    pub equal: bool,
    /// The turns re-run (up to and with the one that diverged, with the recorded model).
    pub turns: usize,
    /// Model calls answered from the recording without comparing their requests: the log
    /// was written before reel recorded what each call was sent.
    pub requests_not_compared: usize,
    /// With the recorded model, the first divergence (the re-run stopped there); with the live
    /// model, every difference of every turn.
    pub divergences: Vec<Divergence>,
}

/// Where and how the re-run went another way than the recording.
#[derive(Debug, Serialize)]
pub struct Divergence {
    pub turn: usize,
    /// `request`, `prompt`, `text`, `tool call N`, `tool result N`, `status`, `usage`,
    /// `model calls` or `input` (an input of the recording the re-run did not take, or one
    /// it waited for that the recording does not have).
    pub kind: String,
    /// For a request: the part that differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    /// The original's events (the recorded call's start for a request).
    pub original: (u64, u64),
    /// The re-run's events of that turn.
    pub rerun: (u64, u64),
    pub recorded: String,
    pub now: String,
}

impl Divergence {
    /// A model request that differs from the recorded call's (at that call's start).
    pub fn of_request(turn: usize, request: RequestDivergence, rerun: (u64, u64)) -> Self {
        Self {
            turn,
            kind: "request".into(),
            part: Some(request.part.as_str().to_owned()),
            original: (request.ordinal, request.ordinal),
            rerun,
            recorded: request.recorded,
            now: request.now,
        }
    }

    /// A difference the two turns' comparison found.
    pub fn from_difference(
        turn: usize,
        difference: Difference,
        original: (u64, u64),
        rerun: (u64, u64),
    ) -> Self {
        Self {
            turn,
            kind: difference.field,
            part: None,
            original,
            rerun,
            recorded: difference.a,
            now: difference.b,
        }
    }
}

impl Report {
    /// Writes the report on stdout as `format` says.
    pub fn print(&self, format: ReportFormat) -> std::io::Result<()> {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if format == ReportFormat::Json {
            serde_json::to_writer(&mut out, self)?;
            return writeln!(out);
        }
        if self.requests_not_compared > 0 {
            writeln!(
                out,
                "not compared: the requests of {} model calls (the recording predates what reel now records of each call's request)",
                self.requests_not_compared
            )?;
        }
        if self.divergences.is_empty() {
            return writeln!(
                out,
                "equal: {} re-ran {} turns of {} the same way",
                self.rerun, self.turns, self.session
            );
        }
        for divergence in &self.divergences {
            let what = match &divergence.part {
                Some(part) => format!("{} ({part})", divergence.kind),
                None => divergence.kind.clone(),
            };
            writeln!(
                out,
                "diverged at turn {}: {what}\n  original: events {}-{} of {}\n  re-run: events {}-{} of {}\n  recorded: {}\n  now: {}",
                divergence.turn,
                divergence.original.0,
                divergence.original.1,
                self.session,
                divergence.rerun.0,
                divergence.rerun.1,
                self.rerun,
                divergence.recorded,
                divergence.now
            )?;
        }
        Ok(())
    }
}
