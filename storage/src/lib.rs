//! Durable stores for reel sessions: the engine's [`reel_engine::LogStore`] over SQLite
//! ([`SqliteStore`], one file) and PostgreSQL ([`PostgresStore`], shared by many processes and
//! machines). [`open_timeline`] opens one from a [`Location`] (a path or a DSN) for reading or
//! writing; a database that is not reel's is refused untouched.

mod event_pages;
mod lease;
mod location;
mod postgres;
mod postgres_commit;
mod postgres_nodes;
mod postgres_notices;
mod postgres_search_docs;
#[cfg(test)]
mod postgres_search_docs_tests;
mod redaction;
mod retention;
mod rows;
mod schema;
mod search;
#[cfg(test)]
mod search_tests;
mod shared_connection;
mod simple_tsvector;
mod sql_store;
#[cfg(test)]
mod sql_store_tests;
mod sqlite;
mod sqlite_commit;
mod sqlite_file;
mod sqlite_heartbeat;
mod sqlite_lease;
mod timeline_store;
mod turns;

pub use lease::{EXPIRY as LEASE_EXPIRY, HEARTBEAT as LEASE_HEARTBEAT};
pub use location::{Access, Location, without_password};
pub use postgres::PostgresStore;
pub use redaction::{Erased, Erasure, Redacted};
pub use retention::{Pruned, prune};
pub use sqlite::SqliteStore;
pub use timeline_store::{TimelineStore, open_timeline};
