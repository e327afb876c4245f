-- PostgreSQL queries: the same names, in the same order, as sql/sqlite/queries.sql
-- (tests/store/test_queries.py lists the names only one backend has, and why).
--
-- The clock is `coalesce(%(now)s::timestamptz, now())`: the database's, unless a
-- test passes a time. now() is the transaction's start, stable for the whole
-- transaction, so one statement sees one instant, and it errs on the safe side:
-- a lease computed from it ends a little early, a rescue compared with it runs a
-- little late. A claim's started_at alone reads the clock as the statement runs
-- (`claim_due` says why). Lease and retry delays arrive as intervals.
--
-- Where SQLite needs two statements PostgreSQL does it in one with a
-- data-modifying CTE, so some SQLite names have no twin here:
--   has_due          not needed: a claim with SKIP LOCKED never waits on a lock
--   open_attempt     inside `claim`
--   close_attempt    inside `succeed`, `fail`, `release` and `mark_cancelled`
--   expire_attempts  inside `rescue_expired`
--   data_version     replaced by LISTEN (`listen`); the NOTIFY is sent by the
--                    trigger in migration 001 whenever a statement leaves jobs queued
-- Batches arrive as one jsonb array read with jsonb_to_recordset.
--
-- Lock order: statements that update several running jobs lock them in id order
-- first (the `locked` CTE of `lock_held`, `lock_jobs`), so a heartbeat and a batch
-- of outcomes from the same worker cannot deadlock; rescue and prune SKIP LOCKED
-- rows and never wait.
-- Statements on held jobs find them by primary key and lease token, with no
-- condition on the state: a token is set exactly while its job runs (a CHECK,
-- migration 006), and a condition on the state let the planner seek on an index
-- that starts with it, which also holds every lease taken since the last vacuum.

-- name: job_columns
-- A job as SQLStore._job reads it; queries.load puts it where a query says `{columns}`.
j.id, j.kind, j.queue, j.priority, j.payload, j.state, j.attempts, j.max_attempts,
j.run_at, j.created_at, j.updated_at, j.tenant, j.idempotency_key, j.lease_expires_at,
j.worker, j.progress_done, j.progress_total, j.progress_message, j.checkpoint, j.result,
j.result_external,
j.error, j.cancel_requested, j.started_at, j.finished_at, j.concurrency_key, j.timeout,
j.workflow_id, j.ref, j.run_on, j.depends_on, j.expires_at, j.unique_key, j.debounce_key,
j.wait_signal, j.wait_jobs, j.wait_until, j.cost,
j.state = 'running' AND j.lease_expires_at < now() AS stale

-- name: replay_reset
-- A failed or cancelled job made new (replay): queries.load puts it where a
-- replay query says so. History (attempt records) is kept.
state = CASE WHEN deps_pending > 0 THEN 'waiting' ELSE 'queued' END,
    attempts = 0, hand_backs = 0,
    run_at = now(),
    error = NULL, result = NULL, result_external = false, checkpoint = NULL,
    progress_done = NULL, progress_total = NULL, progress_message = NULL,
    cancel_requested = false,
    lease_token = NULL, lease_expires_at = NULL, finished_at = NULL, started_at = NULL,
    expires_at = NULL, debounce_key = NULL,
    wait_signal = NULL, wait_jobs = NULL, wait_until = NULL,
    updated_at = now()

-- name: unexpired
-- What a claim asks of a queued job's expiry (DESIGN.md "Time": a job not
-- started by then ends cancelled): none, not yet passed, or the job started
-- before (a retry or a snooze). queries.load puts it where a claim says so;
-- expire_jobs cancels the jobs it leaves behind.
(expires_at IS NULL OR started_at IS NOT NULL
 OR expires_at > coalesce(%(now)s::timestamptz, now()))

-- name: unique_free
-- Replay puts back at most one job per unique key (DESIGN.md "Time"): none
-- while another job holds the key, else only the newest of those that failed
-- or were cancelled. queries.load puts it where a replay says so.
(j.unique_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM chit_jobs AS u
    WHERE u.tenant = j.tenant AND u.unique_key = j.unique_key AND u.id <> j.id
      AND (u.state IN ('waiting', 'queued', 'running')
           OR (u.state IN ('failed', 'cancelled') AND u.id > j.id))))

-- name: migrations_table_exists
SELECT to_regclass('chit_schema_migrations') IS NOT NULL

-- name: schema_version
SELECT coalesce(max(version), 0) FROM chit_schema_migrations

