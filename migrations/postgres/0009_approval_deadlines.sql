-- When each call waiting for a person is decided `expired` if nobody decides first (its tool's
-- approval_timeout): `reel serve` reads the deadlines that have passed instead of every waiting
-- session with its calls. Kept by every commit beside `pending_approvals`: a question with a
-- timeout writes its call's deadline, a decision removes it, a run's end removes the session's.
CREATE TABLE approval_deadlines (
    session_id   TEXT   NOT NULL,
    tool_call_id TEXT   NOT NULL,
    -- Milliseconds since the Unix epoch.
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);

CREATE INDEX approval_deadlines_due ON approval_deadlines (expires_at);

-- The deadlines of the calls waiting now, from their stored entities (a payload that does not
-- parse has none: see search_payload, migration 0008).
INSERT INTO approval_deadlines (session_id, tool_call_id, expires_at)
SELECT session_id, call_id, expires_at FROM (
    SELECT e.session_id,
        p.payload ->> 'toolCallId' AS call_id,
        p.payload ->> 'status' AS status,
        CASE WHEN (p.payload ->> 'approvalExpiresAtMs') ~ '^[0-9]{1,18}$'
            THEN (p.payload ->> 'approvalExpiresAtMs')::bigint ELSE 0 END AS expires_at
    FROM entities e
    JOIN sessions s ON s.session_id = e.session_id
    CROSS JOIN LATERAL (SELECT search_payload(e.payload_json) AS payload) p
    WHERE s.pending_approvals > 0 AND e.kind = 'ChatToolCall' AND NOT e.tombstone
        AND e.payload_json LIKE '%awaiting_approval%'
) waiting
WHERE status = 'awaiting_approval' AND call_id IS NOT NULL AND expires_at > 0
ON CONFLICT (session_id, tool_call_id) DO NOTHING;
