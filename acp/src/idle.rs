//! Unloading the sessions nobody uses, as `reel serve` does: a session without a running
//! prompt that has not been used for the idle timeout is closed (its writer flushes and
//! releases its lease, its MCP servers stop), and so is the least recently used one when more
//! than [`MAX_LOADED`] are loaded. Its next prompt loads it again from the log, with the
//! editor's MCP servers it was opened with; the editor sees nothing of this.
//!
//! Eviction and lookup take the same lock, and a lookup counts as a use: a session found for
//! a prompt is never evicted under it.

use std::{collections::HashMap, sync::Arc, time::Duration};

use agent_client_protocol::v1::schema::McpServer;
use tokio_util::sync::CancellationToken;

use crate::loaded::Loaded;

/// Sessions loaded at once at most; an editor works in a few.
pub const MAX_LOADED: usize = 64;

/// A session this connection loaded and unloaded: what reopening it needs.
pub struct Unloaded {
    pub servers: Vec<McpServer>,
    /// Cancelled once its last writer has ended: it is reopened after that.
    pub ended: CancellationToken,
}

/// The loaded sessions and the unloaded ones that may come back.
#[derive(Default)]
pub struct Sessions {
    pub loaded: HashMap<String, Arc<Loaded>>,
    pub unloaded: HashMap<String, Unloaded>,
}

impl Sessions {
    /// Loaded session `id`, marked as used.
    pub fn use_loaded(&self, id: &str) -> Option<Arc<Loaded>> {
        let loaded = self.loaded.get(id)?;
        loaded.touch();
        Some(Arc::clone(loaded))
    }

    /// Unloads the sessions idle for `timeout`, then the least recently used idle ones over
    /// [`MAX_LOADED`].
    pub fn evict(&mut self, timeout: Duration) {
        let mut idle: Vec<(Duration, String)> = self
            .loaded
            .iter()
            .filter_map(|(id, loaded)| Some((loaded.idle_for()?, id.clone())))
            .collect();
        idle.sort();
        let over = self.loaded.len().saturating_sub(MAX_LOADED);
        let oldest_first = idle.into_iter().rev().enumerate();
        for (at, (idle_for, id)) in oldest_first {
            if idle_for >= timeout || at < over {
                self.unload(&id);
            }
        }
    }

    /// Unloads session `id`; `None` when it was not loaded.
    pub fn unload(&mut self, id: &str) -> Option<()> {
        let loaded = self.loaded.remove(id)?;
        loaded.close();
        tracing::debug!("acp: session {id} unloaded");
        let unloaded = Unloaded {
            servers: loaded.servers.clone(),
            ended: loaded.ended.clone(),
        };
        self.unloaded.insert(id.to_owned(), unloaded);
        Some(())
    }
}

/// How often the idle sessions are looked for.
pub fn sweep_interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(30))
}