-- name: migration_lock
-- Held until the migrating transaction ends: a second migrator waits, then finds
-- the work done. The key is arbitrary but fixed: 'chit' in ASCII.
SELECT pg_advisory_xact_lock(1667787124)

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS chit_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: record_migration
INSERT INTO chit_schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: enqueue
-- A whole batch in one statement. ORDER BY n: with two jobs sharing an
-- idempotency key in one batch, the first one is inserted. The queues of the
-- jobs it queued are notified (migration 024), once each.
WITH inserted AS (
INSERT INTO chit_jobs (
    id, kind, queue, priority, payload, tenant, idempotency_key, request_hash,
    max_attempts, run_at, created_at, updated_at, concurrency_key, timeout,
    state, workflow_id, ref, run_on, depends_on, dependents, deps_pending, error, finished_at,
    expires_at, unique_key, traceparent, debounce_key, debounce_until, cost
)
SELECT j.id, j.kind, j.queue, j.priority, j.payload, j.tenant, j.idempotency_key,
       j.request_hash, j.max_attempts,
       -- The debounce first, as on SQLite and Redis (the API never sends both).
       coalesce(coalesce(%(now)s::timestamptz, now()) + make_interval(secs => j.debounce),
                j.run_at,
                coalesce(%(now)s::timestamptz, now())),
       coalesce(%(now)s::timestamptz, now()),
       coalesce(%(now)s::timestamptz, now()),
       j.concurrency_key, j.timeout,
       -- A workflow's jobs carry these (store/graph.py); others leave them out.
       coalesce(j.state, 'queued'), j.workflow_id, j.ref, coalesce(j.run_on, 'succeeded'),
       j.depends_on, j.dependents, coalesce(j.deps_pending, 0), j.error,
       CASE WHEN j.state = 'cancelled' THEN coalesce(%(now)s::timestamptz, now()) END,
       coalesce(j.expires_at,
                coalesce(%(now)s::timestamptz, now()) + make_interval(secs => j.expires_in)),
       j.unique_key,
       j.traceparent,
       j.debounce_key,
       coalesce(%(now)s::timestamptz, now()) + make_interval(secs => j.debounce_max),
       j.cost
FROM jsonb_to_recordset(%(jobs)s::jsonb) AS j(
    n integer, id text, kind text, queue text, priority integer, payload jsonb, tenant text,
    idempotency_key text, request_hash text, max_attempts integer, run_at timestamptz,
    concurrency_key text, timeout double precision, state text, workflow_id text, ref text,
    run_on text, depends_on text[], dependents text[], deps_pending integer, error text,
    expires_at timestamptz, expires_in double precision, unique_key text,
    traceparent text, debounce_key text, debounce double precision,
    debounce_max double precision, cost bigint
)
ORDER BY j.n
-- Any key: the idempotency key (chit_jobs_idempotency), the unique key of an
-- active job (chit_jobs_unique) or the debounce key of one not started
-- (chit_jobs_debounce); the store then finds the job that holds it.
ON CONFLICT DO NOTHING
RETURNING id, created_at, queue, state
), woken AS (
    SELECT pg_notify('chit_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'queued') AS q
)
-- The subquery runs the notifications, which nothing else reads.
SELECT id, created_at FROM inserted WHERE (SELECT count(*) FROM woken) >= 0

-- name: clock
-- The database clock read once, for statements that must agree on the time:
-- before `enqueue_copy`, which takes values only, the time `enqueue` would use.
SELECT coalesce(%(now)s::timestamptz, now()) AS now

-- name: enqueue_copy
-- A large batch of jobs without idempotency keys, which nothing can conflict with:
-- binary COPY spares the server parsing a JSON document and the client building
-- one, and the server inserts while rows arrive (10,000 jobs: 370 ms to 200 ms on
-- a 2-core test machine, most of it updating this table's indexes).
COPY chit_jobs (
    id, kind, queue, priority, payload, tenant, max_attempts, run_at, created_at, updated_at,
    concurrency_key, timeout, expires_at, traceparent
) FROM STDIN (FORMAT BINARY)

-- name: enqueue_plain
-- One job that nothing can conflict with (no key, no workflow): its values as
-- parameters. The server neither reads a JSON document nor checks a conflict
-- (205 to 165 µs a statement on a 2-core test machine, commit excluded).
-- Parameters in order: id, kind, queue, priority, payload (JSON text), tenant,
-- max_attempts, run_at, concurrency_key, timeout, expires_at, expires_in,
-- traceparent, cost. Its queue is notified (migration 024).
WITH inserted AS (
INSERT INTO chit_jobs (
    id, kind, queue, priority, payload, tenant, max_attempts, run_at, concurrency_key,
    timeout, expires_at, traceparent, cost, created_at, updated_at
)
SELECT v.id, v.kind, v.queue, v.priority, v.payload, v.tenant, v.max_attempts,
       coalesce(v.run_at, now()), v.concurrency_key, v.timeout,
       coalesce(v.expires_at, now() + make_interval(secs => v.expires_in)),
       v.traceparent, v.cost, now(), now()
FROM (VALUES (
    %s::text, %s::text, %s::text, %s::integer, %s::jsonb, %s::text, %s::integer,
    %s::timestamptz, %s::text, %s::double precision, %s::timestamptz, %s::double precision,
    %s::text, %s::bigint
)) AS v(
    id, kind, queue, priority, payload, tenant, max_attempts, run_at, concurrency_key,
    timeout, expires_at, expires_in, traceparent, cost
)
RETURNING created_at, queue
)
SELECT created_at FROM inserted, pg_notify('chit_jobs', inserted.queue)

-- name: notify_queues
-- After `enqueue_copy`, in its transaction: wake the workers of the queues it
-- filled (an insert notifies in its own statement, migration 024).
SELECT pg_notify('chit_jobs', q) FROM unnest(%(queues)s::text[]) AS q

-- name: find_by_idempotency_key
-- The jobs holding the keys of the batch `enqueue` did not insert.
SELECT tenant, idempotency_key, id, request_hash FROM chit_jobs
WHERE (tenant, idempotency_key) IN (
    SELECT tenant, idempotency_key
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS j(tenant text, idempotency_key text)
)

-- name: find_by_unique_key
-- The active jobs holding the unique keys of the batch `enqueue` did not insert
-- (chit_jobs_unique).
SELECT tenant, unique_key, id FROM chit_jobs
WHERE (tenant, unique_key) IN (
    SELECT tenant, unique_key
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS j(tenant text, unique_key text)
) AND unique_key IS NOT NULL AND state IN ('waiting', 'queued', 'running')

-- name: debounce
-- The jobs of the batch `enqueue` did not insert for their debounce key: the
-- holder takes each one's payload and start (bounded by its debounce_until),
-- if it is of the same kind; its kind is returned either way, for the store
-- to refuse a key held by another kind. One item a key (the store sends the
-- last of each). A claim that took the holder first leaves nothing to update
-- (its state is re-read once the claim commits): the store inserts again.
UPDATE chit_jobs AS j
SET payload = CASE WHEN j.kind = k.kind THEN k.payload ELSE j.payload END,
    run_at = CASE WHEN j.kind = k.kind
                  THEN least(coalesce(%(now)s::timestamptz, now())
                             + make_interval(secs => k.debounce), j.debounce_until)
                  ELSE j.run_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM (
    -- Each key sought on chit_jobs_debounce, once per item: a plain join the
    -- planner hashes, reading every key in the index (LIMIT 1, which the
    -- unique index holds anyway, keeps the subquery from being flattened).
    SELECT holder.id, k.*
    FROM jsonb_to_recordset(%(jobs)s::jsonb) AS k(
        kind text, tenant text, debounce_key text, payload jsonb, debounce double precision
    )
    CROSS JOIN LATERAL (
        SELECT h.id FROM chit_jobs AS h
        WHERE h.tenant = k.tenant AND h.debounce_key = k.debounce_key
          AND h.state = 'queued' AND h.started_at IS NULL
        LIMIT 1
    ) AS holder
) AS k
-- Again on the row updated: a claim that took it after the look above is
-- waited for, and its running row no longer matches (read again as committed).
WHERE j.id = k.id AND j.state = 'queued' AND j.started_at IS NULL
RETURNING j.id, j.kind, j.tenant, j.debounce_key

-- name: claim_due
-- The CTEs every claim ends with (`claim`, `succeed_and_claim`, `claim_ids`):
-- the jobs of a CTE `due` moved to running, their attempt records opened.
-- queries.load puts them where a query says `{claim_due}`.
started AS (
    -- The claim's instant, for started_at: the clock as the statement runs, not
    -- now(), whose transaction start may precede the commit of a dependency's
    -- finish that the statement then sees (the job would seem to start before
    -- the dependency ended). One read, a CTE with a volatile function being
    -- evaluated once: a job's first started_at is its first attempt's.
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS at
), claimed AS (
    UPDATE chit_jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid()::text,
        lease_expires_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
        worker = %(worker)s::text,
        started_at = coalesce(j.started_at, started.at),
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM due, started
    WHERE j.id = due.id
    RETURNING j.id, j.kind, j.queue, j.priority, j.run_at, j.payload, j.attempts,
              j.max_attempts, j.lease_token, j.checkpoint, j.progress_done, j.progress_total,
              j.concurrency_key, j.timeout, j.depends_on IS NOT NULL AS has_dependencies,
              j.tenant, j.traceparent, j.cost
), stray AS (
    -- An attempt an earlier failure left open is closed, so that a job has one
    -- open attempt at most: the one an outcome closes. (Sibling WITH statements
    -- see the table as it was before the statement: not the attempt opened below.)
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()), outcome = 'lease_expired',
        error = 'lease expired: worker lost'
    FROM claimed
    WHERE a.job_id = claimed.id AND a.finished_at IS NULL
    RETURNING a.job_id
), opened AS (
    INSERT INTO chit_attempts (job_id, attempt, worker, started_at, kind, concurrency_key, cost)
    SELECT id, attempts, %(worker)s::text, started.at, kind, concurrency_key, cost
    FROM claimed, started
)

-- name: claim
-- One statement: pick (skipping rows another claimer holds), move to running,
-- open the attempt records. {held} leaves the limited and paused kinds to the
-- flow claim (SQLStore._flow_for, kinds_term).
WITH due AS (
    SELECT id FROM chit_jobs
    WHERE state = 'queued' AND queue = %(queue)s::text
      AND run_at <= coalesce(%(now)s::timestamptz, now()) AND {unexpired}
      AND {held}
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {claim_due}
SELECT * FROM claimed ORDER BY priority, run_at, id

-- name: lock_held
-- The CTE `locked` every statement on held jobs has (heartbeat, the outcomes):
-- the jobs of the items `o` whose lease token still matches, row-locked in id
-- order (see "Lock order" above). queries.load puts it where a query says
-- `{lock_held}`; the statement then updates `FROM locked, o`.
locked AS (
    SELECT j.id FROM chit_jobs AS j JOIN o ON j.id = o.id AND j.lease_token = o.token
    WHERE j.id = ANY(ARRAY(SELECT o.id FROM o))
    ORDER BY j.id
    FOR UPDATE OF j
)

-- name: heartbeat
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(beats)s::jsonb)
        AS o(id text, token text, has_progress boolean, done bigint, total bigint, message text)
), {lock_held}
UPDATE chit_jobs AS j
SET lease_expires_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    updated_at = coalesce(%(now)s::timestamptz, now()),
    progress_done = CASE WHEN o.has_progress THEN o.done ELSE j.progress_done END,
    progress_total = CASE WHEN o.has_progress THEN o.total ELSE j.progress_total END,
    progress_message = CASE WHEN o.has_progress THEN o.message ELSE j.progress_message END
FROM locked, o
WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
RETURNING j.id, j.cancel_requested

-- name: checkpoint
UPDATE chit_jobs
SET checkpoint = %(checkpoint)s::jsonb,
    progress_done = CASE WHEN %(has_progress)s::boolean THEN %(done)s::bigint
                         ELSE progress_done END,
    progress_total = CASE WHEN %(has_progress)s::boolean THEN %(total)s::bigint
                          ELSE progress_total END,
    progress_message = CASE WHEN %(has_progress)s::boolean THEN %(message)s::text
                            ELSE progress_message END,
    lease_expires_at = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::text AND lease_token = %(token)s::text

-- name: step
-- A durable step's stored result (JobContext.step); no row: not run yet.
SELECT result FROM chit_steps WHERE job_id = %(id)s::text AND name = %(name)s::text

-- name: save_step
-- Fenced on the job's lease: a worker that lost the job stores nothing (no row
-- selected). A step already stored keeps its first result; the no-op update
-- makes the row count say only whether the lease was held.
INSERT INTO chit_steps (job_id, name, attempt, result, created_at)
SELECT id, %(name)s::text, attempts, %(result)s::jsonb, coalesce(%(now)s::timestamptz, now())
FROM chit_jobs
WHERE id = %(id)s::text AND lease_token = %(token)s::text AND state = 'running'
ON CONFLICT (job_id, name) DO UPDATE SET result = chit_steps.result

-- name: append_output
-- JobContext.emit's batch, fenced on the lease, in one statement: the job's
-- counters moved (its row lock orders two writers), the values numbered after
-- them, and listeners told (the NOTIFY is sent at commit, with the rows).
-- No row: fenced out, nothing written.
WITH fenced AS (
    UPDATE chit_jobs
    SET output_seq = output_seq + %(n)s::bigint, output_bytes = output_bytes + %(bytes)s::bigint
    WHERE id = %(id)s::text AND lease_token = %(token)s::text
    RETURNING output_seq, attempts
), written AS (
    INSERT INTO chit_output (job_id, seq, attempt, data, at)
    SELECT %(id)s::text, f.output_seq - %(n)s::bigint + o.n, f.attempts, o.v::json,
           coalesce(%(now)s::timestamptz, now())
    FROM fenced AS f, unnest(%(items)s::text[]) WITH ORDINALITY AS o (v, n)
)
SELECT output_seq, attempts, pg_notify('chit_output', %(id)s::text)::text AS notified
FROM fenced

