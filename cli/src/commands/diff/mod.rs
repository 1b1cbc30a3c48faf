//! `reel diff A B`: two stored sessions compared turn by turn (a turn is a run: its prompt,
//! the model's text, its tool calls and results, how it ended, its usage and cost). Ids and
//! times are not compared, so a session and its re-run or its fork are equal when they said
//! and did the same. Both logs are read page by page, a turn of each at a time.
//!
//! Exit status: 0 when the sessions are equal, 1 when they differ (or on an error).

use std::io::Write;

use reel_engine::error_chain;
use reel_sinks::html_escape;
use serde::Serialize;

use crate::stored::{
    Database,
    compare::{Difference, differences},
    turns::{Turn, TurnReader},
};

#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// The first session.
    pub a: String,
    /// The second session.
    pub b: String,
    /// How the differences are written.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    #[command(flatten)]
    pub database: Database,
}

/// What `reel diff` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// Lines for a person: each differing turn, its fields, words removed as [-..-] and added
    /// as {+..+}.
    Text,
    /// One JSON document for programs.
    Json,
    /// A markdown report.
    Markdown,
    /// One self-contained HTML page (inline CSS, no script, nothing from the network, every
    /// piece of session text escaped).
    Html,
}

/// A turn that differs: where it is in each session, and what differs.
#[derive(Serialize)]
struct TurnDiff {
    turn: usize,
    /// The ordinals of the turn's first and last events in A (absent: A has no such turn).
    a: Option<(u64, u64)>,
    b: Option<(u64, u64)>,
    differences: Vec<Difference>,
}

/// The whole comparison.
#[derive(Serialize)]
struct Report {
    a: String,
    b: String,
    equal: bool,
    turns: usize,
    differing: Vec<TurnDiff>,
}

pub async fn run(args: DiffArgs) -> u8 {
    match diff(&args).await {
        Ok(report) => {
            let written = write(&report, args.format);
            match (written, report.equal) {
                (Err(error), _) => {
                    tracing::error!("cannot write the report: {error}");
                    1
                }
                (Ok(()), true) => 0,
                (Ok(()), false) => 1,
            }
        }
        Err(error) => {
            tracing::error!("{}", error_chain(&*error));
            1
        }
    }
}

async fn diff(args: &DiffArgs) -> anyhow::Result<Report> {
    let mut reader = args.database.open().await?;
    let a = reader.find_session(&args.a).await?;
    let b = reader.find_session(&args.b).await?;
    let store = &mut reader.store;
    let mut left = TurnReader::new(&a.session_id, a.events);
    let mut right = TurnReader::new(&b.session_id, b.events);
    let mut differing = Vec::new();
    let mut turns = 0;
    loop {
        let (one, other) = (left.next(store).await?, right.next(store).await?);
        if one.is_none() && other.is_none() {
            break;
        }
        turns += 1;
        let empty = Turn::default();
        let found = match (&one, &other) {
            (Some(one), Some(other)) => differences(one, other),
            // A turn only one session has differs in everything it has.
            (one, other) => differences(
                one.as_ref().unwrap_or(&empty),
                other.as_ref().unwrap_or(&empty),
            ),
        };
        if !found.is_empty() || one.is_none() || other.is_none() {
            differing.push(TurnDiff {
                turn: turns,
                a: one.map(|t| t.ordinals),
                b: other.map(|t| t.ordinals),
                differences: found,
            });
        }
    }
    Ok(Report {
        a: a.session_id,
        b: b.session_id,
        equal: differing.is_empty(),
        turns,
        differing,
    })
}

fn write(report: &Report, format: DiffFormat) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match format {
        DiffFormat::Json => {
            serde_json::to_writer(&mut out, report)?;
            writeln!(out)
        }
        DiffFormat::Text => write_text(&mut out, report),
        DiffFormat::Markdown => write_markdown(&mut out, report),
        DiffFormat::Html => write_html(&mut out, report),
    }
}

