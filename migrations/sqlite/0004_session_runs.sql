-- What `reel sessions` lists without reading logs: how many runs a session has had and how its
-- newest one ended (finished, stopped, failed, or running). Kept up to date by every commit;
-- sessions stored before this migration are counted from their logs once, here.
ALTER TABLE sessions ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN last_run_status TEXT NOT NULL DEFAULT '';

UPDATE sessions SET
    runs = (SELECT count(*) FROM events e
            WHERE e.session_id = sessions.session_id AND e.name = 'ChatRunStarted'),
    last_run_status = coalesce((
        SELECT CASE e.name
            WHEN 'ChatRunStarted' THEN 'running'
            WHEN 'ChatRunFinished' THEN 'finished'
            WHEN 'ChatRunStopped' THEN 'stopped'
            ELSE 'failed' END
        FROM events e
        WHERE e.session_id = sessions.session_id
          AND e.name IN ('ChatRunStarted', 'ChatRunFinished', 'ChatRunStopped', 'ChatRunFailed')
        ORDER BY e.ordinal DESC LIMIT 1), '');

CREATE INDEX sessions_by_update ON sessions (updated_at DESC);