-- name: output_used
SELECT output_seq, output_bytes FROM chit_jobs
WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)

-- name: output
SELECT seq, attempt, data, at FROM chit_output
WHERE job_id = %(id)s::text AND seq > %(after)s::bigint ORDER BY seq LIMIT %(limit)s::int

-- name: output_heads
SELECT id, output_seq FROM chit_jobs WHERE id = ANY(%(ids)s::text[]) AND output_seq > 0

-- name: mark_listened
-- A job an event stream follows: the jobs trigger (migration 020) then
-- announces each change of it on chit_output, as it does for a job with output.
UPDATE chit_jobs SET listened = true WHERE id = ANY(%(ids)s::text[]) AND NOT listened

-- name: listen_output
LISTEN chit_output

-- name: lock_jobs
-- Before a batch of outcomes of several kinds: take every row lock in id order.
SELECT id FROM chit_jobs WHERE id = ANY(%(ids)s::text[]) ORDER BY id FOR UPDATE

-- name: release_dependents
-- The CTEs `succeed` and `succeed_and_claim` both end with; queries.load puts
-- them where a query says `{release_dependents}`. They need a CTE `done`
-- returning the succeeded jobs' id and dependents.
wanted AS (
    -- Workflows: the dependents of the jobs that succeeded count them done; a
    -- waiting one whose last dependency this was is queued (count_down). From
    -- the rows `done` returns: nothing to do for a job without dependents.
    SELECT d.id, count(*) AS n FROM done, unnest(done.dependents) AS d(id) GROUP BY d.id
), released AS (
    UPDATE chit_jobs AS j
    SET deps_pending = j.deps_pending - wanted.n,
        state = CASE WHEN j.state = 'waiting' AND j.deps_pending = wanted.n THEN 'queued'
                     ELSE j.state END,
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM wanted
    WHERE j.id = wanted.id AND j.deps_pending > 0  -- one a replay left alone: started
), moved AS (
    -- `done` returns the newest row; this reads the statement's snapshot. They
    -- differ when a dependent was enqueued after the snapshot was taken (its
    -- transaction held the row): `released` cannot see it, so start again
    -- (chit_dependents_moved raises a serialization failure; the store retries).
    SELECT 1 FROM done JOIN chit_jobs AS s ON s.id = done.id
    WHERE done.dependents IS NOT NULL AND s.dependents IS DISTINCT FROM done.dependents
)

-- name: succeed
-- Items: {id, token, result (null when external), external, has_progress, done,
-- total, message}.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS o(id text, token text, result jsonb, external boolean, has_progress boolean,
             done bigint, total bigint, message text)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET state = 'succeeded', result = o.result, result_external = o.external,
        progress_done = CASE WHEN o.has_progress THEN o.done ELSE j.progress_done END,
        progress_total = CASE WHEN o.has_progress THEN o.total ELSE j.progress_total END,
        progress_message = CASE WHEN o.has_progress THEN o.message ELSE j.progress_message END,
        lease_token = NULL, lease_expires_at = NULL, error = NULL,
        finished_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()), outcome = 'succeeded', error = NULL
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
), {release_dependents}
SELECT id FROM done
WHERE CASE WHEN EXISTS (SELECT 1 FROM moved) THEN chit_dependents_moved() ELSE true END

-- name: store_result
INSERT INTO chit_results (job_id, result)
SELECT r.id, r.result FROM jsonb_to_recordset(%(items)s::jsonb) AS r(id text, result jsonb)
ON CONFLICT (job_id) DO UPDATE SET result = excluded.result

-- name: fail
-- Items: {id, token, error, retry (seconds, or null to fail for good)}.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS o(id text, token text, error text, retry float8)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN o.retry IS NULL OR j.attempts >= j.max_attempts THEN 'failed'
                     ELSE 'queued' END,
        run_at = CASE WHEN o.retry IS NULL OR j.attempts >= j.max_attempts
                           OR j.cancel_requested THEN j.run_at
                      ELSE coalesce(%(now)s::timestamptz, now())
                           + make_interval(secs => o.retry) END,
        finished_at = CASE WHEN o.retry IS NULL OR j.attempts >= j.max_attempts
                                OR j.cancel_requested
                           THEN coalesce(%(now)s::timestamptz, now()) END,
        error = o.error, lease_token = NULL, lease_expires_at = NULL,
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.state, o.error, j.dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()),
        outcome = CASE done.state WHEN 'queued' THEN 'retried'
                                  WHEN 'failed' THEN 'failed' ELSE 'cancelled' END,
        error = done.error
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM done

-- name: release
-- Items: {id, token}. The first `free` hand-backs of a job do not use up its
-- attempt; each later one does, and one that leaves no attempt fails the job.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb) AS o(id text, token text)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET hand_backs = j.hand_backs + 1,
        attempts = CASE WHEN j.hand_backs < %(free)s THEN j.attempts - 1 ELSE j.attempts END,
        state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN j.hand_backs >= %(free)s AND j.attempts >= j.max_attempts
                     THEN 'failed'
                     ELSE 'queued' END,
        error = CASE WHEN NOT j.cancel_requested AND j.hand_backs >= %(free)s
                          AND j.attempts >= j.max_attempts
                     THEN 'handed back ' || (j.hand_backs + 1) || ' times without finishing'
                     ELSE j.error END,
        run_at = coalesce(%(now)s::timestamptz, now()),
        finished_at = CASE WHEN j.cancel_requested
                                OR (j.hand_backs >= %(free)s AND j.attempts >= j.max_attempts)
                           THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = NULL, lease_expires_at = NULL,
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.state, j.error, j.dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()),
        outcome = CASE done.state WHEN 'queued' THEN 'released' ELSE done.state END,
        error = CASE done.state WHEN 'failed' THEN done.error END
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM done

-- name: snooze
-- Items: {id, token, delay (seconds)}. chit.Snooze: queued again after the
-- delay, the attempt not counted (the claim counted it: take it back) and no
-- hand-back used.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb) AS o(id text, token text, delay float8)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET attempts = j.attempts - 1,
        state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        run_at = CASE WHEN j.cancel_requested THEN j.run_at
                      ELSE coalesce(%(now)s::timestamptz, now())
                           + make_interval(secs => o.delay) END,
        finished_at = CASE WHEN j.cancel_requested
                           THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = NULL, lease_expires_at = NULL,
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.state, j.dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()),
        outcome = CASE done.state WHEN 'queued' THEN 'snoozed' ELSE 'cancelled' END,
        error = NULL
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM done

-- name: mark_cancelled
-- Items: {id, token}.
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb) AS o(id text, token text)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET state = 'cancelled', lease_token = NULL, lease_expires_at = NULL,
        finished_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.state, j.dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()), outcome = 'cancelled', error = NULL
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM done

-- name: count_down
-- Workflows: the dependents of jobs that just ended (:ids) count them done; a
-- waiting one whose last dependency that was becomes queued. On a success every
-- dependent counts it (`succeed` does this inline); on a failure or cancellation
-- only the run_on = 'finished' ones (:callbacks_only). Read from the finished
-- jobs' own rows: work proportional to their dependents, never a scan of
-- waiting jobs. The store runs it after the statement that ended them, in the
-- same transaction: a fresh snapshot, which sees every dependent.
UPDATE chit_jobs AS j
SET deps_pending = j.deps_pending - c.n,
    state = CASE WHEN j.state = 'waiting' AND j.deps_pending = c.n THEN 'queued'
                 ELSE j.state END,
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM (
    SELECT d.id, count(*) AS n
    FROM chit_jobs AS x, unnest(x.dependents) AS d(id)
    WHERE x.id = ANY(%(ids)s::text[])
    GROUP BY d.id
) AS c
WHERE j.id = c.id AND j.deps_pending > 0 AND (NOT %(callbacks_only)s::boolean OR j.run_on = 'finished')
RETURNING j.id

-- name: count_up
-- The reverse, for jobs a replay took out of failed or cancelled (:ids): their
-- run_on = 'finished' dependents count them pending again, and one that was
-- released but not yet claimed waits again. One started since its release or
-- its own replay (it runs, waits for a signal, or is queued to go on or to try
-- again) is left alone: it runs on the outcome it was released by.
UPDATE chit_jobs AS j
SET deps_pending = j.deps_pending + c.n,
    state = CASE WHEN j.state = 'queued' THEN 'waiting' ELSE j.state END,
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM (
    SELECT d.id, count(*) AS n
    FROM chit_jobs AS x, unnest(x.dependents) AS d(id)
    WHERE x.id = ANY(%(ids)s::text[])
    GROUP BY d.id
) AS c
WHERE j.id = c.id AND j.run_on = 'finished'
  AND j.state <> 'running' AND NOT (j.state = 'waiting' AND j.deps_pending = 0)
  AND NOT (j.state = 'queued' AND j.started_at IS NOT NULL)
RETURNING j.id

