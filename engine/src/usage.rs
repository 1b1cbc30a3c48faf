//! Token usage and cost: per model call (as the provider reports it), per run and per session.
//!
//! Providers count differently: OpenAI's `input_tokens` include the cached ones
//! (`cached_tokens`), Anthropic's exclude what was read from or written to the cache
//! (`cache_read_input_tokens`, `cache_creation_input_tokens`). [`Pricing::cost`] prices each
//! kind once whichever way it was reported. [`UsageProjection`] folds the log into the run's
//! and the session's totals, which the run's last event carries.

use reel_proto::{Any, chat::UsageInfo};

use crate::{log::LogEntry, projection::Projection};

/// Prices in US dollars per million tokens, as the command file declares them (providers'
/// prices change; reel does not guess them).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Input read from the provider's cache; the input price when not given.
    #[serde(default)]
    pub cached_input_per_mtok: Option<f64>,
    /// Input written to the provider's cache (Anthropic); the input price when not given.
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
}

impl Pricing {
    /// What `usage` costs.
    pub fn cost(&self, usage: &UsageInfo) -> f64 {
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        let write_price = self.cache_write_per_mtok.unwrap_or(self.input_per_mtok);
        let tokens = |n: u32| f64::from(n) / 1_000_000.0;
        let uncached = usage.input_tokens.saturating_sub(usage.cached_tokens);
        tokens(uncached) * self.input_per_mtok
            + tokens(usage.cached_tokens + usage.cache_read_input_tokens) * cached_price
            + tokens(usage.cache_creation_input_tokens) * write_price
            + tokens(usage.output_tokens) * self.output_per_mtok
    }
}

/// Adds `more` to `total`, field by field.
pub fn add_usage(total: &mut UsageInfo, more: &UsageInfo) {
    total.input_tokens = total.input_tokens.saturating_add(more.input_tokens);
    total.output_tokens = total.output_tokens.saturating_add(more.output_tokens);
    total.cached_tokens = total.cached_tokens.saturating_add(more.cached_tokens);
    total.cache_creation_input_tokens = total
        .cache_creation_input_tokens
        .saturating_add(more.cache_creation_input_tokens);
    total.cache_read_input_tokens = total
        .cache_read_input_tokens
        .saturating_add(more.cache_read_input_tokens);
    total.cost_usd += more.cost_usd;
}

/// All input tokens of `usage`, however the provider split them: what a person means by
/// "tokens in".
pub fn input_tokens(usage: &UsageInfo) -> u64 {
    u64::from(usage.input_tokens)
        + u64::from(usage.cache_read_input_tokens)
        + u64::from(usage.cache_creation_input_tokens)
}

/// Input tokens served from the provider's cache.
pub fn cached_tokens(usage: &UsageInfo) -> u64 {
    u64::from(usage.cached_tokens) + u64::from(usage.cache_read_input_tokens)
}

/// The usage of the run in progress (or the last one) and of the whole session.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct UsageProjection {
    run: UsageInfo,
    session: UsageInfo,
    /// Model calls started in the run in progress (or the last one).
    #[serde(default)]
    run_calls: u64,
    /// Model calls started in the session, summarization calls included.
    #[serde(default)]
    session_calls: u64,
    /// Whether a run is in progress: a call between runs (a requested compaction) spends from
    /// the session only.
    #[serde(default)]
    in_run: bool,
}

impl UsageProjection {
    pub fn new() -> Self {
        Self::default()
    }

    /// A projection whose session total starts at `session` (resuming from a turns database,
    /// which keeps no log).
    pub fn from_session_total(session: UsageInfo, session_calls: u64) -> Self {
        Self {
            session,
            session_calls,
            ..Self::default()
        }
    }

    /// Model calls the current (or last) run started.
    pub fn run_calls(&self) -> u64 {
        self.run_calls
    }

    /// Model calls the session started.
    pub fn session_calls(&self) -> u64 {
        self.session_calls
    }

    /// The current (or last) run's usage.
    pub fn run(&self) -> UsageInfo {
        self.run
    }

    /// The session's usage so far.
    pub fn session(&self) -> UsageInfo {
        self.session
    }
}

impl Projection for UsageProjection {
    type Output = ();

    fn apply(&mut self, entry: &LogEntry) {
        match &entry.event {
            Any::ChatRunStarted(_) => {
                self.run = UsageInfo::default();
                self.run_calls = 0;
                self.in_run = true;
            }
            Any::ChatRunFinished(_) | Any::ChatRunStopped(_) | Any::ChatRunFailed(_) => {
                self.in_run = false;
            }
            Any::ChatProviderCallStarted(_) => {
                self.session_calls += 1;
                if self.in_run {
                    self.run_calls += 1;
                }
            }
            Any::ChatProviderCallFinished(f) => {
                if let Some(usage) = &f.usage {
                    if self.in_run {
                        add_usage(&mut self.run, usage);
                    }
                    add_usage(&mut self.session, usage);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_token_is_priced_once_whichever_way_it_was_reported() {
        let pricing = Pricing {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cached_input_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
        };
        // OpenAI: 1M input of which 400k cached, 100k output.
        let openai = UsageInfo {
            input_tokens: 1_000_000,
            cached_tokens: 400_000,
            output_tokens: 100_000,
            ..Default::default()
        };
        let expected = 0.6 * 3.0 + 0.4 * 0.3 + 0.1 * 15.0;
        assert!((pricing.cost(&openai) - expected).abs() < 1e-9);
        // Anthropic: the same tokens, cache reads and writes reported beside the input.
        let anthropic = UsageInfo {
            input_tokens: 500_000,
            cache_read_input_tokens: 400_000,
            cache_creation_input_tokens: 100_000,
            output_tokens: 100_000,
            ..Default::default()
        };
        let expected = 0.5 * 3.0 + 0.4 * 0.3 + 0.1 * 3.75 + 0.1 * 15.0;
        assert!((pricing.cost(&anthropic) - expected).abs() < 1e-9);
        assert_eq!(input_tokens(&anthropic), 1_000_000);
        assert_eq!(input_tokens(&openai), 1_000_000);
        assert_eq!(cached_tokens(&anthropic), 400_000);
    }
}
