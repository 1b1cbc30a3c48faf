-- A lease's owner renews this every few seconds while it writes the session. A lease of
-- another host (another container on the same volume, say) whose heartbeat has stopped for
-- longer than reel's expiry is free; 0 (leases written before this column) counts as stopped.
ALTER TABLE leases ADD COLUMN heartbeat_at INTEGER NOT NULL DEFAULT 0;