-- name: cancel_dependents
-- The waiting dependents of jobs that just ended failed or cancelled (:ids),
-- cancelled with the first such dependency's id and state ("dependency <id>
-- failed"); the store repeats this for those returned, all the way down.
UPDATE chit_jobs AS j
SET state = 'cancelled', error = 'dependency ' || c.cause || ' ' || c.how,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM (
    SELECT DISTINCT ON (d.id) d.id, x.id AS cause, x.state AS how
    FROM chit_jobs AS x, unnest(x.dependents) AS d(id)
    WHERE x.id = ANY(%(ids)s::text[])
    ORDER BY d.id, x.id
) AS c
WHERE j.id = c.id AND j.state = 'waiting' AND j.run_on = 'succeeded'
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: uncancel_dependents
-- Replay's reverse of cancel_dependents: the dependents that a job now replayed
-- (:ids) cancelled wait again; the store repeats this for those returned.
UPDATE chit_jobs AS j
SET state = 'waiting', error = NULL, finished_at = NULL, cancel_requested = false,
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM (
    SELECT DISTINCT d.id, x.id AS cause
    FROM chit_jobs AS x, unnest(x.dependents) AS d(id)
    WHERE x.id = ANY(%(ids)s::text[])
) AS c
WHERE j.id = c.id AND j.state = 'cancelled' AND j.run_on = 'succeeded'
  AND j.error IN ('dependency ' || c.cause || ' failed', 'dependency ' || c.cause || ' cancelled')
  AND {unique_free}
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: lock_dependencies
-- The stored jobs a new batch depends on, locked until the batch is in: one
-- that ends meanwhile waits, then finds its new dependents on its row.
SELECT id, tenant, state, workflow_id FROM chit_jobs
WHERE id = ANY(%(ids)s::text[])
ORDER BY id
FOR UPDATE

-- name: add_dependents
-- Items: {id, dependents (new job ids)}.
UPDATE chit_jobs AS j
SET dependents = coalesce(j.dependents, '{}') || i.dependents
FROM jsonb_to_recordset(%(items)s::jsonb) AS i(id text, dependents text[])
WHERE j.id = i.id

-- name: dependencies
-- A job's direct dependencies in the order given (those pruned since left out).
SELECT x.id, x.kind, x.state, x.result, x.result_external
FROM chit_jobs AS j, unnest(j.depends_on) WITH ORDINALITY AS d(id, n)
JOIN chit_jobs AS x ON x.id = d.id
WHERE j.id = %(id)s::text
ORDER BY d.n

-- name: dependency_states
SELECT x.state, count(*) AS n
FROM chit_jobs AS j, unnest(j.depends_on) AS d(id)
JOIN chit_jobs AS x ON x.id = d.id
WHERE j.id = %(id)s::text
GROUP BY x.state

-- name: dependents
SELECT d.id
FROM chit_jobs AS j, unnest(j.dependents) WITH ORDINALITY AS d(id, n)
WHERE j.id = %(id)s::text AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
ORDER BY d.n

-- name: workflow
SELECT j.id, j.ref, j.kind, j.state, j.run_on, j.depends_on, j.tenant
FROM chit_jobs AS j
WHERE j.workflow_id = %(workflow_id)s::text
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
ORDER BY j.id COLLATE "C"

-- name: cancel_workflow
-- Every job of the workflow that is not terminal: waiting and queued ones
-- cancelled, running ones asked to stop.
UPDATE chit_jobs AS j
SET state = CASE WHEN j.state IN ('waiting', 'queued') THEN 'cancelled' ELSE j.state END,
    cancel_requested = true,
    finished_at = CASE WHEN j.state IN ('waiting', 'queued')
                       THEN coalesce(%(now)s::timestamptz, now()) ELSE j.finished_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE j.workflow_id = %(workflow_id)s::text
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  AND j.state IN ('waiting', 'queued', 'running')
RETURNING j.id, j.state, j.dependents IS NOT NULL AS has_dependents

-- name: succeed_and_claim
-- A busy worker's outcomes and its next jobs in one statement: `succeed`'s CTEs,
-- then `claim`'s, then the ids that succeeded (on the first row) beside the
-- claimed rows (one row with no job when nothing was claimed). The two touch
-- different rows: succeed only running jobs, claim only queued ones. Items as in
-- `succeed`; keep the CTEs the same as theirs (most are shared blocks;
-- test_queries.py checks).
WITH o AS (
    SELECT * FROM jsonb_to_recordset(%(items)s::jsonb)
        AS o(id text, token text, result jsonb, external boolean, has_progress boolean,
             done bigint, total bigint, message text)
), {lock_held}, done AS (
    UPDATE chit_jobs AS j
    SET state = 'succeeded', result = o.result, result_external = o.external,
        progress_done = CASE WHEN o.has_progress THEN o.done ELSE j.progress_done END,
        progress_total = CASE WHEN o.has_progress THEN o.total ELSE j.progress_total END,
        progress_message = CASE WHEN o.has_progress THEN o.message ELSE j.progress_message END,
        lease_token = NULL, lease_expires_at = NULL, error = NULL,
        finished_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked, o
    WHERE j.id = locked.id AND j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()), outcome = 'succeeded', error = NULL
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
), {release_dependents},
due AS (
    SELECT id FROM chit_jobs
    WHERE state = 'queued' AND queue = %(queue)s::text
      AND run_at <= coalesce(%(now)s::timestamptz, now()) AND {unexpired}
      AND {held}
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), {claim_due}
-- The ids that succeeded on the first row alone: on each row, they cost the
-- server and the client a copy of the array a claimed job (32 by 32 ids; the
-- array's output was the statement's busiest function).
SELECT CASE WHEN c.n IS NULL OR c.n = 1 THEN f.finished END AS finished, c.* FROM (
    SELECT array_agg(id) AS finished FROM done
    WHERE CASE WHEN EXISTS (SELECT 1 FROM moved) THEN chit_dependents_moved() ELSE true END
) AS f
LEFT JOIN (
    SELECT *, row_number() OVER (ORDER BY priority, run_at, id) AS n FROM claimed
) AS c ON true ORDER BY c.n

-- name: rescue_expired
-- SKIP LOCKED: a row being heartbeated right now is not expired for long, and two
-- workers rescuing at once split the work instead of waiting on each other.
WITH expired AS (
    SELECT id FROM chit_jobs
    WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE chit_jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
        error = CASE WHEN j.cancel_requested THEN j.error
                     ELSE 'worker lost: lease expired after ' || j.attempts || ' attempts' END,
        finished_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                           THEN coalesce(%(now)s::timestamptz, now()) END,
        run_at = coalesce(%(now)s::timestamptz, now()),
        lease_token = NULL, lease_expires_at = NULL,
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.id, j.state, j.dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()), outcome = 'lease_expired',
        error = 'lease expired: worker lost'
    FROM rescued
    WHERE a.job_id = rescued.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM rescued

-- name: has_expired
-- Whether expire_jobs has anything to do: the jobs with an expiry not yet
-- started only (chit_jobs_expiry).
SELECT 1 FROM chit_jobs
WHERE expires_at IS NOT NULL AND state IN ('waiting', 'queued')
  AND expires_at <= coalesce(%(now)s::timestamptz, now()) AND started_at IS NULL
LIMIT 1

-- name: expire_jobs
-- Jobs not started by their expires_at (DESIGN.md "Time"), which claims skip:
-- cancelled, and their dependents with them (the store settles them). SKIP
-- LOCKED: a job a claim holds is not queued for long, and is not expired once
-- it has started.
WITH expired AS (
    SELECT id FROM chit_jobs
    WHERE expires_at IS NOT NULL AND state IN ('waiting', 'queued')
      AND expires_at <= coalesce(%(now)s::timestamptz, now()) AND started_at IS NULL
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
UPDATE chit_jobs AS j
SET state = 'cancelled', error = 'expired before it started',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: get
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id = %(id)s::text AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)

-- name: list
-- The WHERE clause is built from the filters actually given (PostgresStore.list),
-- so the planner sees plain conditions and picks the index that fits. {key} is
-- id, or id COLLATE "C", the same order (ids are ASCII) but the one the list
-- indexes keep (migration 006).
SELECT {columns}
FROM chit_jobs AS j
WHERE {where}
ORDER BY {key} DESC
LIMIT %(limit)s

-- name: list_merged
-- A filter on kind or queue: finished, waiting, queued and running jobs are
-- each found by an index of their own, then merged.
({finished}) UNION ALL ({waiting}) UNION ALL ({queued}) UNION ALL ({running})
ORDER BY id DESC
LIMIT %(limit)s

-- name: get_result
SELECT CASE WHEN j.result_external THEN r.result ELSE j.result END AS result
FROM chit_jobs AS j LEFT JOIN chit_results AS r ON r.job_id = j.id
WHERE j.id = %(id)s::text AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)

-- name: attempts
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error
FROM chit_attempts WHERE job_id = %(id)s::text ORDER BY seq

-- name: steps
-- A job's stored steps, in the order they were stored.
SELECT name, attempt, result, created_at FROM chit_steps WHERE job_id = %(id)s::text ORDER BY seq

-- name: cancel
UPDATE chit_jobs
SET state = CASE WHEN state IN ('queued', 'waiting') THEN 'cancelled' ELSE state END,
    cancel_requested = true,
    finished_at = CASE WHEN state IN ('queued', 'waiting')
                       THEN coalesce(%(now)s::timestamptz, now()) ELSE finished_at END,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND state IN ('queued', 'waiting', 'running')
