-- The turns database: after each run, the model context the next run starts from.
-- (One schema serves both roles, so that one PostgreSQL database can hold both.)
CREATE TABLE turns (
    session_id   TEXT    NOT NULL,
    run_id       TEXT    NOT NULL,
    -- finished, stopped or failed
    status       TEXT    NOT NULL,
    -- The last ordinal of the run, and how many model calls the session had made by then.
    last_ordinal INTEGER NOT NULL,
    model_calls  INTEGER NOT NULL,
    -- The conversation as JSON: [{"role": "user", "text": ..., "tool_calls": [...], "tool_call_id": ...}, ...]
    context_json TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, run_id)
) WITHOUT ROWID;

CREATE INDEX turns_by_session ON turns (session_id, last_ordinal);
