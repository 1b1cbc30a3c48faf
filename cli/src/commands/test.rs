//! `reel test`: recorded sessions as a regression suite. Each session is re-run against its
//! recording (`reel rerun --tools run`, one child process each, so one session's failure
//! cannot touch another's), a line per session says whether it went the same way (the
//! divergence in one line when not), a summary follows, and `--junit FILE` writes the JUnit XML
//! every CI system reads. A passing re-run's session is removed again; a diverging one is kept,
//! for `reel diff`.
//!
//! Exit status: 0 when every session re-ran the same way, 1 otherwise.

use std::{ffi::OsString, path::PathBuf, process::Command};

use anyhow::Context;
use reel_engine::{LogPages, SessionCatalog, error_chain};
use reel_proto::Any;
// HTML's escaping is XML's too, and it shows control characters (which XML 1.0 cannot hold)
// as \u{..}.
use reel_sinks::html_escape;
use serde_json::Value;

use crate::stored::Database;

#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// The sessions to re-run.
    #[arg(value_name = "SESSION", required_unless_present = "all")]
    pub sessions: Vec<String>,
    /// Every session of the database (but the re-runs themselves).
    #[arg(long, conflicts_with = "sessions")]
    pub all: bool,
    /// The command file to re-run them with.
    #[arg(long, value_name = "FILE")]
    pub command: PathBuf,
    /// Write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    #[command(flatten)]
    pub database: Database,
}

/// One session's result.
struct Outcome {
    session: String,
    /// The divergence in one line, or the error; `None` when it went the same way.
    failure: Option<String>,
}

pub async fn run(args: TestArgs) -> u8 {
    match test(&args).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(error) => {
            tracing::error!("{}", error_chain(&*error));
            1
        }
    }
}

async fn test(args: &TestArgs) -> anyhow::Result<bool> {
    let sessions = match args.all {
        true => recorded_sessions(&args.database).await?,
        false => args.sessions.clone(),
    };
    let mut outcomes = Vec::new();
    for session in sessions {
        let outcome = rerun(args, &session)?;
        match &outcome.failure {
            None => println!("PASS {}", outcome.session),
            Some(why) => println!("FAIL {}: {why}", outcome.session),
        }
        outcomes.push(outcome);
    }
    let failed = outcomes.iter().filter(|o| o.failure.is_some()).count();
    println!(
        "{} sessions: {} passed, {failed} failed",
        outcomes.len(),
        outcomes.len() - failed
    );
    if let Some(path) = &args.junit {
        std::fs::write(path, junit(&outcomes))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(failed == 0)
}

/// Every session of the database that is not itself a re-run.
async fn recorded_sessions(database: &Database) -> anyhow::Result<Vec<String>> {
    let mut reader = database.open().await?;
    let mut sessions = Vec::new();
    for summary in reader.store.sessions().await? {
        let first = LogPages::new(&summary.session_id, 0, 1)
            .next(&mut reader.store)
            .await?;
        let is_rerun = first
            .first()
            .is_some_and(|entry| matches!(entry.event, Any::ChatSessionRerun(_)));
        if !is_rerun && summary.runs > 0 {
            sessions.push(summary.session_id);
        }
    }
    sessions.sort();
    Ok(sessions)
}

/// Re-runs `session` in a child `reel rerun`, and removes the re-run when it passed.
fn rerun(args: &TestArgs, session: &str) -> anyhow::Result<Outcome> {
    let id = format!("{session}.test-{}", reel_engine::new_id());
    let mut database: Vec<OsString> = Vec::new();
    if let Some(path) = &args.database.timeline_db {
        database.extend(["--timeline-db".into(), path.clone().into_os_string()]);
    }
    if let Some(dsn) = &args.database.timeline_dsn {
        database.extend(["--timeline-dsn".into(), dsn.into()]);
    }
    let reel = std::env::current_exe().context("cannot find reel's own binary")?;
    let output = Command::new(&reel)
        .args([
            "rerun",
            session,
            "--format",
            "json",
            "--session-id",
            &id,
            "--command",
        ])
        .arg(&args.command)
        .args(&database)
        .output()
        .context("cannot start reel rerun")?;
    let report: Option<Value> = serde_json::from_slice(&output.stdout).ok();
    let failure = match (output.status.code(), &report) {
        (Some(0), Some(_)) => None,
        (Some(3), Some(report)) => Some(divergence_line(report)),
        _ => Some(format!(
            "the re-run failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    };
    if failure.is_none() {
        let removed = Command::new(&reel)
            .args(["rm", &id])
            .args(&database)
            .output()
            .context("cannot start reel rm")?;
        if !removed.status.success() {
            tracing::warn!("could not remove the re-run {id}");
        }
    }
    Ok(Outcome {
        session: session.to_owned(),
        failure,
    })
}

/// A divergence of a re-run's JSON report in one line.
fn divergence_line(report: &Value) -> String {
    let divergence = &report["divergences"][0];
    let what = match divergence["part"].as_str() {
        Some(part) => format!(
            "{} ({part})",
            divergence["kind"].as_str().unwrap_or_default()
        ),
        None => divergence["kind"].as_str().unwrap_or_default().to_owned(),
    };
    let one_line = |value: &Value| value.as_str().unwrap_or_default().replace('\n', "\\n");
    format!(
        "turn {}: {what}: recorded {:?}, now {:?} (re-run kept as {})",
        divergence["turn"],
        one_line(&divergence["recorded"]),
        one_line(&divergence["now"]),
        report["rerun"].as_str().unwrap_or_default()
    )
}

/// The outcomes as JUnit XML: one test suite, a test case per session.
fn junit(outcomes: &[Outcome]) -> String {
    let failed = outcomes.iter().filter(|o| o.failure.is_some()).count();
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"reel test\" tests=\"{}\" failures=\"{failed}\">\n",
        outcomes.len()
    );
    for outcome in outcomes {
        let name = html_escape(&outcome.session);
        match &outcome.failure {
            None => xml.push_str(&format!(
                "    <testcase classname=\"reel.rerun\" name=\"{name}\"/>\n"
            )),
            Some(why) => xml.push_str(&format!(
                "    <testcase classname=\"reel.rerun\" name=\"{name}\">\n      <failure message=\"{}\"/>\n    </testcase>\n",
                html_escape(why)
            )),
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_escapes_what_a_session_said() {
        let outcomes = [
            Outcome {
                session: "a<b".into(),
                failure: None,
            },
            Outcome {
                session: "c".into(),
                failure: Some("recorded \"x & y\"\u{1b}[31m".into()),
            },
        ];
        let xml = junit(&outcomes);
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
        assert!(xml.contains("name=\"a&lt;b\""), "{xml}");
        assert!(
            xml.contains("message=\"recorded &quot;x &amp; y&quot;\\u{1b}[31m\""),
            "{xml}"
        );
    }
}