RETURNING CASE state WHEN 'cancelled' THEN 'cancelled' ELSE 'requested' END AS result,
          dependents IS NOT NULL AS has_dependents

-- name: update_job
-- An edit of a job not yet started (Store.update): each of run_at, priority
-- and payload given replaces the stored one; run_now makes it due now, or
-- leaves it where it stands in line when it was due already.
UPDATE chit_jobs
SET run_at = CASE WHEN %(run_now)s::boolean
                  THEN least(run_at, coalesce(%(now)s::timestamptz, now()))
                  ELSE coalesce(%(run_at)s::timestamptz, run_at) END,
    priority = coalesce(%(priority)s::integer, priority),
    payload = coalesce(%(payload)s::jsonb, payload),
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND state IN ('queued', 'waiting')
RETURNING id

-- name: job_state
SELECT state FROM chit_jobs
WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)

-- name: failures
SELECT kind, split_part(error, E'\n', 1) AS first_line, count(*) AS count,
       min(finished_at) AS first_seen, max(finished_at) AS last_seen, max(id) AS latest_id
FROM chit_jobs
WHERE state = 'failed' AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY kind, first_line
ORDER BY count DESC, max(finished_at) DESC

-- name: stats_by_state_kind
-- Waiting and finished jobs by chit_jobs_state_kind, queued ones by
-- chit_jobs_groups, running ones by chit_jobs_leases (migration 017).
SELECT state, kind, count(*) AS n FROM chit_jobs
WHERE state NOT IN ('queued', 'running')
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY state, kind
UNION ALL
SELECT 'queued', kind, count(*) FROM chit_jobs
WHERE state = 'queued' AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY kind
UNION ALL
SELECT 'running', kind, count(*) FROM chit_jobs
WHERE state = 'running' AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY kind

-- name: stats_last_hour
SELECT state, count(*) AS n FROM chit_jobs
WHERE finished_at >= coalesce(%(now)s::timestamptz, now()) - interval '1 hour'
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
GROUP BY state

-- name: stats_queue_lag
SELECT extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - min(run_at))::float8
FROM chit_jobs
WHERE state = 'queued' AND run_at <= coalesce(%(now)s::timestamptz, now())
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)

-- name: stats_stale
SELECT count(*) FROM chit_jobs
WHERE state = 'running' AND lease_expires_at < coalesce(%(now)s::timestamptz, now())
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)

-- name: prune
-- Attempts (a trigger, migration 005) and stored results (ON DELETE CASCADE) go
-- with their job. At most %(batch)s rows a statement: the store loops until a
-- batch comes back short.
DELETE FROM chit_jobs
WHERE id IN (
    SELECT id FROM chit_jobs
    WHERE finished_at < coalesce(%(now)s::timestamptz, now()) + %(age)s::interval
      AND state IN ('succeeded', 'failed', 'cancelled')
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)

-- name: replay
-- By ids: the primary key.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.id = ANY(%(ids)s::text[]) AND j.state IN ('failed', 'cancelled')
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  AND {unique_free}
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: replay_failed
-- Failed jobs by error prefix and time.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND {tenant}
  AND (%(error_prefix)s::text IS NULL OR starts_with(j.error, %(error_prefix)s::text))
  AND (%(since)s::timestamptz IS NULL OR j.finished_at >= %(since)s::timestamptz)
  AND {unique_free}
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: replay_failed_kind
-- The same for one kind.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND j.kind = %(kind)s::text AND {tenant}
  AND (%(error_prefix)s::text IS NULL OR starts_with(j.error, %(error_prefix)s::text))
  AND (%(since)s::timestamptz IS NULL OR j.finished_at >= %(since)s::timestamptz)
  AND {unique_free}
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- name: listen
LISTEN chit_jobs

-- The HTTP API

-- name: get_many
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id = ANY(%(ids)s::text[])

