//! How a prompt ended, read from its outputs as they pass: the `stopReason` and usage of its
//! `session/prompt` answer, or the error it failed with.
//!
//! The run's end event decides: `ChatRunFinished` is `end_turn`, unless the model stopped at
//! its token limit (`max_tokens`) or refused (`refusal`); a run that hit its iteration limit
//! or a budget is `max_turn_requests`; `ChatRunStopped` is `cancelled`; `ChatRunFailed` and a
//! refused request are a JSON-RPC error carrying reel's message.

use agent_client_protocol::{
    Error, ErrorCode,
    v1::schema::{PromptResponse, StopReason, Usage},
};
use reel_engine::{DoneStatus, LogEntry, RunStatus};
use reel_proto::{Any, chat::UsageInfo, rpc::ErrorFrame};

/// What one prompt's outputs have said so far.
#[derive(Debug, Default)]
pub struct PromptEnd {
    stop: Option<StopReason>,
    usage: Option<UsageInfo>,
    /// The stop reason of the run's latest model call, as the provider said it.
    provider_stop: String,
    errors: Vec<String>,
}

impl PromptEnd {
    /// Takes in one event of the prompt's run.
    pub fn observe(&mut self, entry: &LogEntry) {
        match &entry.event {
            Any::ChatProviderCallFinished(finished) => {
                self.provider_stop = finished.stop_reason.clone();
            }
            Any::ChatRunFinished(finished) => {
                self.usage = finished.usage;
                self.stop = Some(match RunStatus::parse(&finished.status) {
                    Some(RunStatus::MaxIterationsReached | RunStatus::BudgetExceeded) => {
                        StopReason::MaxTurnRequests
                    }
                    _ => self.model_stop(),
                });
            }
            Any::ChatRunStopped(stopped) => {
                self.usage = stopped.usage;
                self.stop = Some(StopReason::Cancelled);
            }
            Any::ChatRunFailed(failed) => {
                self.usage = failed.usage;
                self.errors.push(failed.error.clone());
            }
            _ => {}
        }
    }

    /// Takes in an error frame of the prompt's request.
    pub fn observe_error(&mut self, error: &ErrorFrame) {
        self.errors
            .push(format!("{}: {}", error.code, error.message));
    }

    /// The answer to the prompt, once its request is done with `status`.
    pub fn answer(self, status: DoneStatus) -> Result<PromptResponse, Error> {
        let stop = match (status, self.stop) {
            (DoneStatus::Ok, Some(stop)) => stop,
            (DoneStatus::Stopped | DoneStatus::Shutdown, _) => StopReason::Cancelled,
            (_, Some(StopReason::Cancelled)) => StopReason::Cancelled,
            _ => {
                let message = match self.errors.is_empty() {
                    true => format!("the prompt ended {status}"),
                    false => self.errors.join("; "),
                };
                return Err(Error::new(ErrorCode::INTERNAL_ERROR, message));
            }
        };
        let mut response = PromptResponse::new(stop);
        if let Some(usage) = self.usage {
            response = response.usage(acp_usage(&usage));
        }
        Ok(response)
    }

    /// How the model's last call stopped.
    fn model_stop(&self) -> StopReason {
        match self.provider_stop.as_str() {
            "max_tokens" | "length" => StopReason::MaxTokens,
            "refusal" | "content_filter" => StopReason::Refusal,
            _ => StopReason::EndTurn,
        }
    }
}

fn acp_usage(usage: &UsageInfo) -> Usage {
    let input = u64::from(usage.input_tokens);
    let output = u64::from(usage.output_tokens);
    let cached = u64::from(usage.cache_read_input_tokens.max(usage.cached_tokens));
    let mut acp = Usage::new(input + output, input, output);
    if cached > 0 {
        acp = acp.cached_read_tokens(cached);
    }
    if usage.cache_creation_input_tokens > 0 {
        acp = acp.cached_write_tokens(u64::from(usage.cache_creation_input_tokens));
    }
    acp
}

#[cfg(test)]
mod tests {
    use super::*;
    use reel_proto::chat::{ChatProviderCallFinished, ChatRunFinished, ChatRunStopped};

    fn entry(event: impl Into<Any>) -> LogEntry {
        LogEntry {
            ordinal: 1,
            recorded_at_ms: 0,
            event: event.into(),
        }
    }

    fn finished(status: RunStatus) -> LogEntry {
        entry(ChatRunFinished {
            status: status.into(),
            usage: Some(UsageInfo {
                input_tokens: 10,
                output_tokens: 5,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn stop_of(entries: &[LogEntry], status: DoneStatus) -> Result<StopReason, Error> {
        let mut end = PromptEnd::default();
        entries.iter().for_each(|e| end.observe(e));
        end.answer(status).map(|answer| answer.stop_reason)
    }

    #[test]
    fn the_run_end_is_the_stop_reason() {
        let ok = DoneStatus::Ok;
        assert_eq!(
            stop_of(&[finished(RunStatus::Finished)], ok).unwrap(),
            StopReason::EndTurn
        );
        let limit = entry(ChatProviderCallFinished {
            stop_reason: "max_tokens".into(),
            ..Default::default()
        });
        let at_limit = [limit, finished(RunStatus::Finished)];
        assert_eq!(stop_of(&at_limit, ok).unwrap(), StopReason::MaxTokens);
        let iterations = [finished(RunStatus::MaxIterationsReached)];
        assert_eq!(
            stop_of(&iterations, ok).unwrap(),
            StopReason::MaxTurnRequests
        );
        let stopped = [entry(ChatRunStopped::default())];
        let stop = stop_of(&stopped, DoneStatus::Stopped).unwrap();
        assert_eq!(stop, StopReason::Cancelled);
        assert!(stop_of(&[], DoneStatus::Failed).is_err());
    }

    #[test]
    fn usage_goes_with_the_answer() {
        let mut end = PromptEnd::default();
        end.observe(&finished(RunStatus::Finished));
        let json = serde_json::to_value(end.answer(DoneStatus::Ok).unwrap()).unwrap();
        assert_eq!(json["stopReason"], "end_turn");
        assert_eq!(json["usage"]["totalTokens"], 15);
    }
}
