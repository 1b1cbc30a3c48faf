//! reel's closed vocabularies: the statuses and codes frames and payloads carry, as enums.
//!
//! The wire keeps strings (the payloads' `status` fields, `error.code`, `done.status`: the
//! contract clients read), and these enums are the only place those strings are written, so a
//! typo is a compile error instead of a value nobody matches. Each enum turns into its string
//! with [`Into<String>`] (for payload fields) or `as_str`, and back with `parse`. A test checks
//! that the manual (docs/) documents every value.

/// Declares a string enum: `Name { Variant = "text", ... }`.
macro_rules! vocabulary {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant),*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The value as the wire writes it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),*
                }
            }

            /// The value the wire string `text` names, if any.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.as_str().to_owned()
            }
        }
    };
}

vocabulary! {
    /// How a request ended: `done.status`.
    DoneStatus {
        Ok = "ok",
        Failed = "failed",
        Stopped = "stopped",
        Shutdown = "shutdown",
        /// The run waits for a person's decision on a tool call and its process ended first:
        /// it goes on when an `approve` reaches the session (in this process or another).
        Waiting = "waiting",
    }
}

vocabulary! {
    /// What went wrong: `error.code`.
    ErrorCode {
        /// The command file, script, a database or the debug file could not be used.
        RunnerInitFailed = "runner_init_failed",
        /// The model call failed.
        RunFailed = "run_failed",
        /// The provider or reel itself crashed.
        InternalError = "internal_error",
        /// A durable sink (the timeline or turns database) failed.
        StorageFailed = "storage_failed",
        /// A best-effort output failed and was detached.
        SinkFailed = "sink_failed",
        /// A warning: the run made as many model calls as it may.
        MaxIterationsReached = "max_iterations_reached",
        InvalidRequestJson = "invalid_request_json",
        UnknownRequest = "unknown_request",
        EmptyPrompt = "empty_prompt",
        UnsupportedVersion = "unsupported_version",
        RequestTooLarge = "request_too_large",
        InvalidRequestId = "invalid_request_id",
        InvalidSessionId = "invalid_session_id",
        SessionMismatch = "session_mismatch",
        SessionBusy = "session_busy",
        NoActiveRequest = "no_active_request",
        UnknownToolCall = "unknown_tool_call",
        /// An `approve` request's decision is not `allow_once`, `allow_always` or `reject_once`.
        InvalidDecision = "invalid_decision",
        StdinReadFailed = "stdin_read_failed",
        BudgetExceeded = "budget_exceeded",
        ContextOverflow = "context_overflow",
        NothingToCompact = "nothing_to_compact",
        /// `reel serve`: no session has this id.
        SessionNotFound = "session_not_found",
        /// `reel serve`: the session was pruned for its age (`reel prune`, `--retain`): 410.
        SessionPruned = "session_pruned",
        /// `reel serve`: a session with this id exists already.
        SessionExists = "session_exists",
        /// `reel serve`: the bearer token is missing or wrong.
        Unauthorized = "unauthorized",
        /// `reel serve`: an event stream's cursor is past the session's last event.
        CursorOutOfRange = "cursor_out_of_range",
        /// `reel serve`: an export's or a fork's ordinal is past the session's last event.
        OrdinalOutOfRange = "ordinal_out_of_range",
        /// `reel serve`: a new session's command is not one the server has, or its variables
        /// are not the command's.
        InvalidCommand = "invalid_command",
        /// `reel serve`: the server is stopping and takes no more requests.
        ServerStopping = "server_stopping",
        /// `reel serve`: a WebSocket route was asked for without a WebSocket handshake.
        UpgradeRequired = "upgrade_required",
        /// `reel serve`: a query parameter is missing or is not what the route takes.
        InvalidQuery = "invalid_query",
        /// `reel serve`: the request's `Host` is not a name the server answers for.
        HostNotAllowed = "host_not_allowed",
        /// `reel serve`: a page of another origin sent the request.
        ForbiddenOrigin = "forbidden_origin",
        /// `reel serve`: a JSON route was sent a body of another type.
        UnsupportedMediaType = "unsupported_media_type",
        /// `reel serve`: the server holds as many connections as it may (`--max-connections`).
        ServerBusy = "server_busy",
    }
}

vocabulary! {
    /// How a run stands: the `status` of its end event, and a session's last run status.
    RunStatus {
        Running = "running",
        Finished = "finished",
        /// Finished, with the model still asking for tools at the iteration limit.
        MaxIterationsReached = "max_iterations_reached",
        BudgetExceeded = "budget_exceeded",
        Stopped = "stopped",
        Failed = "failed",
    }
}

vocabulary! {
    /// What a model call is for (`ChatProviderCallStarted.purpose`).
    #[derive(Default)]
    CallPurpose {
        /// The conversation's next answer (an empty purpose in older logs).
        #[default]
        Reply = "reply",
        /// A compaction's summary of the earlier conversation.
        Summary = "summary",
    }
}

vocabulary! {
    /// Why the context was compacted (`ChatContextCompacted.reason`).
    CompactionReason {
        /// The next model call's input would have passed `compact_at` of the window.
        Threshold = "threshold",
        /// A client asked (`compact`).
        Requested = "requested",
    }
}

vocabulary! {
    /// How a redaction chose what to erase (`ChatContentRedacted.scope`).
    RedactionScopeName {
        /// The entities whose content a range of events carried (`--ordinals A..B`).
        Ordinals = "ordinals",
        /// One entity (`--entity ID`).
        Entity = "entity",
        /// The entities whose content matched a pattern (`--match REGEX`).
        Match = "match",
        /// All of the session's content (`--all`).
        All = "all",
    }
}