-- name: attempt_stats
-- bucket: how many bounds lie below the duration, so the first bound it fits
-- under (Prometheus `le`); NULL for attempts still running.
SELECT kind, outcome, bucket, count(*) AS n, coalesce(sum(seconds), 0.0) AS seconds
FROM (
    SELECT kind, outcome, seconds,
           CASE WHEN seconds IS NOT NULL
                THEN (SELECT count(*) FROM unnest(%(bounds)s::float8[]) AS b WHERE b < seconds)
           END AS bucket
    FROM (
        SELECT j.kind, t.outcome,
               extract(epoch FROM t.finished_at - t.started_at)::float8 AS seconds
        FROM chit_attempts AS t JOIN chit_jobs AS j ON j.id = t.job_id
        WHERE %(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text
    ) AS timed
) AS bucketed
GROUP BY kind, outcome, bucket

-- name: create_api_key
INSERT INTO chit_api_keys (id, name, tenant, scopes, key_hash, created_at)
VALUES (%(id)s::text, %(name)s::text, %(tenant)s::text, %(scopes)s::text, %(key_hash)s::text,
        clock_timestamp())
RETURNING id, name, tenant, scopes, created_at, revoked_at

-- name: find_api_key
SELECT id, name, tenant, scopes, created_at, revoked_at FROM chit_api_keys
WHERE key_hash = %(key_hash)s::text AND revoked_at IS NULL

-- name: list_api_keys
SELECT id, name, tenant, scopes, created_at, revoked_at FROM chit_api_keys
WHERE %(include_revoked)s::boolean OR revoked_at IS NULL
ORDER BY created_at, id

-- name: revoke_api_key
UPDATE chit_api_keys SET revoked_at = now()
WHERE id = %(id)s::text AND revoked_at IS NULL

-- name: create_session
-- The dashboard's sessions (chit.store.Sessions). The idle and max lengths are intervals.
INSERT INTO chit_sessions (id_hash, key_hash, created_at, idle_expires_at, expires_at)
VALUES (
    %(id_hash)s::text, %(key_hash)s::text,
    coalesce(%(now)s::timestamptz, now()),
    coalesce(%(now)s::timestamptz, now()) + %(idle)s::interval,
    coalesce(%(now)s::timestamptz, now()) + %(max)s::interval
)

-- name: find_session
-- A live session, and whether its idle expiry is still within the slack of where
-- a touch would move it (then no write is needed).
SELECT key_hash, created_at, idle_expires_at, expires_at,
       idle_expires_at >= least(coalesce(%(now)s::timestamptz, now()) + %(slack)s::interval,
                                expires_at) AS fresh
FROM chit_sessions
WHERE id_hash = %(id_hash)s::text
  AND idle_expires_at > coalesce(%(now)s::timestamptz, now())
  AND expires_at > coalesce(%(now)s::timestamptz, now())

-- name: touch_session
-- The session, if it has not expired, its idle expiry moved on (never past the
-- absolute one); nothing once either has passed.
UPDATE chit_sessions
SET idle_expires_at = least(coalesce(%(now)s::timestamptz, now()) + %(idle)s::interval, expires_at)
WHERE id_hash = %(id_hash)s::text
  AND idle_expires_at > coalesce(%(now)s::timestamptz, now())
  AND expires_at > coalesce(%(now)s::timestamptz, now())
RETURNING key_hash, created_at, idle_expires_at, expires_at

-- name: delete_session
DELETE FROM chit_sessions WHERE id_hash = %(id_hash)s::text

-- name: delete_key_sessions
DELETE FROM chit_sessions
WHERE key_hash IN (SELECT key_hash FROM chit_api_keys WHERE id = %(id)s::text)

-- name: prune_sessions
DELETE FROM chit_sessions
WHERE idle_expires_at <= coalesce(%(now)s::timestamptz, now())
   OR expires_at <= coalesce(%(now)s::timestamptz, now())

-- The dashboard. {tenant} is `true` (every tenant) or an equality on j.tenant,
-- so that a tenant's query seeks on the tenant column of the index instead of filtering.

-- name: count_by_state_kind
-- A loose index scan of chit_jobs_state_kind finds each waiting or finished
-- state's kinds (one seek per kind), and one of chit_jobs_groups each queue's
-- queued kinds; then each pair is counted up to `cap` entries by an index-only
-- scan: the cost is bounded by kinds x cap, not by the size of the table.
-- Running jobs, as many as the workers' slots, are counted by chit_jobs_leases.
WITH RECURSIVE
states(state) AS (VALUES ('waiting'), ('succeeded'), ('failed'), ('cancelled')),
pairs(state, kind) AS (
    SELECT state, (SELECT min(j.kind) FROM chit_jobs AS j
                   WHERE j.state = states.state AND j.state NOT IN ('queued', 'running'))
    FROM states
    UNION ALL
    SELECT state,
           (SELECT min(j.kind) FROM chit_jobs AS j
            WHERE j.state = pairs.state AND j.state NOT IN ('queued', 'running')
              AND j.kind > pairs.kind)
    FROM pairs WHERE kind IS NOT NULL
),
queues(queue) AS (
    SELECT (SELECT min(queue) FROM chit_jobs WHERE state = 'queued')
    UNION ALL
    SELECT (SELECT min(j.queue) FROM chit_jobs AS j
            WHERE j.state = 'queued' AND j.queue > queues.queue)
    FROM queues WHERE queue IS NOT NULL
),
queued(queue, kind) AS (
    SELECT queue, (SELECT min(j.kind) FROM chit_jobs AS j
                   WHERE j.state = 'queued' AND j.queue = queues.queue)
    FROM queues WHERE queue IS NOT NULL
    UNION ALL
    SELECT queue, (SELECT min(j.kind) FROM chit_jobs AS j
                   WHERE j.state = 'queued' AND j.queue = queued.queue AND j.kind > queued.kind)
    FROM queued WHERE kind IS NOT NULL
)
SELECT state, kind,
       (SELECT count(*) FROM (
            SELECT 1 FROM chit_jobs AS j
            WHERE j.state = pairs.state AND j.state NOT IN ('queued', 'running')
              AND j.kind = pairs.kind AND {tenant}
            LIMIT %(cap)s) AS capped) AS n
FROM pairs
WHERE kind IS NOT NULL
UNION ALL
SELECT 'queued', kind, least(sum(n), %(cap)s)::int FROM (
    SELECT kind,
           (SELECT count(*) FROM (
                SELECT 1 FROM chit_jobs AS j
                WHERE j.state = 'queued' AND j.queue = queued.queue AND j.kind = queued.kind
                  AND {tenant}
                LIMIT %(cap)s) AS capped) AS n
    FROM queued WHERE kind IS NOT NULL) AS queued_kinds
GROUP BY kind
UNION ALL
SELECT 'running', j.kind, least(count(*), %(cap)s)::int FROM chit_jobs AS j
WHERE j.state = 'running' AND {tenant}
GROUP BY j.kind

-- name: finished_per_minute
-- Read from chit_jobs_finished alone; the cost grows with the last hour's
-- finished jobs, not with the table.
SELECT date_trunc('minute', j.finished_at) AS minute, j.kind, j.state, count(*) AS n
FROM chit_jobs AS j
WHERE j.finished_at >= coalesce(%(now)s::timestamptz, now()) - interval '1 hour'
  AND j.state IN ('succeeded', 'failed') AND {tenant}
GROUP BY 1, 2, 3

-- name: oldest_queued
-- The partial index of queued jobs, whose size is the backlog.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.state = 'queued' AND j.run_at <= coalesce(%(now)s::timestamptz, now()) AND {tenant}
ORDER BY j.run_at, j.id
LIMIT 1

-- name: stale_jobs
SELECT {columns}
FROM chit_jobs AS j
WHERE j.state = 'running' AND j.lease_expires_at < coalesce(%(now)s::timestamptz, now())
  AND {tenant}
ORDER BY j.lease_expires_at
LIMIT %(limit)s

-- name: search_id_prefix
-- A range of the primary key (chit.ids.id_prefix_range).
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id >= %(low)s::text AND j.id <= %(high)s::text AND {tenant}
ORDER BY j.id DESC
LIMIT %(limit)s

-- name: search_idempotency_key
-- Exact key. Every tenant: a loose scan of chit_jobs_idempotency finds the
-- tenants that use keys, then one seek per tenant.
WITH RECURSIVE tenants(t) AS (
    SELECT min(tenant) FROM chit_jobs WHERE idempotency_key IS NOT NULL
    UNION ALL
    SELECT (SELECT min(tenant) FROM chit_jobs
            WHERE idempotency_key IS NOT NULL AND tenant > tenants.t)
    FROM tenants WHERE t IS NOT NULL
)
SELECT {columns}
FROM tenants JOIN chit_jobs AS j ON j.tenant = tenants.t
WHERE j.idempotency_key = %(key)s::text AND {tenant}
ORDER BY j.id DESC
LIMIT %(limit)s

-- name: replay_failure_group
-- One group of the failures report: this kind, and this exact first line.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND j.kind = %(kind)s::text AND {tenant}
  AND (j.error = %(error)s::text OR starts_with(j.error, %(error)s::text || E'\n'))
  AND {unique_free}
RETURNING j.id, j.dependents IS NOT NULL AS has_dependents

-- Flow control (store/flow.py; DESIGN.md, "Flow control")

-- name: flow_limits
SELECT kind, source, concurrency, rate, rate_seconds, key_concurrency, key_rate,
       key_rate_seconds, cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds,
       updated_at
FROM chit_limits ORDER BY kind, source

-- name: flow_pauses
SELECT scope, name, paused_at FROM chit_pauses ORDER BY scope DESC, name

-- name: queued_kinds
-- Each kind with queued jobs in the queue, with its first group (tenant, key):
-- a loose scan of chit_jobs_groups, one seek a kind whatever its backlog.
WITH RECURSIVE kinds AS (
    (SELECT kind, tenant, concurrency_key FROM chit_jobs
     WHERE state = 'queued' AND queue = %(queue)s::text
     ORDER BY kind, tenant, concurrency_key
     LIMIT 1)
    UNION ALL
    SELECT following.* FROM kinds, LATERAL (
        SELECT kind, tenant, concurrency_key FROM chit_jobs
        WHERE state = 'queued' AND queue = %(queue)s::text AND kind > kinds.kind
        ORDER BY kind, tenant, concurrency_key
        LIMIT 1
    ) AS following
)
SELECT kind, tenant, concurrency_key FROM kinds

-- name: next_kind
-- The first group (kind, tenant, key) of the first kind after :kind with queued
-- jobs in the queue: one seek of chit_jobs_groups, whatever that kind's backlog.
SELECT kind, tenant, concurrency_key FROM chit_jobs
WHERE state = 'queued' AND queue = %(queue)s::text AND kind > %(kind)s::text
ORDER BY kind, tenant, concurrency_key
LIMIT 1

-- name: next_group
-- The group of the kind's queued jobs after (:tenant, :key): one seek.
SELECT tenant, concurrency_key FROM chit_jobs
WHERE state = 'queued' AND queue = %(queue)s::text AND kind = %(kind)s::text
  AND (tenant, concurrency_key) > (%(tenant)s::text, %(key)s::text)
ORDER BY tenant, concurrency_key
LIMIT 1

-- name: group_jobs
-- A group's due jobs in claim order.
SELECT id, kind, tenant, concurrency_key, priority, run_at, cost FROM chit_jobs
WHERE state = 'queued' AND queue = %(queue)s::text AND kind = %(kind)s::text
  AND tenant = %(tenant)s::text AND concurrency_key = %(key)s::text
  AND run_at <= coalesce(%(now)s::timestamptz, now()) AND {unexpired}
ORDER BY priority, run_at, id
LIMIT %(limit)s

-- name: lock_kinds
-- Claims of a limited kind count and claim one after another: a transaction
-- lock per kind, taken in kind order so that two claims cannot deadlock. The
-- counts that follow run as later statements, so they see every claim that
-- committed while this one waited.
SELECT count(pg_advisory_xact_lock(hashtextextended('chit limit ' || k, 0)))
FROM (SELECT k FROM unnest(%(kinds)s::text[]) AS k ORDER BY k) AS sorted

-- name: kind_in_use
-- A kind's running jobs (a lease not yet expired: a killed worker's free
-- themselves at expiry), its attempts started within the rate window, and in
-- how many seconds the oldest of those leaves it (NULL without a window).
SELECT (SELECT count(*) FROM chit_jobs
        WHERE state = 'running' AND kind = %(kind)s::text
          AND lease_expires_at > coalesce(%(now)s::timestamptz, now())) AS running,
       CASE WHEN %(window)s::interval IS NULL THEN 0 ELSE
       (SELECT count(*) FROM chit_attempts
        WHERE kind = %(kind)s::text
          AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval)
       END AS started,
       extract(epoch FROM (
           SELECT min(started_at) FROM chit_attempts
           WHERE kind = %(kind)s::text
             AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval
       ) - (coalesce(%(now)s::timestamptz, now()) + %(window)s::interval))::float8 AS frees_in

-- name: key_in_use
-- The same for one concurrency key of a kind.
SELECT (SELECT count(*) FROM chit_jobs
        WHERE state = 'running' AND kind = %(kind)s::text
          AND concurrency_key = %(key)s::text
          AND lease_expires_at > coalesce(%(now)s::timestamptz, now())) AS running,
       CASE WHEN %(window)s::interval IS NULL THEN 0 ELSE
       (SELECT count(*) FROM chit_attempts
        WHERE kind = %(kind)s::text AND concurrency_key = %(key)s::text
          AND concurrency_key <> ''
          AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval)
       END AS started,
       extract(epoch FROM (
           SELECT min(started_at) FROM chit_attempts
           WHERE kind = %(kind)s::text AND concurrency_key = %(key)s::text
          AND concurrency_key <> ''
             AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval
       ) - (coalesce(%(now)s::timestamptz, now()) + %(window)s::interval))::float8 AS frees_in

-- name: kind_spent
-- A kind's cost spent within the budget's window (its attempts' costs, NULL
-- being 1), and in how many seconds the oldest of those leaves it.
SELECT coalesce(sum(coalesce(cost, 1)), 0)::bigint AS started, 0 AS running,
       extract(epoch FROM min(started_at)
           - (coalesce(%(now)s::timestamptz, now()) + %(window)s::interval))::float8 AS frees_in
