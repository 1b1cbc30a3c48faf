//! A session log as analytics rows: one Parquet row per log event (`reel export --format
//! parquet`), which DuckDB, pandas, Spark and any Parquet reader take as it is.
//!
//! The columns, in order (nullable unless said; `NULL` where the event has no such thing):
//!
//! | column | type | what |
//! |---|---|---|
//! | `session_id` | string, required | the session |
//! | `ordinal` | int64, required | the event's place in the session's log |
//! | `time` | timestamp (ms, UTC), required | when it was appended |
//! | `event_type` | string, required | the payload's message name, e.g. `ChatTextDelta` |
//! | `run_id` | string | the run it belongs to |
//! | `message_id` | string | the message, call or result it made or changed |
//! | `call_id` | string | the provider's id of a tool call |
//! | `role` | string | `user`, `assistant`, `reasoning` or `tool` |
//! | `text` | string | a user message, a text or reasoning delta, a tool result, a summary, a queued prompt, a warning, a failed run's error |
//! | `tool_name` | string | |
//! | `tool_arguments` | string | a call's arguments as JSON (a piece of them on a delta) |
//! | `tool_status` | string | |
//! | `model` | string | the model of the model call the event belongs to |
//! | `input_tokens`, `output_tokens`, `cache_tokens` | int64 | a finished model call's usage (input counts every kind; cache is what was read from the cache) |
//! | `cost_usd` | double | that call's cost |
//! | `status` | string | a run's end status, a call's finish class or purpose, a decision, a queued prompt's kind |
//! | `error_code` | string | a warning's code |
//!
//! Usage is on `ChatProviderCallFinished` rows only, so `sum(cost_usd)` is the cost of what
//! was summed over, with nothing counted twice.

mod columns;
mod partitions;
mod row;

pub use columns::EventFile;
pub use partitions::{DayPartitions, utc_day};
pub use row::{EventRow, RowMaker};

use std::path::PathBuf;

/// Why a Parquet export failed.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error(transparent)]
    Format(#[from] parquet::errors::ParquetError),
    #[error("writing the Parquet file failed")]
    Io(#[source] std::io::Error),
    #[error("{}", .0.display())]
    Path(PathBuf, #[source] std::io::Error),
    #[error(
        "{} is not empty: an export by day writes into a new or empty directory",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("the file's schema has fewer columns than its rows")]
    Schema,
}
