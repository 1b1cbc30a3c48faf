//! A PostgreSQL schema of one test's own: created empty, used through a DSN whose connections
//! put it first on their `search_path`, and dropped (with everything reel stored in it) when the
//! test is done, so test runs leave nothing behind on the server.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{Connection, PgConnection};

/// A schema made for one test; dropped with this value.
pub struct PgSchema {
    /// The server's DSN.
    server: String,
    pub name: String,
    /// A DSN whose connections work in the schema: reel's tables are made there.
    pub dsn: String,
}

impl PgSchema {
    /// A new empty schema on `server`.
    pub fn create(server: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "reel_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        execute(
            server,
            format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"),
        );
        let separator = if server.contains('?') { '&' } else { '?' };
        let dsn = format!("{server}{separator}options=-csearch_path%3D{name}");
        Self {
            server: server.to_owned(),
            name,
            dsn,
        }
    }
}

impl PgSchema {
    /// Runs `sql` in this schema, as another program on the database would.
    pub fn execute(&self, sql: &str) {
        execute(&self.dsn, sql.to_owned());
    }
}

impl std::ops::Deref for PgSchema {
    type Target = str;

    fn deref(&self) -> &str {
        &self.dsn
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        execute(
            &self.server,
            format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        );
    }
}

/// Runs `sql` on `server`, on a thread of its own (a test may be inside a runtime already).
fn execute(server: &str, sql: String) {
    let server = server.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut conn = PgConnection::connect(&server)
                .await
                .expect("connect to PostgreSQL");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await
                .expect("the schema statement runs");
        });
    })
    .join()
    .expect("the schema thread ends");
}
