-- Sessions `reel prune` (or `reel serve --retain`) removed for their age, and when: a reader
-- asking for one is told it is gone (HTTP 410), not that it never existed (404).
CREATE TABLE pruned_sessions (
    session_id TEXT   NOT NULL PRIMARY KEY,
    -- Milliseconds since the Unix epoch.
    pruned_at  BIGINT NOT NULL
);
