//! reel's wire vocabulary.
//!
//! * [`rpc`]: `reel.rpc.v1`, the frames reel writes (`RpcLine`) and the requests it reads
//!   (`RpcRequestLine`);
//! * [`chat`]: `reel.chat.v1`, the payloads of log events, ui events and timeline entities;
//! * [`Any`]: a `google.protobuf.Any` that holds a typed `reel.chat.v1` message, so payloads are
//!   never decoded twice;
//! * [`json`]: the canonical proto3 JSON mapping, written one frame per line.
//!
//! Types are generated at build time by prost from `proto/`; their serde impls (camelCase,
//! unset fields omitted, 64-bit integers as strings, enums by name) by pbjson.

mod any;
pub mod json;

pub use any::{Any, TYPE_URL_PREFIX};

/// `reel.rpc.v1`: frames and requests.
pub mod rpc {
    include!(concat!(env!("OUT_DIR"), "/reel.rpc.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/reel.rpc.v1.serde.rs"));

    /// The protocol name announced in hello.
    pub const PROTOCOL: &str = "reel.rpc.v1";
    /// The `RpcLine.version` reel writes and accepts.
    pub const PROTOCOL_VERSION: u32 = 1;
}

/// `reel.chat.v1`: payloads and entities.
pub mod chat {
    include!(concat!(env!("OUT_DIR"), "/reel.chat.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/reel.chat.v1.serde.rs"));
}
