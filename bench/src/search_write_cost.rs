//! What the search index costs writes: the same work stored into a timeline database with the
//! index and into one without its triggers on `entities`, in [`ROUNDS`] rounds that take turns
//! at going first. The cost is the median of the rounds' own ratios: on a shared machine two
//! identical databases differ by up to 10% in one round, so a single round, or the best of
//! each side, says more about a checkpoint or a neighbour's burst than about the index.
//!
//! * The durable event rate (target: at most 20% fewer events per second): a conversation
//!   through the session into the database, a prompt and a scripted reply of [`REPLY_WORDS`]
//!   text deltas a turn, the run's done waiting for the commit as `run-command --session-id`
//!   does. Replies this short are a harsh case: most model replies are longer, and each reply
//!   adds one document however many deltas it took.
//! * The worst case, reported beside it: 1,000-message commits of 10 to 30 words a message,
//!   each streamed as a delta per word, so a document every 21 events on average.

use std::time::Instant;

use reel_providers::{Script, Step};
use reel_storage::{Access, Location, TimelineStore, open_timeline};

use crate::{
    durable,
    search::{PER_SESSION, drop_index, store_messages, word},
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
    // Opening makes the databases (and their index) before the bare one loses its triggers.
    let mut stores = [
        open_timeline(indexed, Access::ReadWrite).await?,
        open_timeline(bare, Access::ReadWrite).await?,
    ];
    drop_index(bare).await?;
    let turns = (messages / 500).clamp(50, 2_000);
    let rounds = alternate(async |round, at| {
        converse([indexed, bare][at], &format!("conversation-{round}"), turns).await
    })
    .await?;
    rounds.report(
        name,
        &format!(
            "durable event rate, a conversation of {turns} turns (replies of {REPLY_WORDS} words, a delta each)"
        ),
        "target at most 20%",
    );

    let sample = (messages / 10).max(PER_SESSION);
    let rounds =
        alternate(async |round, at| streamed_messages(&mut stores[at], round, sample).await)
            .await?;
    rounds.report(
        name,
        &format!("worst case, {sample} messages of 10 to 30 words, each streamed a delta a word"),
        "a document every 21 events",
    );
    Ok(())
}

/// Rounds of each measurement: odd, so that the median is one round's.
const ROUNDS: usize = 5;

/// [`ROUNDS`] rounds of `measure(round, at)`, the rate of the indexed database (`at` 0) and
/// of the bare one (1). The indexed one goes first in even rounds and the bare one in odd
/// ones, so that neither always meets a fresh or a just-checkpointed disk.
async fn alternate(
    mut measure: impl AsyncFnMut(usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<Rounds> {
    let mut rounds = Rounds::default();
    for round in 0..ROUNDS {
        let order = if round.is_multiple_of(2) {
            [0, 1]
        } else {
            [1, 0]
        };
        let mut rates = [0.0; 2];
        for at in order {
            rates[at] = measure(round, at).await?;
        }
        rounds.0.push(rates);
    }
    Ok(rounds)
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

/// Events per second of `turns` turns of one session stored at `location`.
async fn converse(location: &Location, session_id: &str, turns: usize) -> anyhow::Result<f64> {
    let fanout = durable::timeline_fanout(location, session_id).await?;
    let script = Script {
        turns: (0..turns).map(reply).collect(),
        summary: None,
    };
    let (events, seconds) = durable::converse_through(fanout, session_id, script, || {}).await?;
    Ok(events as f64 / seconds)
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

/// Events per second of `messages` streamed messages, in sessions of the round's own.
async fn streamed_messages(
    store: &mut TimelineStore,
    round: usize,
    messages: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let events = store_messages(store, &format!("r{round}-"), messages, true).await?;
    Ok(events as f64 / started.elapsed().as_secs_f64())
}
