//! Full-text search (`--search-messages N`): N stored messages (sessions of 1,000, words drawn
//! from a vocabulary of 5,000 with a few common ones), then 200 queries of one or two words,
//! newest 20 hits each, through the store as `reel search` and `GET /v1/search` ask it:
//! p50 and p99 (target: p99 under 50 ms at 1,000,000 messages). Then what the index costs
//! writes ([`crate::search_write_cost`]). SQLite, and PostgreSQL with `--postgres`.

use std::{sync::Arc, time::Instant};

use reel_engine::{Commit, LogEntry, LogStore, SearchQuery, SessionCatalog};
use reel_proto::{
    Any,
    chat::{ChatMessageEntity, ChatTextDelta, ChatUserMessageAccepted},
    rpc::SnapshotEntity,
};
use reel_storage::{Access, Location, TimelineStore, open_timeline};
use sqlx::Connection;

use crate::{durable::Schema, search_write_cost};

/// Messages per session (and per commit).
pub(crate) const PER_SESSION: usize = 1_000;
/// Queries timed.
const QUERIES: usize = 200;

pub async fn run(messages: usize, postgres: Option<String>) -> anyhow::Result<bool> {
    let dir = tempfile::tempdir()?;
    let file = |name: &str| Location::path(dir.path().join(format!("{name}.db")));
    let places = [file("search"), file("indexed"), file("bare")];
    bench_backend("SQLite", &places, messages).await?;
    if let Some(server) = postgres {
        // Three schemas of the bench's own, dropped at the end.
        let mut schemas = Vec::new();
        for _ in 0..3 {
            schemas.push(Schema::create(&server).await?);
        }
        let places = [0, 1, 2].map(|at| Location::Postgres(schemas[at].dsn.clone()));
        let measured = bench_backend("PostgreSQL", &places, messages).await;
        for schema in schemas {
            schema.drop().await?;
        }
        measured?;
    }
    Ok(true)
}

/// `places`: the database searched, and two more for the write cost (with and without the
/// index).
async fn bench_backend(name: &str, places: &[Location; 3], messages: usize) -> anyhow::Result<()> {
    println!("reel bench: full-text search over {messages} stored messages ({name})");
    let mut store = open_timeline(&places[0], Access::ReadWrite).await?;
    let started = Instant::now();
    store_messages(&mut store, "s", messages, false).await?;
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    println!("stored with the index: {rate:.0} messages/s");

    let mut times = Vec::with_capacity(QUERIES);
    let mut found = 0;
    for at in 0..QUERIES {
        let text = if at % 4 == 3 {
            format!("{} {}", word(at * 7919), word(at * 104_729))
        } else {
            word(at * 7919).to_owned()
        };
        let query = SearchQuery {
            text,
            limit: 20,
            ..SearchQuery::default()
        };
        let started = Instant::now();
        found += store.search(&query).await?.len();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{QUERIES} queries (newest 20 hits, {found} in all): p50 {:.1} ms, p99 {:.1} ms (target p99 under 50 ms)",
        at(0.5),
        at(0.99)
    );
    search_write_cost::measure(name, &places[1], &places[2], messages).await
}

/// `store` on a database without the search index: on SQLite, whose triggers on `entities`
/// keep the index, those triggers are dropped from the database at `location`; on PostgreSQL,
/// whose store writes the documents with their entities, the store writes none.
pub(crate) async fn without_index(
    store: TimelineStore,
    location: &Location,
) -> anyhow::Result<TimelineStore> {
    match (store, location) {
        (TimelineStore::Postgres(store), _) => {
            Ok(TimelineStore::Postgres(store.without_search_documents()))
        }
        (store, Location::Sqlite(path)) => {
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await?;
            // IF EXISTS: each store opened on the database drops them, the first for good.
            sqlx::raw_sql(
                "DROP TRIGGER IF EXISTS entities_searched_inserted; \
                 DROP TRIGGER IF EXISTS entities_searched_updated; \
                 DROP TRIGGER IF EXISTS entities_searched_deleted;",
            )
            .execute(&mut conn)
            .await?;
            Ok(store)
        }
        (_, location) => {
            anyhow::bail!("the store at {location:?} is not of its location's backend")
        }
    }
}

/// Stores `messages` messages, `PER_SESSION` a session (named `prefix` and a number), each
/// with its event and entity; with `streamed`, a text delta per word before each (as a reply
/// arrives). The events stored.
pub(crate) async fn store_messages(
    store: &mut TimelineStore,
    prefix: &str,
    messages: usize,
    streamed: bool,
) -> anyhow::Result<usize> {
    let mut stored = 0;
    let sessions = messages.div_ceil(PER_SESSION);
    for session in 0..sessions {
        let id = format!("{prefix}{session}");
        store.lease(&id).await?;
        let count = PER_SESSION.min(messages - session * PER_SESSION);
        let mut commit = Commit::default();
        let mut ordinal = 0;
        for at in 0..count {
            let text = sentence(session * PER_SESSION + at);
            if streamed {
                for piece in text.split_inclusive(' ') {
                    ordinal += 1;
                    commit.events.push(Arc::new(LogEntry {
                        ordinal,
                        recorded_at_ms: reel_engine::now_ms(),
                        event: ChatTextDelta {
                            text: piece.to_owned(),
                            ..Default::default()
                        }
                        .into(),
                    }));
                }
            }
            ordinal += 1;
            commit.events.push(Arc::new(LogEntry {
                ordinal,
                recorded_at_ms: reel_engine::now_ms(),
                event: ChatUserMessageAccepted {
                    text: text.clone(),
                    ..Default::default()
                }
                .into(),
            }));
            commit.entities.push(SnapshotEntity {
                kind: "ChatMessage".into(),
                id: format!("m{ordinal}"),
                created_ordinal: ordinal,
                last_event_ordinal: ordinal,
                tombstone: false,
                payload: Some(Any::from(ChatMessageEntity {
                    role: "user".into(),
                    text,
                    status: "accepted".into(),
                    ..Default::default()
                })),
            });
        }
        commit.entities_ordinal = Some(ordinal);
        stored += commit.events.len();
        store.commit(&id, &commit).await?;
        store.release(&id).await?;
    }
    Ok(stored)
}

/// Message `n`: 10 to 30 words; the first few words of the vocabulary are common.
fn sentence(n: usize) -> String {
    let length = 10 + n % 21;
    (0..length)
        .map(|k| {
            let pick = n.wrapping_mul(2_654_435_761).wrapping_add(k * 40_503) % 100;
            if pick < 20 {
                word(pick)
            } else {
                word(n.wrapping_mul(31).wrapping_add(k * 977))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Word `n` of a vocabulary of 5,000 made-up words.
pub(crate) fn word(n: usize) -> &'static str {
    static WORDS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let words = WORDS.get_or_init(|| {
        const SYLLABLES: [&str; 20] = [
            "ka", "lo", "mi", "ne", "su", "ta", "re", "vo", "pi", "da", "gu", "ha", "je", "ko",
            "lu", "ma", "no", "pe", "ri", "sa",
        ];
        (0..5_000)
            .map(|i| {
                format!(
                    "{}{}{}",
                    SYLLABLES[i % 20],
                    SYLLABLES[(i / 20) % 20],
                    SYLLABLES[(i / 400) % 20]
                )
            })
            .collect()
    });
    &words[n % words.len()]
}
