//! `--sink nats://HOST:PORT/STREAM`: a session's log in a NATS JetStream stream, a durable sink
//! like the databases (a run's `done` waits for JetStream's acknowledgements).
//!
//! Each event is published to `PREFIX.SESSION.events` (prefix `reel` by default) as the JSON of
//! its `backendEvent` frame (or its protobuf `LogEntry` bytes with `?encoding=proto`), with
//! `Nats-Msg-Id: SESSION:ORDINAL`, so JetStream's duplicate window drops an event published
//! twice. When the sink starts it asks the stream for the session's last event and publishes
//! what the session's store holds after it, so a crash between a commit and its publication
//! neither loses nor repeats an event. The stream is created when missing.
//!
//! [`JetStreamLog`] reads a session's log back from the stream, following it as it grows
//! (`reel tail --from nats://...`).

mod connection;
mod log;
mod sink;
mod target;

pub use connection::NatsError;
pub use log::JetStreamLog;
pub use sink::JetStreamSink;
pub use target::{Encoding, NatsTarget, UriError};
