//! What the search index costs writes: the same work stored into a timeline database with the
//! index and into one without it (see [`crate::search::without_index`]), in pairs: each turn (or commit) is
//! stored into one database and then the other, taking turns at going first, and each side's
//! time is summed. On a shared machine the rate of one database drifts by 10% or more from
//! one second to the next (a neighbour's burst, a checkpoint), so timing a whole run of one
//! and then of the other measured the drift as much as the index; paired this closely, both
//! sides meet the same drift. [`ROUNDS`] rounds, each of new sessions; the cost is the median
//! of the rounds' own ratios.
//!
//! * The durable event rate (target: at most 20% fewer events per second): a conversation
//!   through the session into the database, a prompt and a scripted reply of [`REPLY_WORDS`]
//!   text deltas a turn, the run's done waiting for the commit as `run-command --session-id`
//!   does. Replies this short are a harsh case: most model replies are longer, and each reply
//!   adds one document however many deltas it took.
//! * The worst case, reported beside it: 1,000-message commits of 10 to 30 words a message,
//!   each streamed as a delta per word, so a document every 21 events on average.

use std::time::Instant;

use reel_engine::Session;
use reel_providers::{Script, ScriptedProvider, Step};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

use crate::{
    durable,
    search::{PER_SESSION, store_messages, without_index, word},
};

/// Words in each scripted reply of the conversation, one text delta each.
const REPLY_WORDS: usize = 100;

/// Measures and prints both costs; `indexed` and `bare` are empty databases of the backend
/// `name`. `messages` scales the work: a turn per 500 messages (50 to 2,000 turns), and a
/// tenth of them for the worst case.
pub async fn measure(
    name: &str,
    indexed: &Location,
    bare: &Location,
    messages: usize,
) -> anyhow::Result<()> {
    // Opening makes the databases (and their index) before the bare one loses it.
    let mut stores = [
        open_timeline(indexed, Access::ReadWrite).await?,
        without_index(open_timeline(bare, Access::ReadWrite).await?, bare).await?,
    ];
    let turns = (messages / 500).clamp(50, 2_000);
    let mut rounds = Rounds::default();
    for round in 0..ROUNDS {
        rounds
            .0
            .push(converse([indexed, bare], &format!("conversation-{round}"), turns).await?);
    }
    rounds.report(
        name,
        &format!(
            "durable event rate, a conversation of {turns} turns (replies of {REPLY_WORDS} words, a delta each)"
        ),
        "target at most 20%",
    );

    let sessions = (messages / 10 / PER_SESSION).max(1);
    let mut rounds = Rounds::default();
    for round in 0..ROUNDS {
        rounds
            .0
            .push(streamed_messages(&mut stores, round, sessions).await?);
    }
    rounds.report(
        name,
        &format!(
            "worst case, {} messages of 10 to 30 words, each streamed a delta a word",
            sessions * PER_SESSION
        ),
        "a document every 21 events",
    );
    Ok(())
}

/// Rounds of each measurement: odd, so that the median is one round's.
const ROUNDS: usize = 5;

/// Which side goes first in pair `n`: the indexed one (0) in even pairs, the bare one (1) in
/// odd ones.
fn order(n: usize) -> [usize; 2] {
    if n.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}

/// The rates of each round: with the index, and without.
#[derive(Default)]
struct Rounds(Vec<[f64; 2]>);

impl Rounds {
    /// The median round by its ratio of the two rates.
    fn median(&self) -> [f64; 2] {
        let mut rounds = self.0.clone();
        rounds.sort_by(|a, b| (a[0] / a[1]).total_cmp(&(b[0] / b[1])));
        rounds[rounds.len() / 2]
    }

    fn report(&self, name: &str, what: &str, target: &str) {
        let [with, without] = self.median();
        let costs: Vec<String> = self
            .0
            .iter()
            .map(|&rates| format!("{:.0}", cost(rates)))
            .collect();
        println!(
            "{what}: {with:.0} events/s stored with the index, {without:.0} without (the median of {ROUNDS} rounds): the index costs {:.0}% ({name}, {target}; rounds: {}%)",
            cost([with, without]),
            costs.join(", ")
        );
    }
}

/// What the index costs in per cent of the rate without it (none when it came out faster).
fn cost([with, without]: [f64; 2]) -> f64 {
    (1.0 - with / without).max(0.0) * 100.0
}

/// Events per second of `turns` turns of a session stored at each of `locations` (with the
/// index, and without), a turn of one and then the same turn of the other.
async fn converse(
    locations: [&Location; 2],
    session_id: &str,
    turns: usize,
) -> anyhow::Result<[f64; 2]> {
    let mut sessions = Vec::with_capacity(2);
    let mut providers = Vec::with_capacity(2);
    for (location, side) in locations.into_iter().zip(["indexed", "bare"]) {
        let mut store = open_timeline(location, Access::ReadWrite).await?;
        if side == "bare" {
            store = without_index(store, location).await?;
        }
        let fanout = durable::store_fanout(store, session_id).await?;
        sessions.push(Session::new(session_id, fanout));
        providers.push(ScriptedProvider::new(Script {
            turns: (0..turns).map(reply).collect(),
            summary: None,
        }));
    }
    let mut seconds = [0.0; 2];
    for turn in 0..turns {
        for at in order(turn) {
            let started = Instant::now();
            durable::play_turn(&mut sessions[at], &providers[at]).await;
            seconds[at] += started.elapsed().as_secs_f64();
        }
    }
    let mut rates = [0.0; 2];
    for (at, session) in sessions.into_iter().enumerate() {
        rates[at] = durable::close_stored(session).await? as f64 / seconds[at];
    }
    Ok(rates)
}

/// Turn `n`'s reply: [`REPLY_WORDS`] words of the vocabulary, a delta each.
fn reply(n: usize) -> Vec<Step> {
    (0..REPLY_WORDS)
        .map(|k| {
            Step::Text(format!(
                "{} ",
                word(n.wrapping_mul(7_919).wrapping_add(k * 977))
            ))
        })
        .collect()
}

/// Events per second of `sessions` sessions of [`PER_SESSION`] streamed messages stored into
/// each of `stores` (with the index, and without), a session's commit into one and then into
/// the other; the sessions are the round's own.
async fn streamed_messages(
    stores: &mut [TimelineStore; 2],
    round: usize,
    sessions: usize,
) -> anyhow::Result<[f64; 2]> {
    let mut events = [0; 2];
    let mut seconds = [0.0; 2];
    for session in 0..sessions {
        for at in order(session) {
            let started = Instant::now();
            let prefix = format!("r{round}-{session}-");
            events[at] += store_messages(&mut stores[at], &prefix, PER_SESSION, true).await?;
            seconds[at] += started.elapsed().as_secs_f64();
        }
    }
    Ok([0, 1].map(|at| events[at] as f64 / seconds[at]))
}
