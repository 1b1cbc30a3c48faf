//! Durable stores for reel sessions: the engine's [`reel_engine::LogStore`] over SQLite
//! ([`SqliteStore`], one file) and PostgreSQL ([`PostgresStore`], shared by many processes and
//! machines). [`open_timeline`] picks one from a path or a DSN.

mod lease;
mod postgres;
mod postgres_catalog;
mod rows;
mod sqlite;
mod sqlite_catalog;
mod timeline_store;

pub use postgres::{NOTIFY_CHANNEL, PostgresStore};
pub use sqlite::SqliteStore;
pub use timeline_store::{TimelineStore, open_timeline};
