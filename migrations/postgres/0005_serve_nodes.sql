-- The `reel serve` processes sharing this database (scale-out): where each is reached, and the
-- server process of the connection its sessions' locks are held on, so that a request for a
-- session locked elsewhere can be forwarded to the node writing it. Rows are kept fresh by a
-- heartbeat; a row whose heartbeat stopped is ignored and replaced when the node comes back.
CREATE TABLE serve_nodes (
    node_id TEXT PRIMARY KEY,
    public_url TEXT NOT NULL,
    backend_pid INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);

CREATE INDEX serve_nodes_by_backend ON serve_nodes (backend_pid);