vocabulary! {
    /// A prompt sent while a run was going.
    QueuedPromptKind {
        /// Delivered into the running run at its next model call.
        Steer = "steer",
        /// Started as its own run when the running one ends.
        FollowUp = "follow_up",
    }
}

vocabulary! {
    /// Where a queued prompt is.
    QueuedPromptStatus {
        Queued = "queued",
        Delivered = "delivered",
        Dropped = "dropped",
    }
}

vocabulary! {
    /// Why a queued prompt was dropped.
    DropReason {
        /// `cancel` with `clearQueue`.
        Cleared = "cleared",
        /// A steer whose run stopped or failed before its next model call.
        RunEnded = "run_ended",
        /// A `shutdown` request or a signal came first.
        Shutdown = "shutdown",
        /// The process ended before it started (found on resume).
        Interrupted = "interrupted",
        /// The session's budget was spent when its turn came.
        BudgetExceeded = "budget_exceeded",
    }
}

vocabulary! {
    /// Where a tool call is: the `status` of a tool call entity and of its events.
    ToolCallStatus {
        /// The model is still streaming its arguments.
        StreamingArgs = "streaming_args",
        /// Complete, not yet executing.
        Pending = "pending",
        Executing = "executing",
        /// A client tool waiting for the client's answer.
        AwaitingClient = "awaiting_client",
        /// An `approval: ask` call waiting for a person's decision.
        AwaitingApproval = "awaiting_approval",
        Completed = "completed",
        /// The tool ran and returned an error.
        Failed = "failed",
        /// The run was stopped before the tool finished.
        Cancelled = "cancelled",
        /// Never run: the model call or the database failed, or the iteration limit was reached.
        Skipped = "skipped",
        /// The process died while the call was open (closed on resume).
        Interrupted = "interrupted",
    }
}

vocabulary! {
    /// How a model call ended: `ChatProviderCallFinished.finish_class`.
    FinishClass {
        Completed = "completed",
        ToolCalls = "tool_calls",
        Error = "error",
        Cancelled = "cancelled",
    }
}

vocabulary! {
    /// The `status` of a tool result.
    ToolResultStatus {
        Ok = "ok",
        Error = "error",
    }
}

vocabulary! {
    /// What a person may answer when a tool asks for approval: `ChatToolApprovalRequested.options`.
    ApprovalOption {
        AllowOnce = "allow_once",
        /// Allowed, and not asked again for this tool in the session.
        AllowAlways = "allow_always",
        RejectOnce = "reject_once",
    }
}

vocabulary! {
    /// How an approval ended: `ChatToolApprovalDecided.decision`.
    ApprovalDecision {
        Allowed = "allowed",
        Rejected = "rejected",
        /// The prompt was cancelled while it waited, or nobody could be asked.
        Cancelled = "cancelled",
        /// Nobody decided within the tool's `approval_timeout`.
        Expired = "expired",
    }
}

vocabulary! {
    /// What a run warns about: `ChatRunWarning.code`.
    WarningCode {
        /// A model call that had to call a tool answered without one.
        RequiredToolCallMissing = "required_tool_call_missing",
    }
}

vocabulary! {
    /// The `status` of a chat message entity and of its segment events.
    MessageStatus {
        /// A user message taken.
        Accepted = "accepted",
        Streaming = "streaming",
        Finished = "finished",
        Stopped = "stopped",
        Failed = "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value is documented where users read the contract: the manual's pages.
    #[test]
    fn the_manual_documents_every_value() {
        let readme = [
            include_str!("../../docs/protocol.md"),
            include_str!("../../docs/command-files.md"),
            include_str!("../../docs/durable-sessions.md"),
            include_str!("../../docs/long-sessions.md"),
            include_str!("../../docs/serving.md"),
            include_str!("../../docs/editors-and-mcp.md"),
            include_str!("../../docs/sinks-and-traces.md"),
        ]
        .concat();
        let quoted = |text: &str| readme.contains(&format!("`{text}`"));
        let mut missing = Vec::new();
        let values = DoneStatus::ALL
            .iter()
            .map(|v| v.as_str())
            .chain(ErrorCode::ALL.iter().map(|v| v.as_str()))
            .chain(RunStatus::ALL.iter().map(|v| v.as_str()))
            .chain(ToolCallStatus::ALL.iter().map(|v| v.as_str()))
            .chain(FinishClass::ALL.iter().map(|v| v.as_str()))
            .chain(WarningCode::ALL.iter().map(|v| v.as_str()))
            .chain(MessageStatus::ALL.iter().map(|v| v.as_str()))
            .chain(CallPurpose::ALL.iter().map(|v| v.as_str()))
            .chain(CompactionReason::ALL.iter().map(|v| v.as_str()))
            .chain(RedactionScopeName::ALL.iter().map(|v| v.as_str()))
            .chain(QueuedPromptKind::ALL.iter().map(|v| v.as_str()))
            .chain(QueuedPromptStatus::ALL.iter().map(|v| v.as_str()))
            .chain(DropReason::ALL.iter().map(|v| v.as_str()))
            .chain(ApprovalOption::ALL.iter().map(|v| v.as_str()))
            .chain(ApprovalDecision::ALL.iter().map(|v| v.as_str()));
        for value in values {
            if !quoted(value) {
                missing.push(value);
            }
        }
        assert!(missing.is_empty(), "docs/ does not document {missing:?}");
    }

    #[test]
    fn values_round_trip() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        }
        assert_eq!(
            ToolCallStatus::parse("awaiting_client"),
            Some(ToolCallStatus::AwaitingClient)
        );
        assert_eq!(RunStatus::parse("nonsense"), None);
        assert_eq!(String::from(DoneStatus::Shutdown), "shutdown");
    }
}