FROM chit_attempts
WHERE kind = %(kind)s::text
  AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval

-- name: key_spent
-- The same for one concurrency key of a kind.
SELECT coalesce(sum(coalesce(cost, 1)), 0)::bigint AS started, 0 AS running,
       extract(epoch FROM min(started_at)
           - (coalesce(%(now)s::timestamptz, now()) + %(window)s::interval))::float8 AS frees_in
FROM chit_attempts
WHERE kind = %(kind)s::text AND concurrency_key = %(key)s::text AND concurrency_key <> ''
  AND started_at > coalesce(%(now)s::timestamptz, now()) + %(window)s::interval

-- name: report_cost
-- The open attempt's cost replaced with what it spent, fenced on the lease.
UPDATE chit_attempts AS a SET cost = %(cost)s::bigint
FROM chit_jobs AS j
WHERE a.job_id = %(id)s::text AND a.finished_at IS NULL
  AND j.id = %(id)s::text AND j.lease_token = %(token)s::text AND j.state = 'running'

-- name: claim_ids
-- The jobs a flow claim chose, if still queued and not being claimed by another.
WITH due AS (
    SELECT id FROM chit_jobs
    WHERE id = ANY(%(ids)s::text[]) AND state = 'queued' AND {unexpired}
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), {claim_due}
SELECT * FROM claimed

-- name: declare_limits
INSERT INTO chit_limits (
    kind, source, concurrency, rate, rate_seconds, key_concurrency, key_rate,
    key_rate_seconds, cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds
) VALUES (
    %(kind)s::text, 'code', %(concurrency)s::integer, %(rate)s::integer,
    %(rate_seconds)s::float8, %(key_concurrency)s::integer, %(key_rate)s::integer,
    %(key_rate_seconds)s::float8, %(cost_rate)s::bigint, %(cost_rate_seconds)s::float8,
    %(key_cost_rate)s::bigint, %(key_cost_rate_seconds)s::float8
)
ON CONFLICT (kind, source) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate,
    rate_seconds = excluded.rate_seconds, key_concurrency = excluded.key_concurrency,
    key_rate = excluded.key_rate, key_rate_seconds = excluded.key_rate_seconds,
    cost_rate = excluded.cost_rate, cost_rate_seconds = excluded.cost_rate_seconds,
    key_cost_rate = excluded.key_cost_rate,
    key_cost_rate_seconds = excluded.key_cost_rate_seconds,
    updated_at = excluded.updated_at
WHERE (chit_limits.concurrency, chit_limits.rate, chit_limits.rate_seconds,
       chit_limits.key_concurrency, chit_limits.key_rate, chit_limits.key_rate_seconds,
       chit_limits.cost_rate, chit_limits.cost_rate_seconds, chit_limits.key_cost_rate,
       chit_limits.key_cost_rate_seconds)
      IS DISTINCT FROM (excluded.concurrency, excluded.rate, excluded.rate_seconds,
                        excluded.key_concurrency, excluded.key_rate, excluded.key_rate_seconds,
                        excluded.cost_rate, excluded.cost_rate_seconds,
                        excluded.key_cost_rate, excluded.key_cost_rate_seconds)

-- name: forget_declared_limits
DELETE FROM chit_limits WHERE kind = %(kind)s::text AND source = 'code'

-- name: set_limits
-- An operator's values over the ones they set before: a NULL leaves one as it was.
INSERT INTO chit_limits (
    kind, source, concurrency, rate, rate_seconds, key_concurrency, key_rate,
    key_rate_seconds, cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds
) VALUES (
    %(kind)s::text, 'operator', %(concurrency)s::integer, %(rate)s::integer,
    %(rate_seconds)s::float8, %(key_concurrency)s::integer, %(key_rate)s::integer,
    %(key_rate_seconds)s::float8, %(cost_rate)s::bigint, %(cost_rate_seconds)s::float8,
    %(key_cost_rate)s::bigint, %(key_cost_rate_seconds)s::float8
)
ON CONFLICT (kind, source) DO UPDATE
SET concurrency = coalesce(excluded.concurrency, chit_limits.concurrency),
    rate = coalesce(excluded.rate, chit_limits.rate),
    rate_seconds = coalesce(excluded.rate_seconds, chit_limits.rate_seconds),
    key_concurrency = coalesce(excluded.key_concurrency, chit_limits.key_concurrency),
    key_rate = coalesce(excluded.key_rate, chit_limits.key_rate),
    key_rate_seconds = coalesce(excluded.key_rate_seconds, chit_limits.key_rate_seconds),
    cost_rate = coalesce(excluded.cost_rate, chit_limits.cost_rate),
    cost_rate_seconds = coalesce(excluded.cost_rate_seconds, chit_limits.cost_rate_seconds),
    key_cost_rate = coalesce(excluded.key_cost_rate, chit_limits.key_cost_rate),
    key_cost_rate_seconds = coalesce(excluded.key_cost_rate_seconds,
                                     chit_limits.key_cost_rate_seconds),
    updated_at = excluded.updated_at

-- name: clear_limits
DELETE FROM chit_limits WHERE kind = %(kind)s::text AND source = 'operator'

-- name: limit_usage
-- Each limited kind's running jobs, and its queued jobs that are due.
SELECT k.kind,
       (SELECT count(*) FROM chit_jobs AS j
        WHERE j.state = 'running' AND j.kind = k.kind
          AND j.lease_expires_at > coalesce(%(now)s::timestamptz, now())) AS running,
       (SELECT count(*) FROM chit_jobs AS j
        WHERE j.state = 'queued' AND j.kind = k.kind
          AND j.run_at <= coalesce(%(now)s::timestamptz, now())) AS waiting
FROM (SELECT DISTINCT kind FROM chit_limits) AS k

-- name: pause
INSERT INTO chit_pauses (scope, name) VALUES (%(scope)s::text, %(name)s::text)
ON CONFLICT (scope, name) DO NOTHING

-- name: resume
DELETE FROM chit_pauses WHERE scope = %(scope)s::text AND name = %(name)s::text

-- name: add_secret
-- The first process to ask stores its value; the others keep the stored one.
INSERT INTO chit_secrets (name, value) VALUES (%(name)s::text, %(value)s::text)
ON CONFLICT (name) DO NOTHING

-- name: get_secret
SELECT value FROM chit_secrets WHERE name = %(name)s::text

-- Schedules (chit/schedules.py; DESIGN.md, "Time"). Slots and next_at are
-- computed in Python from the rule; the store keeps them and guards each move.

-- name: schedule_columns
-- A schedule as SQLStore._schedule reads it, with its last job's state.
SELECT s.name, s.kind, s.payload, s.cron, s.every_seconds, s.tz, s.catch_up, s.paused,
       s.source, s.next_at, s.last_slot, s.last_job_id, s.created_at, s.updated_at,
       (SELECT j.state FROM chit_jobs AS j WHERE j.id = s.last_job_id) AS last_job_state
FROM chit_schedules AS s

-- name: schedule_clock
-- The database clock, and the first slot due of the kinds a worker runs: an
-- idle tick is this one look at chit_schedules_due.
-- No kinds (a declaration reading the clock): no look at all, which would walk
-- every schedule for a kind that none has.
SELECT coalesce(%(now)s::timestamptz, now()) AS now,
       CASE WHEN cardinality(%(kinds)s::text[]) = 0 THEN NULL ELSE
       (SELECT min(next_at) FROM chit_schedules
        WHERE NOT paused AND kind = ANY(%(kinds)s::text[])) END AS next_at

-- name: declare_schedule
-- Code's declaration (a worker starting) or an operator's (CLI, API). A changed
-- rule starts again from :next_at; the same rule keeps its next_at (the slots
-- missed while no worker ran stay due, for catch_up). A pause stays.
INSERT INTO chit_schedules (
    name, kind, payload, cron, every_seconds, tz, catch_up, source, next_at,
    created_at, updated_at
) VALUES (
    %(name)s::text, %(kind)s::text, %(payload)s::jsonb, %(cron)s::text,
    %(every_seconds)s::integer, %(tz)s::text, %(catch_up)s::text, %(source)s::text,
    %(next_at)s::timestamptz, coalesce(%(now)s::timestamptz, now()),
    coalesce(%(now)s::timestamptz, now())
)
ON CONFLICT (name) DO UPDATE
SET next_at = CASE WHEN (chit_schedules.cron, chit_schedules.every_seconds, chit_schedules.tz)
                        IS NOT DISTINCT FROM (excluded.cron, excluded.every_seconds, excluded.tz)
              THEN chit_schedules.next_at ELSE excluded.next_at END,
    kind = excluded.kind, payload = excluded.payload, cron = excluded.cron,
    every_seconds = excluded.every_seconds, tz = excluded.tz, catch_up = excluded.catch_up,
    source = excluded.source, updated_at = excluded.updated_at
WHERE (chit_schedules.kind, chit_schedules.payload, chit_schedules.cron,
       chit_schedules.every_seconds, chit_schedules.tz, chit_schedules.catch_up,
       chit_schedules.source)
      IS DISTINCT FROM (excluded.kind, excluded.payload, excluded.cron, excluded.every_seconds,
                        excluded.tz, excluded.catch_up, excluded.source)

