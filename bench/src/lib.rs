//! `reel bench`: measured figures for the paths that matter, printed as tables.
//!
//! * streaming: one long scripted reply through log, projections and the JSONL sink;
//! * stdin RPC: one `reel --stdin-rpc` process driven over real pipes: sequential submits,
//!   memory per request, and the time from a cancel line to the cancelled submit's done.
//! * turns: one long stdin-RPC session with a timeline database, CPU and memory per tenth.
//! * reply memory: what one long reply leaves in a stdin-RPC process with a timeline database.
//! * memory at start: `reel --version` and a one-prompt run, each its own process;
//! * providers, the durable path, and exports and listing (see each module).
//! * `--serve`: only `reel serve` with many sessions and subscribers (see [`serve`]).
//! * `--waiting N`: only `reel serve` with N sessions waiting for a person's decision.

mod cpu_time;
mod durable;
mod export;
mod jetstream;
mod provider;
mod reply_memory;
mod search;
mod search_write_cost;
mod serve;
mod start;
mod stdin_rpc;
mod stream;
mod turns;

use reel_engine::error_chain;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Text deltas in the long streamed reply; the short reply has a tenth of them.
    #[arg(long, default_value_t = 100_000)]
    pub deltas: usize,
    /// Sequential submits sent to one stdin-RPC process.
    #[arg(long, default_value_t = 10_000)]
    pub submits: usize,
    /// Turns of the long-session benchmark (one stdin-RPC session with a timeline database:
    /// CPU and memory per tenth of the session); 0 leaves it out.
    #[arg(long, default_value_t = 20_000)]
    pub turns: usize,
    /// Cancels timed while a reply streams (each kind).
    #[arg(long, default_value_t = 20)]
    pub cancels: usize,
    /// Text deltas in the long reply stored in the timeline database.
    #[arg(long, default_value_t = 100_000)]
    pub durable_deltas: usize,
    /// Text deltas in one reply streamed by a stdin-RPC process with a timeline database, for
    /// the resident memory it leaves behind; 0 leaves it out.
    #[arg(long, default_value_t = 1_000_000)]
    pub reply_deltas: usize,
    /// Events in the larger session that is resumed.
    #[arg(long, default_value_t = 1_000_000)]
    pub resume_events: usize,
    /// Deltas streamed by a local OpenAI-compatible server, then by an Anthropic one.
    #[arg(long, default_value_t = 10_000)]
    pub provider_deltas: usize,
    /// Events in the longer session exported (the shorter one has a tenth).
    #[arg(long, default_value_t = 1_000_000)]
    pub export_events: usize,
    /// Sessions in the database `reel sessions` lists.
    #[arg(long, default_value_t = 10_000)]
    pub list_sessions: usize,
    /// Messages stored for the full-text search benchmark (queries p50/p99, and what the
    /// index costs the writes); 0 leaves it out.
    #[arg(long, default_value_t = 1_000_000)]
    pub search_messages: usize,
    /// Also measure this PostgreSQL server, e.g. postgres://postgres@127.0.0.1:5432/test.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Also measure the JetStream sink on this NATS server, beside the SQLite sink, e.g.
    /// nats://127.0.0.1:4222 (a stream of the bench's own, deleted at the end).
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// Measure `reel serve` only: many sessions, two event-stream subscribers each.
    #[arg(long)]
    pub serve: bool,
    /// With --serve: the sessions the server hosts.
    #[arg(long, default_value_t = 1_000, requires = "serve")]
    pub sessions: usize,
    /// With --serve: the deltas of each session's reply when all reply at once.
    #[arg(long, default_value_t = 1_000, requires = "serve")]
    pub serve_deltas: usize,
    /// With --serve: the submits timed to their first delta while 100 runs stream.
    #[arg(long, default_value_t = 200, requires = "serve")]
    pub probes: usize,
    /// Measure only `reel serve` with this many sessions each waiting for a person's decision:
    /// memory once they are evicted, and approve to tool start (e.g. 10000).
    #[arg(long, value_name = "SESSIONS", conflicts_with = "serve")]
    pub waiting: Option<usize>,
    /// With --waiting: the approves timed, one at a time, each to an evicted session.
    #[arg(long, default_value_t = 200, requires = "waiting")]
    pub waiting_probes: usize,
}

