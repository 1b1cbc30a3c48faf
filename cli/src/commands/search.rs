//! `reel search QUERY`: where the stored sessions said something, newest first: messages,
//! reasoning, tool arguments and tool results, each hit with its session, the ordinal that
//! made it (`reel show SESSION --at ORDINAL` opens the spot), its entity, its time and a
//! snippet with the match marked (`[...]`) or, with `--json`, delimited (`matched` pieces).

use std::io::Write;

use anyhow::Context;
use reel_engine::{SearchHit, SearchQuery, SessionCatalog};
use reel_sinks::printable;

use crate::stored::Database;

/// Whose words a hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    User,
    Assistant,
    Reasoning,
    Tool,
}

#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// What to look for: words (every one must be there) or a "quoted phrase". SQLite takes
    /// FTS5 syntax besides (OR, NOT, prefix*), PostgreSQL web-search syntax (or, -word).
    pub query: String,
    /// Only this session.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only what was said at or after this time (2026-11-27 or 2026-11-27T10:00:00Z).
    #[arg(long, value_name = "DATE", value_parser = reel_server::parse_date_ms)]
    pub since: Option<u64>,
    /// Only what was said before this time.
    #[arg(long, value_name = "DATE", value_parser = reel_server::parse_date_ms)]
    pub until: Option<u64>,
    /// Only the words of the user, the assistant, its reasoning, or tools (calls and results).
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Only this tool's calls and results.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Only entities with this status (a tool call's `completed`, a result's `error`, ...).
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    /// The most hits to show.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// One JSON array of hits instead of lines, for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub database: Database,
}

pub async fn run(args: SearchArgs) -> anyhow::Result<()> {
    let query = SearchQuery {
        text: args.query.clone(),
        session: args.session.clone(),
        role: args.role.map(|role| format!("{role:?}").to_lowercase()),
        tool: args.tool.clone(),
        status: args.status.clone(),
        since_ms: args.since,
        until_ms: args.until,
        limit: args.limit,
        before: None,
    };
    let mut reader = args.database.open().await?;
    // A database from before the index is refused by the read-only open, which says that a
    // writing command upgrades it (and builds the index).
    let hits = reader.store.search(&query).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &hits)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        hits.iter().try_for_each(|hit| write_line(&mut out, hit))
    };
    written
        .and_then(|()| out.flush())
        .context("cannot write the hits")
}

/// `SESSION #ORDINAL ROLE (TOOL) TIME  snippet with [match]`.
fn write_line(out: &mut impl Write, hit: &SearchHit) -> std::io::Result<()> {
    let who = if hit.tool_name.is_empty() {
        hit.role.clone()
    } else {
        format!("{} ({})", hit.role, printable(&hit.tool_name))
    };
    let snippet: String = hit
        .snippet
        .iter()
        .map(|part| {
            let text = printable(&part.text.replace(['\n', '\r'], " "));
            if part.matched {
                format!("[{text}]")
            } else {
                text
            }
        })
        .collect();
    let snippet = snippet.trim();
    writeln!(
        out,
        "{} #{} {who} {}  {snippet}",
        printable(&hit.session_id),
        hit.ordinal,
        timestamp(hit.at_ms)
    )
}

/// Milliseconds since the epoch as `2026-11-25T10:00:00Z`.
fn timestamp(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}
