-- When each call waiting for a person is decided `expired` if nobody decides first (its tool's
-- approval_timeout): `reel serve` reads the deadlines that have passed instead of every waiting
-- session with its calls. Kept by every commit beside `pending_approvals`: a question with a
-- timeout writes its call's deadline, a decision removes it, a run's end removes the session's.
CREATE TABLE approval_deadlines (
    session_id   TEXT    NOT NULL,
    tool_call_id TEXT    NOT NULL,
    -- Milliseconds since the Unix epoch.
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
) WITHOUT ROWID;

CREATE INDEX approval_deadlines_due ON approval_deadlines (expires_at);

-- The deadlines of the calls waiting now, from their stored entities (a payload that is not
-- JSON has none).
INSERT INTO approval_deadlines (session_id, tool_call_id, expires_at)
SELECT session_id, call_id, expires_at FROM (
    SELECT e.session_id,
        json_extract(e.payload_json, '$.toolCallId') AS call_id,
        json_extract(e.payload_json, '$.status') AS status,
        CAST(json_extract(e.payload_json, '$.approvalExpiresAtMs') AS INTEGER) AS expires_at
    FROM entities e JOIN sessions s ON s.session_id = e.session_id
    WHERE s.pending_approvals > 0 AND e.kind = 'ChatToolCall' AND NOT e.tombstone
        AND e.payload_json LIKE '%awaiting_approval%' AND json_valid(e.payload_json)
)
WHERE status = 'awaiting_approval' AND call_id IS NOT NULL AND expires_at > 0
ON CONFLICT (session_id, tool_call_id) DO NOTHING;