pub async fn run(args: BenchArgs) -> u8 {
    if let Some(sessions) = args.waiting {
        return match serve::run_waiting(sessions.max(1), args.waiting_probes).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(error) => {
                eprintln!("reel bench --waiting: {}", error_chain(&*error));
                1
            }
        };
    }
    if args.serve {
        let bench = serve::ServeBench {
            sessions: args.sessions,
            deltas: args.serve_deltas.max(1),
            probes: args.probes,
        };
        return match serve::run(bench).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(error) => {
                eprintln!("reel bench --serve: {}", error_chain(&*error));
                1
            }
        };
    }
    // First: the children's peak memory it reads is theirs only before others run.
    let started = blocking_part("memory at start", start::run).await;
    println!();
    // Next, so that their peak memory is their own.
    let mut fetched = 0;
    for api in [provider::Api::OpenAi, provider::Api::Anthropic] {
        if let Err(error) = provider::run(args.provider_deltas.max(1), api).await {
            eprintln!("reel bench: provider {api:?}: {}", error_chain(&*error));
            fetched = 1;
        }
        println!();
    }
    let streamed = stream::run(args.deltas).await;
    println!();
    let served = blocking_part("stdin RPC", move || {
        stdin_rpc::run(args.submits, args.cancels).map(|()| true)
    })
    .await;
    println!();
    let aged = match args.turns {
        0 => 0,
        turns => blocking_part("turns", move || turns::run(turns).map(|()| true)).await,
    };
    if args.turns > 0 {
        println!();
    }
    let held = match args.reply_deltas {
        0 => 0,
        deltas => blocking_part("reply memory", move || reply_memory::run(deltas)).await,
    };
    if args.reply_deltas > 0 {
        println!();
    }
    let stored = match durable::run(
        args.durable_deltas.max(10),
        args.resume_events.max(10),
        args.postgres.clone(),
    )
    .await
    {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(error) => {
            eprintln!("reel bench: durable: {}", error_chain(&*error));
            1
        }
    };
    println!();
    let streamed_out = match &args.nats {
        None => 0,
        Some(server) => {
            let result = jetstream::run(args.durable_deltas.max(10), server).await;
            println!();
            match result {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(error) => {
                    eprintln!("reel bench: JetStream: {}", error_chain(&*error));
                    1
                }
            }
        }
    };
    let searched = match args.search_messages {
        0 => 0,
        messages => match search::run(messages, args.postgres.clone()).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(error) => {
                eprintln!("reel bench: search: {}", error_chain(&*error));
                1
            }
        },
    };
    if args.search_messages > 0 {
        println!();
    }
    let exported = match export::run(args.export_events.max(100), args.list_sessions).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(error) => {
            eprintln!("reel bench: export: {}", error_chain(&*error));
            1
        }
    };
    streamed
        .max(started)
        .max(served)
        .max(aged)
        .max(held)
        .max(stored)
        .max(fetched)
        .max(exported)
        .max(streamed_out)
        .max(searched)
}

/// Runs a part of the benchmark that drives a child process: 0 when it held its bounds, else 1
/// with what went wrong on stderr.
async fn blocking_part(
    name: &str,
    part: impl FnOnce() -> std::io::Result<bool> + Send + 'static,
) -> u8 {
    match tokio::task::spawn_blocking(part).await {
        Ok(Ok(true)) => 0,
        Ok(Ok(false)) => 1,
        Ok(Err(error)) => {
            eprintln!("reel bench: {name}: {error}");
            1
        }
        Err(join) => {
            eprintln!("reel bench: {name} crashed: {join}");
            1
        }
    }
}

/// Runs one prompt ("bench") to its end: no request id, no system prompt, nothing cancels it.
async fn run_prompt(
    session: &mut reel_engine::Session,
    provider: &dyn reel_engine::Provider,
) -> reel_engine::RunOutcome {
    let request = reel_engine::RunRequest {
        request_id: std::sync::Arc::from(""),
        prompt: "bench".into(),
        system_prompt: None,
        settings: reel_engine::ModelSettings::default(),
        provider,
        tools: &reel_engine::NO_TOOLS,
        tool_client: false,
        approver: None,
        budgets: reel_engine::Budgets::default(),
        context_policy: reel_engine::ContextPolicy::default(),
    };
    session
        .run(request, &tokio_util::sync::CancellationToken::new())
        .await
}

/// A `kB` line of /proc/PID/status, e.g. VmRSS or VmHWM (0 where /proc is missing).
fn proc_status_kib(pid: &str, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| {
            line.strip_prefix(key)?
                .strip_prefix(':')?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
