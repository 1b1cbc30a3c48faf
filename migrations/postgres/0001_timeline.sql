-- The timeline database on PostgreSQL: the same tables as on SQLite (see migrations/sqlite).
-- Times are milliseconds since the Unix epoch. payload_json holds the canonical protobuf JSON
-- text byte for byte (cast it to jsonb to query it).

CREATE TABLE sessions (
    session_id       TEXT   NOT NULL PRIMARY KEY,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    last_ordinal     BIGINT NOT NULL DEFAULT 0,
    entities_ordinal BIGINT NOT NULL DEFAULT 0,
    title            TEXT   NOT NULL DEFAULT ''
);

CREATE TABLE events (
    session_id   TEXT   NOT NULL,
    ordinal      BIGINT NOT NULL,
    name         TEXT   NOT NULL,
    payload_json TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (session_id, ordinal)
);

CREATE TABLE entities (
    session_id         TEXT    NOT NULL,
    entity_id          TEXT    NOT NULL,
    kind               TEXT    NOT NULL,
    created_ordinal    BIGINT  NOT NULL,
    last_event_ordinal BIGINT  NOT NULL,
    tombstone          BOOLEAN NOT NULL DEFAULT FALSE,
    payload_json       TEXT    NOT NULL,
    PRIMARY KEY (session_id, entity_id)
);

CREATE TABLE snapshots (
    session_id TEXT   NOT NULL,
    ordinal    BIGINT NOT NULL,
    state_json TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, ordinal)
);