-- name: get_schedule
{schedule_columns}
WHERE s.name = %(name)s::text

-- name: list_schedules
{schedule_columns}
ORDER BY s.name

-- name: remove_schedule
DELETE FROM chit_schedules WHERE name = %(name)s::text

-- name: pause_schedule
-- Paused: no slot is enqueued. Resumed: from :next_at (the first slot from
-- now), so the slots of the pause are not caught up.
UPDATE chit_schedules
SET paused = %(paused)s::boolean,
    next_at = CASE WHEN %(paused)s::boolean THEN next_at ELSE %(next_at)s::timestamptz END,
    updated_at = now()
WHERE name = %(name)s::text AND paused <> %(paused)s::boolean

-- name: due_schedules
-- The due schedules of the kinds a worker runs, the most overdue first, by
-- chit_schedules_due: the cost follows the due ones, not the table.
SELECT name, kind, payload, cron, every_seconds, tz, catch_up, next_at
FROM chit_schedules
WHERE NOT paused AND next_at <= coalesce(%(now)s::timestamptz, now())
  AND kind = ANY(%(kinds)s::text[])
ORDER BY next_at
LIMIT %(limit)s

-- name: advance_schedules
-- Moves, each guarded by the next_at its tick read: of two workers that planned
-- the same slots, one moves the schedule on (their jobs were one already, by key).
UPDATE chit_schedules AS s
SET next_at = m.next_at,
    last_slot = coalesce(m.last_slot, s.last_slot),
    last_job_id = coalesce(m.last_job_id, s.last_job_id)
FROM jsonb_to_recordset(%(moves)s::jsonb)
     AS m(name text, seen timestamptz, next_at timestamptz, last_slot timestamptz,
          last_job_id text)
WHERE s.name = m.name AND s.next_at = m.seen AND NOT s.paused

-- name: schedule_runs
-- The jobs of these slot keys, by chit_jobs_idempotency.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.tenant = '' AND j.idempotency_key = ANY(%(keys)s::text[])

-- name: beat_worker
-- A worker's upkeep (chit/fleet.py): its row written, alive until stale_at.
INSERT INTO chit_workers (
    id, host, pid, queues, kinds, slots, busy, started_at, seen_at, stale_at
) VALUES (
    %(id)s::text, %(host)s::text, %(pid)s::integer, %(queues)s::jsonb, %(kinds)s::jsonb,
    %(slots)s::integer, %(busy)s::integer,
    coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()),
    coalesce(%(now)s::timestamptz, now()) + %(stale_after)s::interval
)
ON CONFLICT (id) DO UPDATE SET
    queues = excluded.queues, kinds = excluded.kinds, slots = excluded.slots,
    busy = excluded.busy, seen_at = excluded.seen_at, stale_at = excluded.stale_at

-- name: forget_dead_workers
DELETE FROM chit_workers WHERE stale_at < coalesce(%(now)s::timestamptz, now())

-- name: forget_worker
DELETE FROM chit_workers WHERE id = %(id)s::text

-- name: live_workers
SELECT id, host, pid, queues, kinds, slots, busy, started_at, seen_at
FROM chit_workers
WHERE stale_at >= coalesce(%(now)s::timestamptz, now())
ORDER BY started_at, id

-- name: queue_counts
-- Each queue's queued jobs by chit_jobs_claimable (ready: due now; scheduled:
-- due later) and running ones by chit_jobs_leases. {tenant}: `true` or an
-- equality on j.tenant.
SELECT j.queue,
       count(*) FILTER (WHERE j.run_at <= coalesce(%(now)s::timestamptz, now())) AS ready,
       count(*) FILTER (WHERE j.run_at > coalesce(%(now)s::timestamptz, now())) AS scheduled,
       0 AS running,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                - min(j.run_at) FILTER (WHERE j.run_at <= coalesce(%(now)s::timestamptz, now()))),
                0)::float8 AS oldest_ready_seconds
FROM chit_jobs AS j
WHERE j.state = 'queued' AND {tenant}
GROUP BY j.queue
UNION ALL
SELECT j.queue, 0, 0, count(*), 0
FROM chit_jobs AS j
WHERE j.state = 'running' AND {tenant}
GROUP BY j.queue

-- Waits (DESIGN.md "Long AI tasks"; chit/store/sql/waits.py)

-- name: suspend
-- A Suspended outcome: `waiting` (`cancelled` when cancellation was asked), the
-- attempt not counted, what it waits for stored; run_at now, so a resumed job
-- is due at once. Its attempt record closes `snoozed` (not counted either).
WITH done AS (
    UPDATE chit_jobs
    SET attempts = attempts - 1,
        state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'waiting' END,
        wait_signal = %(signal)s::text, wait_jobs = %(jobs)s::text[],
        wait_until = coalesce(%(now)s::timestamptz, now()) + %(timeout)s::interval,
        run_at = coalesce(%(now)s::timestamptz, now()),
        finished_at = CASE WHEN cancel_requested THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = NULL, lease_expires_at = NULL,
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE id = %(id)s::text AND lease_token = %(token)s::text AND state = 'running'
    RETURNING id, state, dependents IS NOT NULL AS has_dependents
), closed AS (
    UPDATE chit_attempts AS a
    SET finished_at = coalesce(%(now)s::timestamptz, now()),
        outcome = CASE done.state WHEN 'waiting' THEN 'snoozed' ELSE 'cancelled' END,
        error = NULL
    FROM done
    WHERE a.job_id = done.id AND a.finished_at IS NULL
)
SELECT id, state, has_dependents FROM done

-- name: wait_on_jobs
-- The jobs a suspended job waits for name it among their waiters (once), so
-- that the one ending last queues it (chit_wake_waiters): those that have
-- ended too, as a retry may open one again.
UPDATE chit_jobs
SET waiters = array_append(coalesce(waiters, '{}'), %(id)s::text)
WHERE id = ANY (%(jobs)s::text[])
  AND NOT (%(id)s::text = ANY (coalesce(waiters, '{}')))

-- name: resume_ready
-- After `suspend`, in its transaction but a statement of its own (a snapshot
-- taken after the row locks): queued at once when what it waits for is there
-- already (the signal was sent, every job has ended: unknown ids, pruned
-- since, count as ended).
UPDATE chit_jobs AS j
SET state = 'queued', updated_at = coalesce(%(now)s::timestamptz, now())
WHERE j.id = %(id)s::text AND j.state = 'waiting'
  AND ((j.wait_signal IS NOT NULL AND EXISTS (
            SELECT 1 FROM chit_signals AS s WHERE s.job_id = j.id AND s.name = j.wait_signal))
       OR (j.wait_jobs IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM chit_jobs AS c
            WHERE c.id = ANY (j.wait_jobs) AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))))

-- name: wake_waiters
-- Waiting jobs past their wait's deadline: queued, by chit_jobs_wait_until.
UPDATE chit_jobs
SET state = 'queued', updated_at = coalesce(%(now)s::timestamptz, now())
WHERE state = 'waiting' AND wait_until IS NOT NULL
  AND wait_until <= coalesce(%(now)s::timestamptz, now())
RETURNING id, wait_signal

-- name: signal_timed_out
-- The timed-out waits for a signal (:items, a JSON array of [id, name]) keep a
-- mark under the name, so that the rerun's wait_for reads None, and a signal
-- sent after it changes nothing.
INSERT INTO chit_signals (job_id, name, data, created_at)
SELECT i ->> 0, i ->> 1, NULL, coalesce(%(now)s::timestamptz, now())
FROM jsonb_array_elements(%(items)s::jsonb) AS i
ON CONFLICT (job_id, name) DO NOTHING

-- name: signal_target
-- The job a signal is sent to, for the caller's tenant; locked, so that a
-- suspend of it waits for this transaction and then sees the signal.
SELECT state FROM chit_jobs
WHERE id = %(id)s::text AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
FOR UPDATE

-- name: insert_signal
INSERT INTO chit_signals (job_id, name, data, created_at)
VALUES (%(id)s::text, %(name)s::text, %(data)s::jsonb, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (job_id, name) DO NOTHING
RETURNING data

-- name: stored_signal
SELECT data FROM chit_signals WHERE job_id = %(id)s::text AND name = %(name)s::text

-- name: resume_signalled
-- A waiting job waiting for the signal just stored: queued.
UPDATE chit_jobs
SET state = 'queued', updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::text AND state = 'waiting' AND wait_signal = %(name)s::text

-- name: received
-- What wait_for reads: the signal (found, its data; data NULL: the wait timed out).
SELECT data, data IS NULL AS timed_out
FROM chit_signals WHERE job_id = %(id)s::text AND name = %(name)s::text

-- name: waited_jobs
-- The jobs among :ids that exist, in its order.
SELECT j.id, j.kind, j.state, j.tenant, j.result, j.result_external, j.error
FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS w(id, n) JOIN chit_jobs AS j ON j.id = w.id
ORDER BY w.n

-- name: wait_timed_out
-- Whether the job's last wait, for exactly :jobs, ended by its deadline.
SELECT coalesce(wait_jobs = %(jobs)s::text[]
                AND wait_until <= coalesce(%(now)s::timestamptz, now()), false) AS timed_out
FROM chit_jobs WHERE id = %(id)s::text
