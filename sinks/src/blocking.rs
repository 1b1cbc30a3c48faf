//! Sinks that write with plain `std::io::Write` (stdout, files) do it on a blocking thread, so a
//! slow reader blocks that thread and, through the bounded queue, the session: never the async
//! runtime.

use std::io;

use reel_engine::SinkError;

/// Runs a sink's writing loop on a blocking thread; a panic in it is the sink's failure.
pub async fn write_blocking<E>(
    write: impl FnOnce() -> Result<(), E> + Send + 'static,
) -> Result<(), SinkError>
where
    E: Into<SinkError> + Send + 'static,
{
    tokio::task::spawn_blocking(write)
        .await
        .map_err(|join| SinkError::Io(io::Error::other(join.to_string())))?
        .map_err(Into::into)
}
