//! Durable stores for reel sessions. [`SqliteStore`] implements the engine's
//! [`reel_engine::LogStore`] over one SQLite file (schema in `migrations/sqlite`).

mod lease;
mod sqlite;

pub use sqlite::SqliteStore;
