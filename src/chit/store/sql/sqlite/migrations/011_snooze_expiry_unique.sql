-- Snooze, expiry and unique jobs (DESIGN.md "Time").
--
-- expires_at: a job not started by then ends cancelled, "expired before it
-- started" (NULL: never). Claims skip such jobs; the maintenance pass
-- (expire_jobs) cancels them, reading only the jobs that have an expiry and
-- have not started.
ALTER TABLE chit_jobs ADD COLUMN expires_at TEXT;
CREATE INDEX chit_jobs_expiry ON chit_jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('waiting', 'queued');

-- unique_key: at most one job per key and tenant among the active states; the
-- key is free again once that job has finished (unlike an idempotency key).
ALTER TABLE chit_jobs ADD COLUMN unique_key TEXT;
CREATE UNIQUE INDEX chit_jobs_unique ON chit_jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('waiting', 'queued', 'running');
-- Every job with a unique key, finished ones too: a replay puts back at most
-- one per key (the query block `unique_free`).
CREATE INDEX chit_jobs_unique_key ON chit_jobs (tenant, unique_key, id)
    WHERE unique_key IS NOT NULL;

-- The new attempt outcome, 'snoozed' (chit.Snooze): the CHECK's text widened as
-- migration 009 widened the state's (a rebuild would cascade-delete the
-- attempts), last, after the CREATE INDEX above moved the schema cookie.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, '''released'', ''cancelled'')', '''released'', ''cancelled'', ''snoozed'')')
WHERE type = 'table' AND name = 'chit_attempts';
PRAGMA writable_schema = RESET;