/// The page's style: removed words struck through on red, added ones on green.
const STYLE: &str = "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.3rem .5rem;vertical-align:top;white-space:pre-wrap}\
del{background:#fdd}ins{background:#dfd;text-decoration:none}";

fn write_html(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    let (a, b) = (html_escape(&report.a), html_escape(&report.b));
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{a} and {b}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{a} and {b}</h1>"
    )?;
    for turn in &report.differing {
        writeln!(out, "<h2>Turn {} ({})</h2>", turn.turn, places(turn))?;
        writeln!(
            out,
            "<table>\n<tr><th>field</th><th>{a}</th><th>{b}</th></tr>"
        )?;
        for difference in &turn.differences {
            let field = html_escape(&difference.field);
            if difference.words.is_empty() {
                writeln!(
                    out,
                    "<tr><td>{field}</td><td>{}</td><td>{}</td></tr>",
                    html_escape(&difference.a),
                    html_escape(&difference.b)
                )?;
            } else {
                let marked: String = difference
                    .words
                    .iter()
                    .map(|run| match run.op {
                        "removed" => format!("<del>{}</del>", html_escape(&run.text)),
                        "added" => format!("<ins>{}</ins>", html_escape(&run.text)),
                        _ => html_escape(&run.text),
                    })
                    .collect();
                writeln!(
                    out,
                    "<tr><td>{field}</td><td colspan=\"2\">{marked}</td></tr>"
                )?;
            }
        }
        writeln!(out, "</table>")?;
    }
    let mut summary_line = Vec::new();
    summary(&mut summary_line, report)?;
    writeln!(
        out,
        "<p>{}</p>\n</body>\n</html>",
        html_escape(String::from_utf8_lossy(&summary_line).trim())
    )
}

fn write_text(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for turn in &report.differing {
        writeln!(out, "turn {} ({}):", turn.turn, places(turn))?;
        for difference in &turn.differences {
            if difference.words.is_empty() {
                writeln!(
                    out,
                    "  {}: {} -> {}",
                    difference.field, difference.a, difference.b
                )?;
            } else {
                writeln!(out, "  {}: {}", difference.field, marked(difference))?;
            }
        }
    }
    summary(out, report)
}

fn write_markdown(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    writeln!(out, "# `{}` and `{}`\n", report.a, report.b)?;
    for turn in &report.differing {
        writeln!(out, "## Turn {} ({})\n", turn.turn, places(turn))?;
        writeln!(
            out,
            "| field | {} | {} |\n|---|---|---|",
            report.a, report.b
        )?;
        for difference in &turn.differences {
            writeln!(
                out,
                "| {} | {} | {} |",
                difference.field,
                cell(&difference.a),
                cell(&difference.b)
            )?;
        }
        writeln!(out)?;
    }
    summary(out, report)
}

/// Where a differing turn is in each session.
fn places(turn: &TurnDiff) -> String {
    let place = |name: &str, at: Option<(u64, u64)>| match at {
        Some((first, last)) => format!("{name} events {first}-{last}"),
        None => format!("not in {name}"),
    };
    format!("{}, {}", place("A", turn.a), place("B", turn.b))
}

/// A text difference with its removed words as `[-..-]` and its added ones as `{+..+}`.
fn marked(difference: &Difference) -> String {
    difference
        .words
        .iter()
        .map(|run| match run.op {
            "removed" => format!("[-{}-]", run.text),
            "added" => format!("{{+{}+}}", run.text),
            _ => run.text.clone(),
        })
        .collect()
}

/// A value in a markdown table cell: one line, its pipes escaped.
fn cell(value: &str) -> String {
    value.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn summary(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    match report.equal {
        true => writeln!(out, "equal: {} turns", report.turns),
        false => writeln!(
            out,
            "different: {} of {} turns differ",
            report.differing.len(),
            report.turns
        ),
    }
}
