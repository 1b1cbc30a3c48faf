-- How many tool calls of a session's open run wait for a person's decision (the inbox of
-- `reel serve`: GET /v1/sessions?waiting=true). Kept up to date by every commit: +1 for each
-- ChatToolApprovalRequested, -1 for each decision, 0 again when a run ends. Sessions stored
-- before this migration wait for nobody: their waiting calls were ended with their process.
ALTER TABLE sessions ADD COLUMN pending_approvals INTEGER NOT NULL DEFAULT 0;

CREATE INDEX sessions_waiting ON sessions (updated_at DESC) WHERE pending_approvals > 0;
