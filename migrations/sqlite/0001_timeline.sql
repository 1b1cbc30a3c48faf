-- The timeline database: a session's event log and what is projected from it.
-- Times are milliseconds since the Unix epoch.

-- One row per session.
CREATE TABLE sessions (
    session_id       TEXT    NOT NULL PRIMARY KEY,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    -- The newest ordinal stored in `events`.
    last_ordinal     INTEGER NOT NULL DEFAULT 0,
    -- The ordinal `entities` is as of (entities are materialized at the end of each run).
    entities_ordinal INTEGER NOT NULL DEFAULT 0,
    -- The first prompt.
    title            TEXT    NOT NULL DEFAULT ''
);

-- The log: the only source of truth. One row per event, ordinals 1, 2, 3, ... without gaps.
CREATE TABLE events (
    session_id   TEXT    NOT NULL,
    ordinal      INTEGER NOT NULL,
    -- The payload's message name, e.g. ChatTextDelta.
    name         TEXT    NOT NULL,
    -- The payload in the canonical protobuf JSON mapping, "@type" included.
    payload_json TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, ordinal)
) WITHOUT ROWID;

-- The timeline entities as of sessions.entities_ordinal.
CREATE TABLE entities (
    session_id         TEXT    NOT NULL,
    entity_id          TEXT    NOT NULL,
    -- ChatMessage, ChatToolCall or ChatToolResult.
    kind               TEXT    NOT NULL,
    created_ordinal    INTEGER NOT NULL,
    last_event_ordinal INTEGER NOT NULL,
    tombstone          INTEGER NOT NULL DEFAULT 0,
    payload_json       TEXT    NOT NULL,
    PRIMARY KEY (session_id, entity_id)
) WITHOUT ROWID;

-- Materialized snapshots of the projections' state, so that resuming replays only the events
-- after the newest one. The two newest are kept.
CREATE TABLE snapshots (
    session_id TEXT    NOT NULL,
    ordinal    INTEGER NOT NULL,
    state_json TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, ordinal)
) WITHOUT ROWID;

-- Who writes a session now: one writer per session.
CREATE TABLE leases (
    session_id  TEXT    NOT NULL PRIMARY KEY,
    -- host/pid/process start time of the owning process.
    owner       TEXT    NOT NULL,
    acquired_at INTEGER NOT NULL
);
