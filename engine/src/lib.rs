//! reel's engine: the event log, its pure projections, the session that writes the log, the
//! model provider trait (the providers are `reel-providers`'), and the sink trait.
//!
//! Its modules are private: every type has one path, the re-export below.
//!
//! The engine knows no database, file format or terminal. Outer crates implement [`Sink`] and
//! [`Provider`]; the [`Session`] ties them together:
//!
//! ```text
//! Provider --events--> Session::append --> EventLog (ordinal 1, 2, 3, ...)
//!                                      --> TimelineProjection --> ui events, snapshots
//!                                      --> ModelContextProjection --> next ModelRequest
//!                                      --> Fanout --> every Sink, in order, with back-pressure
//! ```

mod budget;
mod catalog;
mod compaction;
mod context;
mod deadlines;
mod fanout;
mod fingerprint;
mod hosted;
mod id;
mod idle;
mod log;
mod log_pages;
mod output;
mod projection;
mod provider;
mod redaction;
mod retention;
mod run;
mod search;
mod session;
mod sink;
mod store;
mod stored_stream;
mod timeline;
mod tools;
mod usage;
mod vocabulary;

pub use budget::{Budget, BudgetExceeded, BudgetScope, Budgets};
pub use catalog::{
    PendingApproval, SessionCatalog, SessionSummary, WaitingSession, approval_tally,
    pending_approvals, run_tally, session_title,
};
pub use compaction::{ContextPolicy, PolicyError, plain_summary};
pub use context::{
    ContextMessage, ContextReasoning, ContextRole, ContextToolCall, Conversation,
    ModelContextProjection,
};
pub use deadlines::DeadlineChanges;
pub use fanout::{Fanout, OutputBatch, SinkFailure};
pub use fingerprint::{Fingerprinter, fingerprint as request_fingerprint};
pub use hosted::{
    Incoming, OpenedSession, ParsedLine, RunSetup, ServeConfig, ServeEnd, parse_line, serve,
    too_large,
};
pub use id::{IdError, MAX_REQUEST_ID, MAX_SESSION_ID, check_request_id, check_session_id, new_id};
pub use idle::IdleSignal;
pub use log::{EventLog, LogEntry, now_ms, ordinal_error};
pub use log_pages::LogPages;
pub use output::{CommittedEvent, Output, OutputKind, hello_frame};
pub use projection::Projection;
pub use provider::{
    ModelRequest, ModelSettings, Provider, ProviderError, ProviderEvent, ProviderStream,
    TokenLimitField,
};
pub use redaction::{Eraser, RedactionError, RedactionScope, Survey, TOMBSTONE};
pub use retention::Retention;
pub use run::{
    ActiveRun, CompactRequest, RunEvent, RunFailure, RunOutcome, RunRequest, panic_message,
};
pub use search::{SearchHit, SearchQuery, SnippetPart, snippet_parts};
pub use session::Session;
pub use sink::{Acks, Durability, InlineSink, MemorySink, Reads, Sink, SinkError};
pub use store::{
    Cause, Commit, LogStore, SessionState, StoreError, StoredSession, Turn, TurnStore, error_chain,
};
pub use stored_stream::{StoredStream, send_stored};
pub use timeline::{OpenRun, QueuedPrompt, TimelineProjection};
pub use tools::{
    Approval, ApprovalRequest, Approver, DEFAULT_MAX_ITERATIONS, NO_TOOLS, OnInterrupted, Tool,
    ToolCallContext, ToolChoice, ToolDefinition, ToolExecutor, ToolOutput, ToolService, Toolbox,
    ToolboxError,
};
pub use usage::{Pricing, UsageProjection, add_usage, cached_tokens, input_tokens};
pub use vocabulary::{
    ApprovalDecision, ApprovalOption, CallPurpose, CompactionReason, DoneStatus, DropReason,
    ErrorCode, FinishClass, MessageStatus, QueuedPromptKind, QueuedPromptStatus,
    RedactionScopeName, RunStatus, ToolCallStatus, ToolResultStatus, WarningCode,
};
