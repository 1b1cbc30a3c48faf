//! Budgets: how much a run and a session may spend, and the check made before every model call.
//!
//! What was spent is a fold of the log ([`UsageProjection`]), so a resumed session starts with
//! what it spent before. The limits come from the command file and flags. A budget is checked
//! before each model call (a summarization call too): a call is made only while nothing is
//! spent up to its limit, so a run stops at the first call that would go past a budget, and
//! token and cost limits (known only once a call reports its usage) stop the call after the one
//! that reached them.

use crate::usage::{UsageProjection, input_tokens};

/// Limits for one scope (a run or the session); `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub max_model_calls: Option<u64>,
    /// Input tokens of every kind (cached and cache writes included).
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    /// At the prices the command file declares.
    pub max_cost_usd: Option<f64>,
}

/// The run's and the session's budgets.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    #[serde(default)]
    pub run: Budget,
    #[serde(default)]
    pub session: Budget,
}

/// Which budget a figure belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetScope {
    Run,
    Session,
}

/// A budget that is spent: no further model call may be made in its scope.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetExceeded {
    pub scope: BudgetScope,
    /// The limit's name as the command file spells it, e.g. `max_output_tokens`.
    pub limit: &'static str,
    pub max: f64,
    pub spent: f64,
}

impl std::fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scope = match self.scope {
            BudgetScope::Run => "run",
            BudgetScope::Session => "session",
        };
        write!(
            f,
            "the {scope} budget {} is spent ({} of {}); ",
            self.limit,
            shown(self.spent),
            shown(self.max)
        )?;
        match self.scope {
            BudgetScope::Run => f.write_str("the run stopped before its next model call"),
            BudgetScope::Session => f.write_str(
                "the session makes no more model calls (raise budget.session in the command file)",
            ),
        }
    }
}

fn shown(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.4}")
    }
}

impl Budget {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        *self != Budget::default()
    }

    /// The first limit that `spent` has reached, if any.
    fn reached(&self, scope: BudgetScope, spent: &Spent) -> Option<BudgetExceeded> {
        let limits = [
            (
                "max_model_calls",
                self.max_model_calls.map(|m| m as f64),
                spent.calls as f64,
            ),
            (
                "max_input_tokens",
                self.max_input_tokens.map(|m| m as f64),
                spent.input as f64,
            ),
            (
                "max_output_tokens",
                self.max_output_tokens.map(|m| m as f64),
                spent.output as f64,
            ),
            ("max_cost_usd", self.max_cost_usd, spent.cost),
        ];
        limits.into_iter().find_map(|(limit, max, spent)| {
            let max = max?;
            (spent >= max).then_some(BudgetExceeded {
                scope,
                limit,
                max,
                spent,
            })
        })
    }
}

/// What a scope has spent.
struct Spent {
    calls: u64,
    input: u64,
    output: u64,
    cost: f64,
}

impl Budgets {
    /// The budget that forbids another model call, if one does. `in_run`: the call belongs to
    /// a run (a compaction asked for between runs spends from the session only).
    pub fn check(&self, usage: &UsageProjection, in_run: bool) -> Option<BudgetExceeded> {
        let session = Spent {
            calls: usage.session_calls(),
            input: input_tokens(&usage.session()),
            output: u64::from(usage.session().output_tokens),
            cost: usage.session().cost_usd,
        };
        if let Some(exceeded) = self.session.reached(BudgetScope::Session, &session) {
            return Some(exceeded);
        }
        if !in_run {
            return None;
        }
        let run = Spent {
            calls: usage.run_calls(),
            input: input_tokens(&usage.run()),
            output: u64::from(usage.run().output_tokens),
            cost: usage.run().cost_usd,
        };
        self.run.reached(BudgetScope::Run, &run)
    }

    /// The session budget that forbids starting a run, if one does.
    pub fn check_session(&self, usage: &UsageProjection) -> Option<BudgetExceeded> {
        self.check(usage, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_reached_when_spent_meets_it_and_names_itself() {
        let budget = Budget {
            max_output_tokens: Some(10),
            ..Budget::default()
        };
        let under = Spent {
            calls: 3,
            input: 500,
            output: 9,
            cost: 0.0,
        };
        assert_eq!(budget.reached(BudgetScope::Run, &under), None);
        let at = Spent {
            output: 10,
            ..under
        };
        let exceeded = budget.reached(BudgetScope::Run, &at).unwrap();
        assert_eq!(exceeded.limit, "max_output_tokens");
        assert_eq!(
            exceeded.to_string(),
            "the run budget max_output_tokens is spent (10 of 10); the run stopped before its next model call"
        );
        assert!(!Budget::default().is_limited());
    }
}
