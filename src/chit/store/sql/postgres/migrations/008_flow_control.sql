-- Flow control (DESIGN.md): limits per kind and per concurrency key, pauses.
-- Constant defaults: adding the columns rewrites no table.

-- The key a kind's key_concurrency and key_rate bound ('' for none).
ALTER TABLE chit_jobs ADD COLUMN concurrency_key text NOT NULL DEFAULT '';
-- Who started when, by kind and key, for rate windows: without them a rate
-- count would join every attempt of the window to its job.
ALTER TABLE chit_attempts ADD COLUMN kind text NOT NULL DEFAULT '';
ALTER TABLE chit_attempts ADD COLUMN concurrency_key text NOT NULL DEFAULT '';

-- The groups a fair claim takes in turn, and each group's jobs in claim order:
-- a loose scan finds the groups, a paused or full kind is stepped over in one seek.
CREATE INDEX chit_jobs_groups ON chit_jobs
    (queue, kind, tenant, concurrency_key, priority, run_at, id) WHERE state = 'queued';
-- Running jobs per kind (and key) are counted on chit_jobs_state_kind, which
-- every claim and outcome writes already: one more index there cost a worker
-- on SQLite a fifth of its jobs a second.
-- Starts per kind (and key) within a rate window.
CREATE INDEX chit_attempts_starts ON chit_attempts (kind, started_at);
CREATE INDEX chit_attempts_key_starts ON chit_attempts (kind, concurrency_key, started_at)
    WHERE concurrency_key <> '';

-- A kind's limits: one row the code declares (a worker, when it starts) and one
-- an operator sets, which wins field by field until cleared. NULL: no limit.
CREATE TABLE chit_limits (
    kind             text NOT NULL,
    source           text NOT NULL CHECK (source IN ('code', 'operator')),
    concurrency      integer,
    rate             integer,
    rate_seconds     double precision,
    key_concurrency  integer,
    key_rate         integer,
    key_rate_seconds double precision,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, source)
);

-- A paused queue or kind: claims take none of its jobs.
CREATE TABLE chit_pauses (
    scope     text NOT NULL CHECK (scope IN ('queue', 'kind')),
    name      text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);
