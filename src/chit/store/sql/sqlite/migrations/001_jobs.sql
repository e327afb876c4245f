-- Times are UTC text, 'YYYY-MM-DDTHH:MM:SS.sssZ', so they sort and compare as strings
-- and read plainly in a SQL shell.

CREATE TABLE chit_jobs (
    id               TEXT PRIMARY KEY,  -- time-ordered: inserts append to the index
    kind             TEXT NOT NULL,
    queue            TEXT NOT NULL DEFAULT 'default',
    priority         INTEGER NOT NULL DEFAULT 0,  -- smaller runs first
    payload          TEXT NOT NULL,  -- JSON
    tenant           TEXT NOT NULL DEFAULT '',
    idempotency_key  TEXT,
    request_hash     TEXT,
    state            TEXT NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    attempts         INTEGER NOT NULL DEFAULT 0,  -- counted at claim
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    run_at           TEXT NOT NULL,
    lease_expires_at TEXT,
    lease_token      TEXT,
    worker           TEXT,
    progress_done    INTEGER,
    progress_total   INTEGER,
    checkpoint       TEXT,  -- JSON
    result           TEXT,  -- JSON, when small; large results live in chit_results
    result_external  INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT,
    CHECK (state <> 'running' OR (lease_expires_at IS NOT NULL AND lease_token IS NOT NULL)),
    CHECK (state <> 'failed' OR error IS NOT NULL)
);

-- Claim walks this in order and stops at LIMIT: cost does not grow with finished rows.
CREATE INDEX chit_jobs_claimable ON chit_jobs (queue, priority, run_at, id)
    WHERE state = 'queued';
-- Rescue of expired leases.
CREATE INDEX chit_jobs_leases ON chit_jobs (lease_expires_at) WHERE state = 'running';
CREATE UNIQUE INDEX chit_jobs_idempotency ON chit_jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Listing newest first, by state or kind.
CREATE INDEX chit_jobs_state_id ON chit_jobs (state, id);
CREATE INDEX chit_jobs_kind_id ON chit_jobs (kind, id);
-- Pruning, and "failed in the last hour".
CREATE INDEX chit_jobs_finished ON chit_jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE chit_attempts (
    job_id      TEXT NOT NULL REFERENCES chit_jobs (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    worker      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    outcome     TEXT CHECK (outcome IN
                    ('succeeded', 'retried', 'failed', 'lease_expired', 'released', 'cancelled')),
    error       TEXT
);
-- Not unique on (job_id, attempt): a released attempt is not counted, and a
-- replayed job starts again at attempt 1; history keeps every claim.
CREATE INDEX chit_attempts_job ON chit_attempts (job_id);
-- At most one open attempt per job, as at most one worker holds it.
CREATE UNIQUE INDEX chit_attempts_open ON chit_attempts (job_id) WHERE finished_at IS NULL;

CREATE TABLE chit_results (
    job_id TEXT PRIMARY KEY REFERENCES chit_jobs (id) ON DELETE CASCADE,
    result TEXT NOT NULL
) WITHOUT ROWID;
