//! This `reel serve` as a node of a scale-out (`--public-url`): registered in the database
//! beside the server process its session locks are held on, so that other nodes forward the
//! requests for its sessions here; renewed by a heartbeat until it stops.

use std::sync::Arc;

use anyhow::Context;

use crate::hosting::CommandSessions;

/// This process as a node of a scale-out: registered with its public URL, renewed by a
/// heartbeat until the server stops.
pub(super) struct Node {
    id: String,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Node {
    pub(super) async fn register(
        sessions: &Arc<CommandSessions>,
        url: &str,
    ) -> anyhow::Result<Self> {
        let id = reel_engine::new_id();
        sessions
            .store()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .register_node(&id, url)
            .await
            .context("--public-url: cannot register this node")?;
        tracing::info!("reel serve: node {id}, reached at {url}");
        let (renewing, url, sessions) = (id.clone(), url.to_owned(), Arc::clone(sessions));
        // Renewed until the node unregisters, through the grace period of a stop too (its
        // sessions are still forwarded to it while their runs end), on whichever writing
        // connection the server has: the server process of a new one holds its locks.
        let heartbeat = tokio::spawn(async move {
            let mut every = tokio::time::interval(reel_storage::LEASE_HEARTBEAT);
            loop {
                every.tick().await;
                let renewed = match sessions.store().await {
                    Ok(mut store) => store
                        .register_node(&renewing, &url)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(error) => Err(error.to_string()),
                };
                if let Err(error) = renewed {
                    tracing::warn!("node {renewing}: its heartbeat failed: {error}");
                }
            }
        });
        Ok(Self { id, heartbeat })
    }

    pub(super) async fn unregister(self, sessions: &CommandSessions) {
        self.heartbeat.abort();
        let unregistered = match sessions.store().await {
            Ok(mut store) => store
                .unregister_node(&self.id)
                .await
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = unregistered {
            tracing::warn!("node {}: cannot unregister: {error}", self.id);
        }
    }
}
