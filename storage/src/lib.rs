//! Durable stores for reel sessions. The SQLite and PostgreSQL stores of the event log, the
//! timeline and the turns come with the persistence issue; until then this crate is empty on
//! purpose, so the dependency arrows (cli -> sinks -> storage -> engine -> proto) already hold.
