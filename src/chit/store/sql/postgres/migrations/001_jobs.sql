-- Times are timestamptz from the database clock; JSON is jsonb.

CREATE TABLE chit_jobs (
    id               text PRIMARY KEY,  -- time-ordered: inserts append to the index
    kind             text NOT NULL,
    queue            text NOT NULL DEFAULT 'default',
    priority         integer NOT NULL DEFAULT 0,  -- smaller runs first
    payload          jsonb NOT NULL,
    tenant           text NOT NULL DEFAULT '',
    idempotency_key  text,
    request_hash     text,
    state            text NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0,  -- counted at claim
    max_attempts     integer NOT NULL CHECK (max_attempts > 0),
    run_at           timestamptz NOT NULL,
    lease_expires_at timestamptz,
    lease_token      text,
    worker           text,
    progress_done    bigint,
    progress_total   bigint,
    checkpoint       jsonb,
    result           jsonb,  -- when small; large results live in chit_results
    result_external  boolean NOT NULL DEFAULT false,
    error            text,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
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
    job_id      text NOT NULL REFERENCES chit_jobs (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    worker      text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text CHECK (outcome IN
                    ('succeeded', 'retried', 'failed', 'lease_expired', 'released', 'cancelled')),
    error       text,
    -- History order: a job's attempts sort by this, as SQLite's by rowid.
    seq         bigint GENERATED ALWAYS AS IDENTITY
);
-- Not unique on (job_id, attempt): a released attempt is not counted, and a
-- replayed job starts again at attempt 1; history keeps every claim.
CREATE INDEX chit_attempts_job ON chit_attempts (job_id, seq);
-- At most one open attempt per job, as at most one worker holds it.
CREATE UNIQUE INDEX chit_attempts_open ON chit_attempts (job_id) WHERE finished_at IS NULL;

CREATE TABLE chit_results (
    job_id text PRIMARY KEY REFERENCES chit_jobs (id) ON DELETE CASCADE,
    result jsonb NOT NULL
);

-- Wake idle workers: every statement that leaves jobs `queued` (enqueue, retry
-- backoff, release, rescue, replay) notifies channel `chit_jobs` once per queue,
-- with the queue name as payload. NOTIFY is transactional, so it is delivered on
-- commit and never for a rolled-back change; a trigger rather than a pg_notify in
-- each query costs no extra round trip and cannot be forgotten by a new query.
CREATE FUNCTION chit_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chit_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM chit_changed WHERE state = 'queued') AS q;
    RETURN NULL;
END
$$;

-- One trigger per event: PostgreSQL allows transition tables only on single-event triggers.
CREATE TRIGGER chit_jobs_notify_insert AFTER INSERT ON chit_jobs
    REFERENCING NEW TABLE AS chit_changed
    FOR EACH STATEMENT EXECUTE FUNCTION chit_notify_queued();
CREATE TRIGGER chit_jobs_notify_update AFTER UPDATE ON chit_jobs
    REFERENCING NEW TABLE AS chit_changed
    FOR EACH STATEMENT EXECUTE FUNCTION chit_notify_queued();
