//! The turns table: the model context after each run. The SQL is the same on SQLite and
//! PostgreSQL (both take `$N` placeholders), so one implementation serves both stores.

use std::sync::Arc;

use reel_engine::{ContextMessage, StoreError, Turn, TurnStore};
use sqlx::Row;

use crate::{
    PostgresStore, SqliteStore,
    rows::{context_from, context_json, now_ms, run_status, to_i64, usage_columns, usage_from},
};

/// Stores a turn, replacing the run's earlier one.
const SAVE: &str = "INSERT INTO turns (session_id, run_id, status, last_ordinal, model_calls, context_json, created_at, \
     input_tokens, output_tokens, cached_tokens, cost_usd, \
     session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) ON CONFLICT (session_id, run_id) DO UPDATE SET status = excluded.status, \
     last_ordinal = excluded.last_ordinal, model_calls = excluded.model_calls, context_json = excluded.context_json, \
     input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens, \
     cached_tokens = excluded.cached_tokens, cost_usd = excluded.cost_usd, \
     session_input_tokens = excluded.session_input_tokens, session_output_tokens = excluded.session_output_tokens, \
     session_cached_tokens = excluded.session_cached_tokens, session_cost_usd = excluded.session_cost_usd";

/// The session's newest turn.
const LATEST: &str = "SELECT run_id, status, last_ordinal, model_calls, context_json, \
     input_tokens, output_tokens, cached_tokens, cost_usd, \
     session_input_tokens, session_output_tokens, session_cached_tokens, session_cost_usd \
     FROM turns WHERE session_id = $1 ORDER BY last_ordinal DESC LIMIT 1";

/// A stored turn's context, rewritten (`reel redact`), found by the run's last ordinal.
pub(crate) const UPDATE_CONTEXT: &str =
    "UPDATE turns SET context_json = $3 WHERE session_id = $1 AND last_ordinal = $2";

/// The last ordinals of the session's stored turns.
const TURN_ENDS: &str =
    "SELECT last_ordinal FROM turns WHERE session_id = $1 ORDER BY last_ordinal";

/// The `TurnStore` of a store with a `conn` and an `error` method, on either backend.
macro_rules! turn_store {
    ($store:ty) => {
        impl $store {
            /// The last ordinals of the session's stored turns.
            pub async fn turn_ends(&mut self, session_id: &str) -> Result<Vec<u64>, StoreError> {
                let rows = sqlx::query(TURN_ENDS)
                    .bind(session_id)
                    .fetch_all(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(rows.iter().map(|row| row.get::<i64, _>(0) as u64).collect())
            }

            /// Replaces the contexts of the session's stored turns, by their last ordinals, in
            /// one transaction (a turn not stored is left out).
            pub async fn rewrite_turns(
                &mut self,
                session_id: &str,
                turns: &[(u64, Vec<Arc<ContextMessage>>)],
            ) -> Result<(), StoreError> {
                let mut conn = self.conn.lock().await;
                let mut tx = sqlx::Connection::begin(&mut *conn)
                    .await
                    .map_err(|e| self.error(e))?;
                for (last_ordinal, context) in turns {
                    sqlx::query(UPDATE_CONTEXT)
                        .bind(session_id)
                        .bind(to_i64(*last_ordinal))
                        .bind(context_json(context)?)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| self.error(e))?;
                }
                tx.commit().await.map_err(|e| self.error(e))
            }
        }

        #[async_trait::async_trait]
        impl TurnStore for $store {
            async fn save_turn(&mut self, turn: &Turn) -> Result<(), StoreError> {
                let (input, output, cached, cost) = usage_columns(&turn.usage);
                let (s_input, s_output, s_cached, s_cost) = usage_columns(&turn.session_usage);
                sqlx::query(SAVE)
                    .bind(&turn.session_id)
                    .bind(&turn.run_id)
                    .bind(turn.status.as_str())
                    .bind(to_i64(turn.last_ordinal))
                    .bind(to_i64(turn.model_calls))
                    .bind(context_json(&turn.context)?)
                    .bind(now_ms())
                    .bind(input)
                    .bind(output)
                    .bind(cached)
                    .bind(cost)
                    .bind(s_input)
                    .bind(s_output)
                    .bind(s_cached)
                    .bind(s_cost)
                    .execute(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                Ok(())
            }

            async fn latest_turn(&mut self, session_id: &str) -> Result<Option<Turn>, StoreError> {
                let row = sqlx::query(LATEST)
                    .bind(session_id)
                    .fetch_optional(&mut *self.conn.lock().await)
                    .await
                    .map_err(|e| self.error(e))?;
                row.map(|row| {
                    let run_id: String = row.get(0);
                    Ok(Turn {
                        session_id: session_id.to_owned(),
                        context: context_from(session_id, &run_id, row.get(4))?,
                        status: run_status(session_id, &run_id, row.get(1))?,
                        last_ordinal: row.get::<i64, _>(2) as u64,
                        model_calls: row.get::<i64, _>(3) as u64,
                        usage: usage_from(row.get(5), row.get(6), row.get(7), row.get(8)),
                        session_usage: usage_from(
                            row.get(9),
                            row.get(10),
                            row.get(11),
                            row.get(12),
                        ),
                        run_id,
                    })
                })
                .transpose()
            }
        }
    };
}

turn_store!(SqliteStore);
turn_store!(PostgresStore);
