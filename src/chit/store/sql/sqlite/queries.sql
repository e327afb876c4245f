-- SQLite queries. Times are text 'YYYY-MM-DDTHH:MM:SS.sssZ' made by strftime;
-- :now is the string 'now' (the database clock) unless a test passes a time.
-- Lease and retry offsets arrive as SQLite modifiers, e.g. '+30.000 seconds'.
-- The same names, in the same order, as sql/postgres/queries.sql; tests/store/
-- test_queries.py lists the names only one backend has, and why.

-- name: job_columns
-- A job as SQLStore._job reads it; queries.load puts it where a query says `{columns}`.
j.id, j.kind, j.queue, j.priority, j.payload, j.state, j.attempts, j.max_attempts, j.run_at,
j.created_at, j.updated_at, j.tenant, j.idempotency_key, j.lease_expires_at, j.worker,
j.progress_done, j.progress_total, j.progress_message, j.checkpoint, j.result,
j.result_external, j.error,
j.cancel_requested, j.started_at, j.finished_at, j.concurrency_key, j.timeout,
j.workflow_id, j.ref, j.run_on, j.expires_at, j.unique_key, j.debounce_key,
j.wait_signal, j.wait_jobs, j.wait_until, j.cost,
(SELECT e.depends_on FROM chit_edges AS e WHERE e.job_id = j.id) AS depends_on,
j.state = 'running' AND j.lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS stale

-- name: replay_reset
-- A failed or cancelled job made new (replay): queries.load puts it where a
-- replay query says so. History (attempt records) is kept.
state = CASE WHEN deps_pending > 0 THEN 'waiting' ELSE 'queued' END,
    attempts = 0, hand_backs = 0,
    run_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
    error = NULL, result = NULL, result_external = 0, checkpoint = NULL,
    progress_done = NULL, progress_total = NULL, progress_message = NULL, cancel_requested = 0,
    lease_token = NULL, lease_expires_at = NULL, finished_at = NULL, started_at = NULL,
    expires_at = NULL, debounce_key = NULL,
    wait_signal = NULL, wait_jobs = NULL, wait_until = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')

-- name: unexpired
-- What a claim asks of a queued job's expiry (DESIGN.md "Time": a job not
-- started by then ends cancelled): none, not yet passed, or the job started
-- before (a retry or a snooze). queries.load puts it where a claim says so;
-- expire_jobs cancels the jobs it leaves behind.
(expires_at IS NULL OR started_at IS NOT NULL
 OR expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now))

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
SELECT count(*) > 0 FROM sqlite_master WHERE name = 'chit_schema_migrations'

-- name: schema_version
SELECT coalesce(max(version), 0) FROM chit_schema_migrations

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS chit_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
)

-- name: record_migration
INSERT INTO chit_schema_migrations (version, name, applied_at)
VALUES (:version, :name, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))

-- name: enqueue
-- One job: a batch read from JSON, as PostgreSQL inserts it, costs SQLite some
-- 50 us more per job (one job a call: 3,300 jobs/s, 2,000 from JSON).
INSERT INTO chit_jobs (
    id, kind, queue, priority, payload, tenant, idempotency_key, request_hash,
    max_attempts, concurrency_key, timeout, run_at, created_at, updated_at,
    state, workflow_id, ref, run_on, dependents, deps_pending, error, finished_at,
    expires_at, unique_key, traceparent, debounce_key, debounce_until, cost
) VALUES (
    :id, :kind, :queue, :priority, :payload, :tenant, :idempotency_key, :request_hash,
    :max_attempts, :concurrency_key, :timeout,
    -- :debounce and :debounce_max are modifiers ('+5.000 seconds'), or NULL;
    -- tested first, so a plain job computes no time it does not store.
    CASE WHEN :debounce IS NULL THEN coalesce(:run_at, strftime('%Y-%m-%dT%H:%M:%fZ', :now))
         ELSE strftime('%Y-%m-%dT%H:%M:%fZ', :now, :debounce) END,
    strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    :state, :workflow_id, :ref, :run_on, :dependents, :deps_pending, :error,
    CASE :state WHEN 'cancelled' THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    -- :expires_in is a modifier ('+30.000 seconds'), or NULL.
    CASE WHEN :expires_in IS NOT NULL THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now, :expires_in)
         ELSE :expires_at END,
    :unique_key,
    :traceparent,
    :debounce_key,
    CASE WHEN :debounce_max IS NOT NULL THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now, :debounce_max) END,
    :cost
)
-- Any key: the idempotency key (chit_jobs_idempotency), the unique key of an
-- active job (chit_jobs_unique) or the debounce key of one not started
-- (chit_jobs_debounce); the store then finds the job that holds it. No row
-- changed: not inserted. (Its created_at is :now, which the store passes.)
ON CONFLICT DO NOTHING

-- name: clock
-- The database clock read once, for statements that must agree on the time.
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now

-- name: find_by_idempotency_key
-- The jobs holding the keys of the batch `enqueue` did not insert. A join, not
-- `(tenant, idempotency_key) IN`, which SQLite would seek on chit_jobs_tenant_id:
-- every job of the tenant.
SELECT j.tenant, j.idempotency_key, j.id, j.request_hash
FROM json_each(:jobs) AS k
JOIN chit_jobs AS j
  ON j.tenant = k.value ->> 'tenant' AND j.idempotency_key = k.value ->> 'idempotency_key'

-- name: find_by_unique_key
-- The active jobs holding the unique keys of the batch `enqueue` did not insert
-- (chit_jobs_unique).
SELECT j.tenant, j.unique_key, j.id
FROM json_each(:jobs) AS k
JOIN chit_jobs AS j
  ON j.tenant = k.value ->> 'tenant' AND j.unique_key = k.value ->> 'unique_key'
WHERE j.unique_key IS NOT NULL AND j.state IN ('waiting', 'queued', 'running')

-- name: debounce
-- The jobs of the batch `enqueue` did not insert for their debounce key: the
-- holder takes each one's payload and start (bounded by its debounce_until),
-- if it is of the same kind; its kind is returned either way, for the store
-- to refuse a key held by another kind. One item a key (the store sends the
-- last of each: SQLite would pick any of several).
UPDATE chit_jobs AS j
SET payload = CASE WHEN j.kind = k.value ->> 'kind' THEN k.value -> 'payload' ELSE j.payload END,
    run_at = CASE WHEN j.kind = k.value ->> 'kind'
                  THEN min(strftime('%Y-%m-%dT%H:%M:%fZ', :now,
                                    (k.value ->> 'debounce') || ' seconds'),
                           j.debounce_until)
                  ELSE j.run_at END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM json_each(:jobs) AS k
WHERE j.tenant = k.value ->> 'tenant' AND j.debounce_key = k.value ->> 'debounce_key'
  AND j.state = 'queued' AND j.started_at IS NULL
RETURNING id, kind, tenant, debounce_key

-- name: has_due
-- INDEXED BY: the same index and order the claim walks (without statistics SQLite
-- picks chit_jobs_state_id). Both still step over delayed jobs of a priority
-- before finding none due: 10 ms per idle look at 100,000 delayed jobs.
SELECT 1 FROM chit_jobs INDEXED BY chit_jobs_claimable
WHERE state = 'queued' AND queue = :queue AND run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND {unexpired}
LIMIT 1

-- name: claim
UPDATE chit_jobs
SET state = 'running',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(12))),
    lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now, :lease),
    worker = :worker,
    started_at = coalesce(started_at, strftime('%Y-%m-%dT%H:%M:%fZ', :now)),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
-- Walk chit_jobs_claimable in its own order and stop at :limit. `+run_at` keeps
-- SQLite, once it has statistics (ANALYZE, PRAGMA optimize), from skip-scanning
-- every priority for due rows and sorting them all: 9 ms a claim at 10,000
-- queued jobs instead of 0.01 ms.
WHERE id IN (
    SELECT id FROM chit_jobs INDEXED BY chit_jobs_claimable
    WHERE state = 'queued' AND queue = :queue
      AND +run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now) AND {unexpired}
      -- {held} leaves the limited and paused kinds to the flow claim
      -- (SQLStore._flow_for, kinds_term).
      AND {held}
    ORDER BY priority, run_at, id
    LIMIT :limit
)
RETURNING id, kind, queue, priority, run_at, payload, attempts, max_attempts, lease_token,
          checkpoint, progress_done, progress_total, concurrency_key, timeout,
          EXISTS (SELECT 1 FROM chit_edges AS e WHERE e.job_id = chit_jobs.id)
              AS has_dependencies, tenant, traceparent, updated_at AS claimed_at, cost

-- name: open_attempt
INSERT INTO chit_attempts (job_id, attempt, worker, started_at, kind, concurrency_key, cost)
VALUES (:job_id, :attempt, :worker, strftime('%Y-%m-%dT%H:%M:%fZ', :now), :kind, :concurrency_key,
        :cost)

-- name: close_attempt
UPDATE chit_attempts
SET finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now), outcome = :outcome, error = :error
WHERE job_id = :id AND finished_at IS NULL

-- name: heartbeat
-- `+j.state`: SQLite (which has no statistics) would otherwise walk every running
-- job by chit_jobs_state_id and match each against the beats; this way each beat
-- is one primary-key lookup (a beat of 8 jobs among 1,000 running: 3.3 ms, now 0.05 ms).
UPDATE chit_jobs AS j
SET lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now, :lease),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    progress_done = CASE WHEN b.has_progress THEN b.done ELSE j.progress_done END,
    progress_total = CASE WHEN b.has_progress THEN b.total ELSE j.progress_total END,
    progress_message = CASE WHEN b.has_progress THEN b.message ELSE j.progress_message END
FROM (
    SELECT value ->> 'id' AS id, value ->> 'token' AS token,
           value ->> 'has_progress' AS has_progress,
           value ->> 'done' AS done, value ->> 'total' AS total,
           value ->> 'message' AS message
    FROM json_each(:beats)
) AS b
WHERE j.id = b.id AND j.lease_token = b.token AND +j.state = 'running'
RETURNING id, cancel_requested

-- name: checkpoint
UPDATE chit_jobs
SET checkpoint = :checkpoint,
    progress_done = CASE WHEN :has_progress THEN :done ELSE progress_done END,
    progress_total = CASE WHEN :has_progress THEN :total ELSE progress_total END,
    progress_message = CASE WHEN :has_progress THEN :message ELSE progress_message END,
    lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now, :lease),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'

-- name: step
-- A durable step's stored result (JobContext.step); no row: not run yet.
SELECT result FROM chit_steps WHERE job_id = :id AND name = :name

-- name: save_step
-- Fenced on the job's lease: a worker that lost the job stores nothing (no row
-- selected). A step already stored keeps its first result; the no-op update
-- makes the row count say only whether the lease was held.
INSERT INTO chit_steps (job_id, name, attempt, result, created_at)
SELECT id, :name, attempts, :result, strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM chit_jobs WHERE id = :id AND lease_token = :token AND state = 'running'
ON CONFLICT (job_id, name) DO UPDATE SET result = chit_steps.result

-- name: append_output
-- JobContext.emit's batch, fenced on the lease: moves the job's counters and
-- answers the last seq and the attempt the values carry; no row: fenced out.
UPDATE chit_jobs
SET output_seq = output_seq + :n, output_bytes = output_bytes + :bytes
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING output_seq, attempts

-- name: insert_output
-- The batch (a JSON array of JSON texts) numbered from :first, after append_output.
INSERT INTO chit_output (job_id, seq, attempt, data, at)
SELECT :id, :first + key, :attempt, value, strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM json_each(:items)

-- name: output_used
SELECT output_seq, output_bytes FROM chit_jobs
WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)

-- name: output
SELECT seq, attempt, data, at FROM chit_output
WHERE job_id = :id AND seq > :after ORDER BY seq LIMIT :limit

-- name: output_heads
-- What the event streams' watcher reads when the file changed: which watched
-- jobs have output, and how far.
SELECT id, output_seq FROM chit_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND output_seq > 0

-- name: succeed
UPDATE chit_jobs
SET state = 'succeeded', result = :result, result_external = :result_external,
    progress_done = CASE WHEN :has_progress THEN :done ELSE progress_done END,
    progress_total = CASE WHEN :has_progress THEN :total ELSE progress_total END,
    progress_message = CASE WHEN :has_progress THEN :message ELSE progress_message END,
    lease_token = NULL, lease_expires_at = NULL, error = NULL,
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING 'succeeded' AS outcome, NULL AS error, state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: succeed_many
-- The Succeeded outcomes of a batch whose results are stored inline (:items, a
-- JSON array of {id, token, result (the JSON text, as a string: stored as
-- sent), has_progress, done, total, message}), each fenced by its lease: one
-- statement, where one a job cost the worker a call into SQLite each.
UPDATE chit_jobs AS j
SET state = 'succeeded', result = o.result, result_external = 0,
    progress_done = CASE WHEN o.has_progress THEN o.done ELSE j.progress_done END,
    progress_total = CASE WHEN o.has_progress THEN o.total ELSE j.progress_total END,
    progress_message = CASE WHEN o.has_progress THEN o.message ELSE j.progress_message END,
    lease_token = NULL, lease_expires_at = NULL, error = NULL,
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM (
    SELECT value ->> 'id' AS id, value ->> 'token' AS token, value ->> 'result' AS result,
           value ->> 'has_progress' AS has_progress, value ->> 'done' AS done,
           value ->> 'total' AS total, value ->> 'message' AS message
    FROM json_each(:items)
) AS o
WHERE j.id = o.id AND j.lease_token = o.token AND +j.state = 'running'
RETURNING id, state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: close_attempts_succeeded
-- The attempt records of the jobs succeed_many recorded (:ids, a JSON array).
UPDATE chit_attempts
SET finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now), outcome = 'succeeded', error = NULL
WHERE job_id IN (SELECT value FROM json_each(:ids)) AND finished_at IS NULL

-- name: store_result
INSERT INTO chit_results (job_id, result) VALUES (:id, :result)
ON CONFLICT (job_id) DO UPDATE SET result = excluded.result

-- name: fail
UPDATE chit_jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN :retry IS NULL OR attempts >= max_attempts THEN 'failed'
                 ELSE 'queued' END,
    run_at = CASE WHEN :retry IS NULL OR attempts >= max_attempts OR cancel_requested
                  THEN run_at ELSE strftime('%Y-%m-%dT%H:%M:%fZ', :now, :retry) END,
    finished_at = CASE WHEN :retry IS NULL OR attempts >= max_attempts OR cancel_requested
                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    error = :error, lease_token = NULL, lease_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING CASE state WHEN 'queued' THEN 'retried' ELSE state END AS outcome, error, state,
          (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: release
-- The first :free hand-backs of a job do not use up its attempt; each later one
-- does, and one that leaves no attempt fails the job. SET reads the old row.
UPDATE chit_jobs
SET hand_backs = hand_backs + 1,
    attempts = CASE WHEN hand_backs < :free THEN attempts - 1 ELSE attempts END,
    state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN hand_backs >= :free AND attempts >= max_attempts THEN 'failed'
                 ELSE 'queued' END,
    error = CASE WHEN NOT cancel_requested AND hand_backs >= :free
                      AND attempts >= max_attempts
                 THEN 'handed back ' || (hand_backs + 1) || ' times without finishing'
                 ELSE error END,
    run_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    finished_at = CASE WHEN cancel_requested
                            OR (hand_backs >= :free AND attempts >= max_attempts)
                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    lease_token = NULL, lease_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING CASE state WHEN 'queued' THEN 'released' ELSE state END AS outcome,
          CASE state WHEN 'failed' THEN error END AS error, state,
          (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: snooze
-- chit.Snooze: queued again after :delay (a modifier), the attempt not counted
-- (the claim counted it: take it back) and no hand-back used.
UPDATE chit_jobs
SET attempts = attempts - 1,
    state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    run_at = CASE WHEN cancel_requested THEN run_at
                  ELSE strftime('%Y-%m-%dT%H:%M:%fZ', :now, :delay) END,
    finished_at = CASE WHEN cancel_requested THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    lease_token = NULL, lease_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING CASE state WHEN 'queued' THEN 'snoozed' ELSE state END AS outcome, NULL AS error,
          state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: mark_cancelled
UPDATE chit_jobs
SET state = 'cancelled', lease_token = NULL, lease_expires_at = NULL,
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING 'cancelled' AS outcome, NULL AS error, state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: count_down
-- Workflows: the dependents of jobs that just ended (:ids, a JSON array) count
-- them done; a waiting one whose last dependency that was becomes queued. On a
-- success every dependent counts it; on a failure or cancellation only the
-- run_on = 'finished' ones (:callbacks_only). Read from the finished jobs' own
-- rows: work proportional to their dependents, never a scan of waiting jobs.
UPDATE chit_jobs AS j
SET deps_pending = j.deps_pending - c.n,
    state = CASE WHEN j.state = 'waiting' AND j.deps_pending = c.n THEN 'queued'
                 ELSE j.state END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM (
    SELECT d.value AS id, count(*) AS n
    FROM chit_jobs AS x, json_each(x.dependents) AS d
    WHERE x.id IN (SELECT value FROM json_each(:ids))
    GROUP BY d.value
) AS c
WHERE j.id = c.id AND j.deps_pending > 0 AND (NOT :callbacks_only OR j.run_on = 'finished')
RETURNING id

-- name: count_up
-- The reverse, for jobs a replay took out of failed or cancelled (:ids): their
-- run_on = 'finished' dependents count them pending again, and one that was
-- released but not yet claimed waits again. One started since its release or
-- its own replay (it runs, waits for a signal, or is queued to go on or to try
-- again) is left alone: it runs on the outcome it was released by.
UPDATE chit_jobs AS j
SET deps_pending = j.deps_pending + c.n,
    state = CASE WHEN j.state = 'queued' THEN 'waiting' ELSE j.state END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM (
    SELECT d.value AS id, count(*) AS n
    FROM chit_jobs AS x, json_each(x.dependents) AS d
    WHERE x.id IN (SELECT value FROM json_each(:ids))
    GROUP BY d.value
) AS c
WHERE j.id = c.id AND j.run_on = 'finished'
  AND j.state <> 'running' AND NOT (j.state = 'waiting' AND j.deps_pending = 0)
  AND NOT (j.state = 'queued' AND j.started_at IS NOT NULL)
RETURNING id

-- name: cancel_dependents
-- The waiting dependents of jobs that just ended failed or cancelled (:ids),
-- cancelled with the first such dependency's id and state ("dependency <id>
-- failed"); the store repeats this for those returned, all the way down.
UPDATE chit_jobs AS j
SET state = 'cancelled', error = 'dependency ' || c.cause || ' ' || c.how,
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM (
    -- min() makes SQLite read x.state from the row with the smallest id.
    SELECT d.value AS id, min(x.id) AS cause, x.state AS how
    FROM chit_jobs AS x, json_each(x.dependents) AS d
    WHERE x.id IN (SELECT value FROM json_each(:ids))
    GROUP BY d.value
) AS c
WHERE j.id = c.id AND j.state = 'waiting' AND j.run_on = 'succeeded'
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: uncancel_dependents
-- Replay's reverse of cancel_dependents: the dependents that a job now replayed
-- (:ids) cancelled wait again; the store repeats this for those returned.
UPDATE chit_jobs AS j
SET state = 'waiting', error = NULL, finished_at = NULL, cancel_requested = 0,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM (
    SELECT DISTINCT d.value AS id, x.id AS cause
    FROM chit_jobs AS x, json_each(x.dependents) AS d
    WHERE x.id IN (SELECT value FROM json_each(:ids))
) AS c
WHERE j.id = c.id AND j.state = 'cancelled' AND j.run_on = 'succeeded'
  AND j.error IN ('dependency ' || c.cause || ' failed', 'dependency ' || c.cause || ' cancelled')
  AND {unique_free}
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: enqueue_edges
-- A workflow job's dependencies (:depends_on, a JSON array), beside its row:
-- see the migration *_edges.sql for why not in it.
INSERT INTO chit_edges (job_id, depends_on) VALUES (:id, :depends_on)

-- name: lock_dependencies
-- The stored jobs a new batch depends on (:ids), as they are now: the write lock
-- SQLite's transaction holds keeps them so until the batch is in.
SELECT id, tenant, state, workflow_id FROM chit_jobs
WHERE id IN (SELECT value FROM json_each(:ids))

-- name: add_dependents
-- Items: {id, dependents (a JSON array of new job ids)}.
UPDATE chit_jobs AS j
SET dependents = CASE WHEN j.dependents IS NULL THEN i.dependents
                      ELSE (SELECT json_group_array(value) FROM (
                                SELECT value FROM json_each(j.dependents)
                                UNION ALL SELECT value FROM json_each(i.dependents)))
                 END
FROM (SELECT value ->> 'id' AS id, value -> 'dependents' AS dependents
      FROM json_each(:items)) AS i
WHERE j.id = i.id

-- name: dependencies
-- A job's direct dependencies in the order given (those pruned since left out).
SELECT x.id, x.kind, x.state, x.result, x.result_external
FROM chit_edges AS e, json_each(e.depends_on) AS d
JOIN chit_jobs AS x ON x.id = d.value
WHERE e.job_id = :id
ORDER BY d.key

-- name: dependency_states
SELECT x.state, count(*) AS n
FROM chit_edges AS e, json_each(e.depends_on) AS d
JOIN chit_jobs AS x ON x.id = d.value
WHERE e.job_id = :id
GROUP BY x.state

-- name: dependents
SELECT d.value AS id
FROM chit_jobs AS j, json_each(j.dependents) AS d
WHERE j.id = :id AND (:tenant IS NULL OR j.tenant = :tenant)
ORDER BY d.key

-- name: workflow
SELECT j.id, j.ref, j.kind, j.state, j.run_on, j.tenant,
       (SELECT e.depends_on FROM chit_edges AS e WHERE e.job_id = j.id) AS depends_on
FROM chit_jobs AS j
WHERE j.workflow_id = :workflow_id AND (:tenant IS NULL OR j.tenant = :tenant)
ORDER BY j.id

-- name: cancel_workflow
-- Every job of the workflow that is not terminal: waiting and queued ones
-- cancelled, running ones asked to stop.
UPDATE chit_jobs AS j
SET state = CASE WHEN j.state IN ('waiting', 'queued') THEN 'cancelled' ELSE j.state END,
    cancel_requested = 1,
    finished_at = CASE WHEN j.state IN ('waiting', 'queued')
                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) ELSE j.finished_at END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE j.workflow_id = :workflow_id AND (:tenant IS NULL OR j.tenant = :tenant)
  AND j.state IN ('waiting', 'queued', 'running')
RETURNING id, state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: rescue_expired
-- INDEXED BY: the expired leases only, not every running job by chit_jobs_state_id,
-- which SQLite (it has no statistics) would pick. The store then closes the
-- attempts of exactly the ids returned (expire_attempts): a second look at the
-- clock could miss a lease that expired in between, leaving a queued job with an
-- open attempt.
UPDATE chit_jobs INDEXED BY chit_jobs_leases
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
    error = CASE WHEN cancel_requested THEN error
                 ELSE 'worker lost: lease expired after ' || attempts || ' attempts' END,
    finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts
                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    run_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    lease_token = NULL, lease_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE state = 'running' AND lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', :now)
RETURNING id, state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: expire_attempts
-- The attempts still open for these jobs: those rescue_expired just took back,
-- and, at claim, any an earlier failure left open, so that a job has one open
-- attempt at most: the one an outcome closes.
UPDATE chit_attempts
SET finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now), outcome = 'lease_expired',
    error = 'lease expired: worker lost'
WHERE finished_at IS NULL AND job_id IN (SELECT value FROM json_each(:ids))

-- name: has_expired
-- Whether expire_jobs has anything to do: a read, so an idle maintenance tick
-- takes no write lock. INDEXED BY: the jobs with an expiry not yet started only.
SELECT 1 FROM chit_jobs INDEXED BY chit_jobs_expiry
WHERE expires_at IS NOT NULL AND state IN ('waiting', 'queued')
  AND expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now) AND started_at IS NULL
LIMIT 1

-- name: expire_jobs
-- Jobs not started by their expires_at (DESIGN.md "Time"), which claims skip:
-- cancelled, and their dependents with them (the store settles them).
UPDATE chit_jobs INDEXED BY chit_jobs_expiry
SET state = 'cancelled', error = 'expired before it started',
    finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE expires_at IS NOT NULL AND state IN ('waiting', 'queued')
  AND expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now) AND started_at IS NULL
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: get
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id = :id AND (:tenant IS NULL OR j.tenant = :tenant)

-- name: list_recent
-- `list` picks one of these by the filters given: each walks the index it names
-- by its equalities, in id order, and checks the other filters (`+`) on the rows
-- it finds. Without statistics SQLite cannot weigh a tenant against a state,
-- kind or queue, so the tenant seeks only alone or with a state and a kind
-- (chit_jobs_state_kind). {cursor} is `j.id < :cursor`, or `1` on the first
-- page. Every job, newest first: the primary key.
SELECT {columns}
FROM chit_jobs AS j
WHERE {cursor}
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_by_tenant
-- chit_jobs_tenant_id.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.tenant = :tenant AND {cursor}
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_by_state
-- chit_jobs_state_id: a waiting or finished state (migration 016).
SELECT {columns}
FROM chit_jobs AS j
WHERE j.state = :state AND j.state NOT IN ('queued', 'running') AND {cursor}
  AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_by_kind
-- chit_jobs_kind_id.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.kind = :kind AND {cursor}
  AND (:state IS NULL OR +j.state = :state) AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_by_queue
-- chit_jobs_queue_id.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.queue = :queue AND {cursor}
  AND (:state IS NULL OR +j.state = :state) AND (:kind IS NULL OR +j.kind = :kind)
  AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_by_state_kind_tenant
-- chit_jobs_state_kind, seeking on all three: a waiting or finished state.
SELECT {columns}
FROM chit_jobs AS j
WHERE j.state = :state AND j.state NOT IN ('queued', 'running')
  AND j.kind = :kind AND j.tenant = :tenant
  AND {cursor}
  AND (:queue IS NULL OR +j.queue = :queue)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_queued
-- The backlog by chit_jobs_claimable, the index its own transitions keep (no
-- index over every job's state holds queued ones): the cost follows the queued
-- jobs, which it sorts, never the finished ones.
SELECT {columns}
FROM chit_jobs AS j INDEXED BY chit_jobs_claimable
WHERE j.state = 'queued' AND {cursor}
  AND (:queue IS NULL OR j.queue = :queue) AND (:kind IS NULL OR +j.kind = :kind)
  AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: list_running
-- The work in hand by chit_jobs_leases, likewise.
SELECT {columns}
FROM chit_jobs AS j INDEXED BY chit_jobs_leases
WHERE j.state = 'running' AND {cursor}
  AND (:queue IS NULL OR +j.queue = :queue) AND (:kind IS NULL OR +j.kind = :kind)
  AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND (:since IS NULL OR j.created_at >= :since)
ORDER BY j.id DESC
LIMIT :limit

-- name: get_result
SELECT CASE WHEN j.result_external THEN r.result ELSE j.result END AS result
FROM chit_jobs AS j LEFT JOIN chit_results AS r ON r.job_id = j.id
WHERE j.id = :id AND (:tenant IS NULL OR j.tenant = :tenant)

-- name: attempts
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error
FROM chit_attempts WHERE job_id = :id ORDER BY rowid

-- name: steps
-- A job's stored steps, in the order they were stored.
SELECT name, attempt, result, created_at FROM chit_steps WHERE job_id = :id ORDER BY rowid

-- name: cancel
UPDATE chit_jobs
SET state = CASE WHEN state IN ('queued', 'waiting') THEN 'cancelled' ELSE state END,
    cancel_requested = 1,
    finished_at = CASE WHEN state IN ('queued', 'waiting')
                       THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) ELSE finished_at END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)
  AND state IN ('queued', 'waiting', 'running')
RETURNING CASE state WHEN 'cancelled' THEN 'cancelled' ELSE 'requested' END AS result,
          (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: update_job
-- An edit of a job not yet started (Store.update): each of run_at, priority
-- and payload given replaces the stored one; run_now makes it due now, or
-- leaves it where it stands in line when it was due already.
UPDATE chit_jobs
SET run_at = CASE WHEN :run_now THEN min(run_at, strftime('%Y-%m-%dT%H:%M:%fZ', :now))
                  ELSE coalesce(:run_at, run_at) END,
    priority = coalesce(:priority, priority),
    payload = coalesce(:payload, payload),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)
  AND state IN ('queued', 'waiting')
RETURNING id

-- name: job_state
SELECT state FROM chit_jobs WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)

-- name: failures
SELECT kind,
       CASE WHEN instr(error, char(10)) > 0 THEN substr(error, 1, instr(error, char(10)) - 1)
            ELSE error END AS first_line,
       count(*) AS count, min(finished_at) AS first_seen, max(finished_at) AS last_seen,
       max(id) AS latest_id
FROM chit_jobs
WHERE state = 'failed' AND state NOT IN ('queued', 'running')
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY kind, first_line
ORDER BY count DESC, max(finished_at) DESC

-- name: stats_by_state_kind
-- Waiting and finished jobs by chit_jobs_state_kind, queued ones by
-- chit_jobs_groups, running ones by chit_jobs_leases (migration 016).
SELECT state, kind, count(*) AS n FROM chit_jobs
WHERE state NOT IN ('queued', 'running') AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY state, kind
UNION ALL
SELECT 'queued', kind, count(*) FROM chit_jobs INDEXED BY chit_jobs_groups
WHERE state = 'queued' AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY kind
UNION ALL
SELECT 'running', kind, count(*) FROM chit_jobs INDEXED BY chit_jobs_leases
WHERE state = 'running' AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY kind

-- name: stats_last_hour
-- From chit_jobs_finished alone: `GROUP BY state` would have SQLite walk every
-- job in state order by chit_jobs_state_id (200 ms at a million jobs, now 2 ms).
SELECT state, count(*) AS n FROM chit_jobs
WHERE finished_at >= strftime('%Y-%m-%dT%H:%M:%fZ', :now, '-1 hour')
  AND (:tenant IS NULL OR tenant = :tenant)
GROUP BY +state

-- name: stats_queue_lag
SELECT (julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now)) - julianday(min(run_at))) * 86400.0
FROM chit_jobs INDEXED BY chit_jobs_groups
WHERE state = 'queued' AND run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND (:tenant IS NULL OR tenant = :tenant)

-- name: stats_stale
-- The expired leases only (see rescue_expired): the store asks before every rescue.
SELECT count(*) FROM chit_jobs INDEXED BY chit_jobs_leases
WHERE state = 'running' AND lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND (:tenant IS NULL OR tenant = :tenant)

-- name: prune
-- By chit_jobs_finished: `+state` keeps SQLite from walking every terminal job
-- by chit_jobs_state_id, which took the write lock for a third of a second at a
-- million jobs even with nothing to delete (workers prune every few minutes
-- when CHIT_RETENTION is set).
-- At most :batch rows a statement, so a large first prune never holds the write
-- lock for long (the store loops until a batch comes back short).
DELETE FROM chit_jobs
WHERE id IN (
    SELECT id FROM chit_jobs
    WHERE finished_at < strftime('%Y-%m-%dT%H:%M:%fZ', :now, :age)
      AND +state IN ('succeeded', 'failed', 'cancelled')
    LIMIT :batch
)

-- name: replay
-- By ids (a JSON array): the primary key (`+`: not an index on the state or tenant).
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.id IN (SELECT value FROM json_each(:ids)) AND +j.state IN ('failed', 'cancelled')
  AND (:tenant IS NULL OR +j.tenant = :tenant)
  AND {unique_free}
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: replay_failed
-- Failed jobs by error prefix and time: chit_jobs_state_id, {tenant} only checked
-- on the failed jobs (`+j.tenant`) rather than walking all the tenant's jobs.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND j.state NOT IN ('queued', 'running') AND {tenant}
  AND (:error_prefix IS NULL OR substr(j.error, 1, length(:error_prefix)) = :error_prefix)
  AND (:since IS NULL OR j.finished_at >= :since)
  AND {unique_free}
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: replay_failed_kind
-- The same for one kind: chit_jobs_state_kind, seeking on the tenant too.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND j.state NOT IN ('queued', 'running')
  AND j.kind = :kind AND {tenant}
  AND (:error_prefix IS NULL OR substr(j.error, 1, length(:error_prefix)) = :error_prefix)
  AND (:since IS NULL OR j.finished_at >= :since)
  AND {unique_free}
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: data_version
PRAGMA data_version

-- The HTTP API

-- name: get_many
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id IN (SELECT value FROM json_each(:ids))

-- name: attempt_stats
-- bucket: how many bounds lie below the duration, so the first bound it fits
-- under (Prometheus `le`); NULL for attempts still running. 200k attempts: 0.8 s.
WITH bounds AS MATERIALIZED (SELECT value FROM json_each(:bounds))
SELECT kind, outcome, bucket, count(*) AS n, total(seconds) AS seconds
FROM (
    SELECT kind, outcome, seconds,
           CASE WHEN seconds IS NOT NULL
                THEN (SELECT count(*) FROM bounds WHERE value < seconds) END AS bucket
    FROM (
        SELECT j.kind, t.outcome,
               (julianday(t.finished_at) - julianday(t.started_at)) * 86400.0 AS seconds
        FROM chit_attempts AS t JOIN chit_jobs AS j ON j.id = t.job_id
        WHERE :tenant IS NULL OR j.tenant = :tenant
    )
)
GROUP BY kind, outcome, bucket

-- name: create_api_key
INSERT INTO chit_api_keys (id, name, tenant, scopes, key_hash, created_at)
VALUES (:id, :name, :tenant, :scopes, :key_hash, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
RETURNING id, name, tenant, scopes, created_at, revoked_at

-- name: find_api_key
SELECT id, name, tenant, scopes, created_at, revoked_at FROM chit_api_keys
WHERE key_hash = :key_hash AND revoked_at IS NULL

-- name: list_api_keys
SELECT id, name, tenant, scopes, created_at, revoked_at FROM chit_api_keys
WHERE :include_revoked OR revoked_at IS NULL
ORDER BY created_at, id

-- name: revoke_api_key
UPDATE chit_api_keys SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE id = :id AND revoked_at IS NULL

-- name: create_session
-- The dashboard's sessions (chit.store.Sessions). :idle and :max are offsets ('+600.000 seconds').
INSERT INTO chit_sessions (id_hash, key_hash, created_at, idle_expires_at, expires_at)
VALUES (
    :id_hash, :key_hash,
    strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    strftime('%Y-%m-%dT%H:%M:%fZ', :now, :idle),
    strftime('%Y-%m-%dT%H:%M:%fZ', :now, :max)
)

-- name: find_session
-- A live session, and whether its idle expiry is still within :slack of where a
-- touch would move it (then no write is needed: a page view costs no write lock).
SELECT key_hash, created_at, idle_expires_at, expires_at,
       idle_expires_at >= min(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :slack), expires_at) AS fresh
FROM chit_sessions
WHERE id_hash = :id_hash
  AND idle_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)

-- name: touch_session
-- The session, if it has not expired, its idle expiry moved on (never past the
-- absolute one); nothing once either has passed. (Times in one format compare as text.)
UPDATE chit_sessions
SET idle_expires_at = min(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :idle), expires_at)
WHERE id_hash = :id_hash
  AND idle_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)
RETURNING key_hash, created_at, idle_expires_at, expires_at

-- name: delete_session
DELETE FROM chit_sessions WHERE id_hash = :id_hash

-- name: delete_key_sessions
DELETE FROM chit_sessions
WHERE key_hash IN (SELECT key_hash FROM chit_api_keys WHERE id = :id)

-- name: prune_sessions
DELETE FROM chit_sessions
WHERE idle_expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
   OR expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)

-- The dashboard. {tenant} is `1` (every tenant) or an equality on j.tenant, so that a
-- tenant's query seeks on the tenant column of the index instead of filtering.

-- name: count_by_state_kind
-- A loose index scan of chit_jobs_state_kind finds each waiting or finished
-- state's kinds (one seek per kind), and one of chit_jobs_groups each queue's
-- queued kinds; then each pair is counted up to `cap` entries, from the index
-- alone: the cost is bounded by kinds x cap, not by the size of the table.
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
    SELECT (SELECT min(queue) FROM chit_jobs INDEXED BY chit_jobs_groups WHERE state = 'queued')
    UNION ALL
    SELECT (SELECT min(j.queue) FROM chit_jobs AS j INDEXED BY chit_jobs_groups
            WHERE j.state = 'queued' AND j.queue > queues.queue)
    FROM queues WHERE queue IS NOT NULL
),
queued(queue, kind) AS (
    SELECT queue, (SELECT min(j.kind) FROM chit_jobs AS j INDEXED BY chit_jobs_groups
                   WHERE j.state = 'queued' AND j.queue = queues.queue)
    FROM queues WHERE queue IS NOT NULL
    UNION ALL
    SELECT queue, (SELECT min(j.kind) FROM chit_jobs AS j INDEXED BY chit_jobs_groups
                   WHERE j.state = 'queued' AND j.queue = queued.queue AND j.kind > queued.kind)
    FROM queued WHERE kind IS NOT NULL
)
SELECT state, kind,
       (SELECT count(*) FROM (
            SELECT 1 FROM chit_jobs AS j
            WHERE j.state = pairs.state AND j.state NOT IN ('queued', 'running')
              AND j.kind = pairs.kind AND {tenant}
            LIMIT :cap)) AS n
FROM pairs
WHERE kind IS NOT NULL
UNION ALL
SELECT 'queued', kind, min(sum(n), :cap) FROM (
    SELECT kind,
           (SELECT count(*) FROM (
                SELECT 1 FROM chit_jobs AS j INDEXED BY chit_jobs_groups
                WHERE j.state = 'queued' AND j.queue = queued.queue AND j.kind = queued.kind
                  AND {tenant}
                LIMIT :cap)) AS n
    FROM queued WHERE kind IS NOT NULL)
GROUP BY kind
UNION ALL
SELECT 'running', j.kind, min(count(*), :cap) FROM chit_jobs AS j INDEXED BY chit_jobs_leases
WHERE j.state = 'running' AND {tenant}
GROUP BY j.kind

-- name: finished_per_minute
-- Read from chit_jobs_finished alone; the cost grows with the last hour's
-- finished jobs, not with the table. `+j.state` keeps SQLite (which has no
-- statistics) from walking every succeeded job by chit_jobs_state_id instead, and
-- {tenant} is `+j.tenant = :tenant` for the same reason (chit_jobs_tenant_id).
SELECT substr(j.finished_at, 1, 16) || ':00.000Z' AS minute, j.kind, j.state, count(*) AS n
FROM chit_jobs AS j
WHERE j.finished_at >= strftime('%Y-%m-%dT%H:%M:%fZ', :now, '-1 hour')
  AND +j.state IN ('succeeded', 'failed') AND {tenant}
GROUP BY minute, j.kind, j.state

-- name: oldest_queued
-- The queued jobs (chit_jobs_groups, which holds their run_at and tenant), whose
-- number is the backlog; {tenant} is `+j.tenant = :tenant`, so a tenant's look
-- does not walk all its jobs by chit_jobs_tenant_id instead.
SELECT {columns}
FROM chit_jobs AS j INDEXED BY chit_jobs_groups
WHERE j.state = 'queued' AND j.run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now) AND {tenant}
ORDER BY j.run_at, j.id
LIMIT 1

-- name: stale_jobs
-- The expired leases in the order of chit_jobs_leases, which SQLite would not pick.
SELECT {columns}
FROM chit_jobs AS j INDEXED BY chit_jobs_leases
WHERE j.state = 'running' AND j.lease_expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND {tenant}
ORDER BY j.lease_expires_at
LIMIT :limit

-- name: search_id_prefix
-- A range of the primary key (chit.ids.id_prefix_range).
SELECT {columns}
FROM chit_jobs AS j
WHERE j.id >= :low AND j.id <= :high AND {tenant}
ORDER BY j.id DESC
LIMIT :limit

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
WHERE j.idempotency_key = :key AND {tenant}
ORDER BY j.id DESC
LIMIT :limit

-- name: replay_failure_group
-- One group of the failures report: this kind, and this exact first line.
UPDATE chit_jobs AS j
SET {replay_reset}
WHERE j.state = 'failed' AND j.state NOT IN ('queued', 'running')
  AND j.kind = :kind AND {tenant}
  AND (j.error = :error OR substr(j.error, 1, length(:error) + 1) = :error || char(10))
  AND {unique_free}
RETURNING id, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

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
WITH RECURSIVE kinds(kind) AS (
    SELECT (SELECT kind FROM chit_jobs INDEXED BY chit_jobs_groups
            WHERE state = 'queued' AND queue = :queue ORDER BY kind LIMIT 1)
    UNION ALL
    SELECT (SELECT j.kind FROM chit_jobs AS j INDEXED BY chit_jobs_groups
            WHERE j.state = 'queued' AND j.queue = :queue AND j.kind > kinds.kind
            ORDER BY j.kind LIMIT 1)
    FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT k.kind, g.tenant, g.concurrency_key
FROM kinds AS k JOIN chit_jobs AS g
  ON g.rowid = (SELECT j.rowid FROM chit_jobs AS j INDEXED BY chit_jobs_groups
                WHERE j.state = 'queued' AND j.queue = :queue AND j.kind = k.kind
                ORDER BY j.tenant, j.concurrency_key LIMIT 1)
WHERE k.kind IS NOT NULL

-- name: next_kind
-- The first group (kind, tenant, key) of the first kind after :kind with queued
-- jobs in the queue: one seek of chit_jobs_groups, whatever that kind's backlog.
SELECT kind, tenant, concurrency_key FROM chit_jobs INDEXED BY chit_jobs_groups
WHERE state = 'queued' AND queue = :queue AND kind > :kind
ORDER BY kind, tenant, concurrency_key
LIMIT 1

-- name: next_group
-- The group of the kind's queued jobs after (:tenant, :key): one seek.
SELECT tenant, concurrency_key FROM chit_jobs INDEXED BY chit_jobs_groups
WHERE state = 'queued' AND queue = :queue AND kind = :kind
  AND (tenant, concurrency_key) > (:tenant, :key)
ORDER BY tenant, concurrency_key
LIMIT 1

-- name: group_jobs
-- A group's due jobs in claim order.
SELECT id, kind, tenant, concurrency_key, priority, run_at, cost
FROM chit_jobs INDEXED BY chit_jobs_groups
WHERE state = 'queued' AND queue = :queue AND kind = :kind AND tenant = :tenant
  AND concurrency_key = :key AND run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND {unexpired}
ORDER BY priority, run_at, id
LIMIT :limit

-- name: kind_in_use
-- A kind's running jobs (a lease not yet expired: a killed worker's free
-- themselves at expiry), its attempts started within the rate window, and in
-- how many seconds the oldest of those leaves it (NULL without a window).
-- The running jobs by chit_jobs_leases: the leases not yet expired, as many as
-- the workers' slots at most.
SELECT (SELECT count(*) FROM chit_jobs INDEXED BY chit_jobs_leases
        WHERE state = 'running' AND kind = :kind
          AND lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS running,
       CASE WHEN :window IS NULL THEN 0 ELSE
       (SELECT count(*) FROM chit_attempts INDEXED BY chit_attempts_starts
        WHERE kind = :kind AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))
       END AS started,
       (julianday((SELECT min(started_at) FROM chit_attempts INDEXED BY chit_attempts_starts
                   WHERE kind = :kind
                     AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window)))
        - julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))) * 86400.0 AS frees_in

-- name: key_in_use
-- The same for one concurrency key of a kind.
SELECT (SELECT count(*) FROM chit_jobs INDEXED BY chit_jobs_leases
        WHERE state = 'running' AND kind = :kind AND concurrency_key = :key
          AND lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS running,
       CASE WHEN :window IS NULL THEN 0 ELSE
       (SELECT count(*) FROM chit_attempts INDEXED BY chit_attempts_key_starts
        WHERE kind = :kind AND concurrency_key = :key AND concurrency_key <> ''
          AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))
       END AS started,
       (julianday((SELECT min(started_at) FROM chit_attempts INDEXED BY chit_attempts_key_starts
                   WHERE kind = :kind AND concurrency_key = :key AND concurrency_key <> ''
                     AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window)))
        - julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))) * 86400.0 AS frees_in

-- name: kind_spent
-- A kind's cost spent within the budget's window (its attempts' costs, NULL
-- being 1), and in how many seconds the oldest of those leaves it.
SELECT coalesce(sum(coalesce(cost, 1)), 0) AS started, 0 AS running,
       (julianday(min(started_at))
        - julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))) * 86400.0 AS frees_in
FROM chit_attempts INDEXED BY chit_attempts_starts
WHERE kind = :kind AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window)

-- name: key_spent
-- The same for one concurrency key of a kind.
SELECT coalesce(sum(coalesce(cost, 1)), 0) AS started, 0 AS running,
       (julianday(min(started_at))
        - julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window))) * 86400.0 AS frees_in
FROM chit_attempts INDEXED BY chit_attempts_key_starts
WHERE kind = :kind AND concurrency_key = :key AND concurrency_key <> ''
  AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now, :window)

-- name: report_cost
-- The open attempt's cost replaced with what it spent, fenced on the lease.
UPDATE chit_attempts SET cost = :cost
WHERE job_id = :id AND finished_at IS NULL
  AND EXISTS (SELECT 1 FROM chit_jobs
              WHERE id = :id AND lease_token = :token AND state = 'running')

-- name: claim_ids
-- The jobs a flow claim chose (a JSON array of ids), if still queued.
UPDATE chit_jobs
SET state = 'running',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(12))),
    lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now, :lease),
    worker = :worker,
    started_at = coalesce(started_at, strftime('%Y-%m-%dT%H:%M:%fZ', :now)),
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued' AND {unexpired}
RETURNING id, kind, queue, priority, run_at, payload, attempts, max_attempts, lease_token,
          checkpoint, progress_done, progress_total, concurrency_key, timeout,
          EXISTS (SELECT 1 FROM chit_edges AS e WHERE e.job_id = chit_jobs.id)
              AS has_dependencies, tenant, traceparent, updated_at AS claimed_at, cost

-- name: declare_limits
INSERT INTO chit_limits (
    kind, source, concurrency, rate, rate_seconds, key_concurrency, key_rate,
    key_rate_seconds, cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds,
    updated_at
) VALUES (
    :kind, 'code', :concurrency, :rate, :rate_seconds, :key_concurrency, :key_rate,
    :key_rate_seconds, :cost_rate, :cost_rate_seconds, :key_cost_rate, :key_cost_rate_seconds,
    strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
)
ON CONFLICT (kind, source) DO UPDATE
SET concurrency = excluded.concurrency, rate = excluded.rate,
    rate_seconds = excluded.rate_seconds, key_concurrency = excluded.key_concurrency,
    key_rate = excluded.key_rate, key_rate_seconds = excluded.key_rate_seconds,
    cost_rate = excluded.cost_rate, cost_rate_seconds = excluded.cost_rate_seconds,
    key_cost_rate = excluded.key_cost_rate,
    key_cost_rate_seconds = excluded.key_cost_rate_seconds,
    updated_at = excluded.updated_at
WHERE (concurrency, rate, rate_seconds, key_concurrency, key_rate, key_rate_seconds,
       cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds)
      IS NOT (excluded.concurrency, excluded.rate, excluded.rate_seconds,
              excluded.key_concurrency, excluded.key_rate, excluded.key_rate_seconds,
              excluded.cost_rate, excluded.cost_rate_seconds, excluded.key_cost_rate,
              excluded.key_cost_rate_seconds)

-- name: forget_declared_limits
DELETE FROM chit_limits WHERE kind = :kind AND source = 'code'

-- name: set_limits
-- An operator's values over the ones they set before: a NULL leaves one as it was.
INSERT INTO chit_limits (
    kind, source, concurrency, rate, rate_seconds, key_concurrency, key_rate,
    key_rate_seconds, cost_rate, cost_rate_seconds, key_cost_rate, key_cost_rate_seconds,
    updated_at
) VALUES (
    :kind, 'operator', :concurrency, :rate, :rate_seconds, :key_concurrency, :key_rate,
    :key_rate_seconds, :cost_rate, :cost_rate_seconds, :key_cost_rate, :key_cost_rate_seconds,
    strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
)
ON CONFLICT (kind, source) DO UPDATE
SET concurrency = coalesce(excluded.concurrency, concurrency),
    rate = coalesce(excluded.rate, rate),
    rate_seconds = coalesce(excluded.rate_seconds, rate_seconds),
    key_concurrency = coalesce(excluded.key_concurrency, key_concurrency),
    key_rate = coalesce(excluded.key_rate, key_rate),
    key_rate_seconds = coalesce(excluded.key_rate_seconds, key_rate_seconds),
    cost_rate = coalesce(excluded.cost_rate, cost_rate),
    cost_rate_seconds = coalesce(excluded.cost_rate_seconds, cost_rate_seconds),
    key_cost_rate = coalesce(excluded.key_cost_rate, key_cost_rate),
    key_cost_rate_seconds = coalesce(excluded.key_cost_rate_seconds, key_cost_rate_seconds),
    updated_at = excluded.updated_at

-- name: clear_limits
DELETE FROM chit_limits WHERE kind = :kind AND source = 'operator'

-- name: limit_usage
-- Each limited kind's running jobs, and its queued jobs that are due.
SELECT k.kind,
       (SELECT count(*) FROM chit_jobs AS j INDEXED BY chit_jobs_leases
        WHERE j.state = 'running' AND j.kind = k.kind
          AND j.lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS running,
       (SELECT count(*) FROM chit_jobs AS j INDEXED BY chit_jobs_groups
        WHERE j.state = 'queued' AND j.kind = k.kind
          AND j.run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS waiting
FROM (SELECT DISTINCT kind FROM chit_limits) AS k

-- name: pause
INSERT INTO chit_pauses (scope, name, paused_at)
VALUES (:scope, :name, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (scope, name) DO NOTHING

-- name: resume
DELETE FROM chit_pauses WHERE scope = :scope AND name = :name

-- name: add_secret
-- The first process to ask stores its value; the others keep the stored one.
INSERT INTO chit_secrets (name, value, created_at)
VALUES (:name, :value, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (name) DO NOTHING

-- name: get_secret
SELECT value FROM chit_secrets WHERE name = :name

-- Schedules (chit/schedules.py; DESIGN.md, "Time"). Slots and next_at are
-- computed in Python from the rule; the store keeps them and guards each move.

-- name: schedule_columns
-- A schedule as SQLStore._schedule reads it, with its last job's state.
SELECT s.name, s.kind, s.payload, s.cron, s.every_seconds, s.tz, s.catch_up, s.paused,
       s.source, s.next_at, s.last_slot, s.last_job_id, s.created_at, s.updated_at,
       (SELECT j.state FROM chit_jobs AS j WHERE j.id = s.last_job_id) AS last_job_state
FROM chit_schedules AS s

-- name: schedule_clock
-- The database clock, and the first slot due of the kinds a worker runs (:kinds,
-- a JSON array): an idle tick is this one look at chit_schedules_due.
-- No kinds (a declaration reading the clock): no look at all, which would walk
-- every schedule for a kind that none has.
SELECT strftime('%Y-%m-%dT%H:%M:%fZ', :now) AS now,
       CASE WHEN json_array_length(:kinds) = 0 THEN NULL ELSE
       (SELECT min(next_at) FROM chit_schedules
        WHERE paused = 0 AND kind IN (SELECT value FROM json_each(:kinds))) END AS next_at

-- name: declare_schedule
-- Code's declaration (a worker starting) or an operator's (CLI, API). A changed
-- rule starts again from :next_at; the same rule keeps its next_at (the slots
-- missed while no worker ran stay due, for catch_up). A pause stays.
INSERT INTO chit_schedules (
    name, kind, payload, cron, every_seconds, tz, catch_up, source, next_at,
    created_at, updated_at
) VALUES (
    :name, :kind, :payload, :cron, :every_seconds, :tz, :catch_up, :source, :next_at,
    strftime('%Y-%m-%dT%H:%M:%fZ', :now), strftime('%Y-%m-%dT%H:%M:%fZ', :now)
)
ON CONFLICT (name) DO UPDATE
SET next_at = CASE WHEN (cron IS excluded.cron AND every_seconds IS excluded.every_seconds
                         AND tz = excluded.tz) THEN next_at ELSE excluded.next_at END,
    kind = excluded.kind, payload = excluded.payload, cron = excluded.cron,
    every_seconds = excluded.every_seconds, tz = excluded.tz, catch_up = excluded.catch_up,
    source = excluded.source, updated_at = excluded.updated_at
WHERE (kind, payload, cron, every_seconds, tz, catch_up, source)
      IS NOT (excluded.kind, excluded.payload, excluded.cron, excluded.every_seconds,
              excluded.tz, excluded.catch_up, excluded.source)

-- name: get_schedule
{schedule_columns}
WHERE s.name = :name

-- name: list_schedules
{schedule_columns}
ORDER BY s.name

-- name: remove_schedule
DELETE FROM chit_schedules WHERE name = :name

-- name: pause_schedule
-- Paused: no slot is enqueued. Resumed: from :next_at (the first slot from
-- now), so the slots of the pause are not caught up.
UPDATE chit_schedules
SET paused = :paused,
    next_at = CASE WHEN :paused THEN next_at ELSE :next_at END,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
WHERE name = :name AND paused <> :paused

-- name: due_schedules
-- The due schedules of the kinds a worker runs, the most overdue first, by
-- chit_schedules_due: the cost follows the due ones, not the table.
SELECT name, kind, payload, cron, every_seconds, tz, catch_up, next_at
FROM chit_schedules INDEXED BY chit_schedules_due
WHERE paused = 0 AND next_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
  AND kind IN (SELECT value FROM json_each(:kinds))
ORDER BY next_at
LIMIT :limit

-- name: advance_schedules
-- Moves (:moves, a JSON array of {name, seen, next_at, last_slot, last_job_id}),
-- each guarded by the next_at its tick read: of two workers that planned the
-- same slots, one moves the schedule on (their jobs were one already, by key).
UPDATE chit_schedules AS s
SET next_at = m.value ->> 'next_at',
    last_slot = coalesce(m.value ->> 'last_slot', s.last_slot),
    last_job_id = coalesce(m.value ->> 'last_job_id', s.last_job_id)
FROM json_each(:moves) AS m
WHERE s.name = m.value ->> 'name' AND s.next_at = m.value ->> 'seen' AND s.paused = 0

-- name: schedule_runs
-- The jobs of these slot keys (:keys, a JSON array), by chit_jobs_idempotency.
SELECT {columns}
FROM json_each(:keys) AS k
JOIN chit_jobs AS j ON j.tenant = '' AND j.idempotency_key = k.value

-- name: beat_worker
-- A worker's upkeep (chit/fleet.py): its row written, alive until stale_at.
INSERT INTO chit_workers (
    id, host, pid, queues, kinds, slots, busy, started_at, seen_at, stale_at
) VALUES (
    :id, :host, :pid, :queues, :kinds, :slots, :busy,
    strftime('%Y-%m-%dT%H:%M:%fZ', :now), strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    strftime('%Y-%m-%dT%H:%M:%fZ', :now, :stale_after)
)
ON CONFLICT (id) DO UPDATE SET
    queues = excluded.queues, kinds = excluded.kinds, slots = excluded.slots,
    busy = excluded.busy, seen_at = excluded.seen_at, stale_at = excluded.stale_at

-- name: forget_dead_workers
DELETE FROM chit_workers WHERE stale_at < strftime('%Y-%m-%dT%H:%M:%fZ', :now)

-- name: forget_worker
DELETE FROM chit_workers WHERE id = :id

-- name: live_workers
SELECT id, host, pid, queues, kinds, slots, busy, started_at, seen_at
FROM chit_workers
WHERE stale_at >= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
ORDER BY started_at, id

-- name: queue_counts
-- Each queue's queued jobs by chit_jobs_claimable (ready: due now; scheduled:
-- due later) and running ones by chit_jobs_leases. {tenant}: `1` or an
-- equality on j.tenant.
SELECT j.queue,
       sum(j.run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS ready,
       sum(j.run_at > strftime('%Y-%m-%dT%H:%M:%fZ', :now)) AS scheduled,
       0 AS running,
       coalesce((julianday(strftime('%Y-%m-%dT%H:%M:%fZ', :now))
                 - julianday(min(CASE WHEN j.run_at <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
                                      THEN j.run_at END))) * 86400.0, 0) AS oldest_ready_seconds
FROM chit_jobs AS j INDEXED BY chit_jobs_claimable
WHERE j.state = 'queued' AND {tenant}
GROUP BY j.queue
UNION ALL
SELECT j.queue, 0, 0, count(*), 0
FROM chit_jobs AS j INDEXED BY chit_jobs_leases
WHERE j.state = 'running' AND {tenant}
GROUP BY j.queue

-- Waits (DESIGN.md "Long AI tasks"; chit/store/sql/waits.py)

-- name: suspend
-- A Suspended outcome: `waiting` (`cancelled` when cancellation was asked), the
-- attempt not counted, what it waits for stored; run_at now, so a resumed job
-- is due at once. Its attempt record closes `snoozed` (not counted either).
UPDATE chit_jobs
SET attempts = attempts - 1,
    state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'waiting' END,
    wait_signal = :signal, wait_jobs = :jobs,
    wait_until = CASE WHEN :timeout IS NOT NULL
                      THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now, :timeout) END,
    run_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now),
    finished_at = CASE WHEN cancel_requested THEN strftime('%Y-%m-%dT%H:%M:%fZ', :now) END,
    lease_token = NULL, lease_expires_at = NULL,
    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING CASE state WHEN 'waiting' THEN 'snoozed' ELSE state END AS outcome, NULL AS error,
          state, (dependents IS NOT NULL OR waiters IS NOT NULL) AS has_dependents

-- name: wait_on_jobs
-- The jobs a suspended job waits for name it among their waiters (once), so
-- that the one ending last queues it (wake_waiters_of): those that have ended
-- too, as a retry may open one again.
UPDATE chit_jobs
SET waiters = json_insert(coalesce(waiters, '[]'), '$[#]', :id)
WHERE id IN (SELECT value FROM json_each(:jobs))
  AND NOT EXISTS (SELECT 1 FROM json_each(coalesce(waiters, '[]')) WHERE value = :id)

-- name: resume_ready
-- After `suspend`, in its transaction: queued at once when what it waits for
-- is there already (the signal was sent, every job has ended: unknown ids, pruned
-- since, count as ended).
UPDATE chit_jobs AS j
SET state = 'queued', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE j.id = :id AND j.state = 'waiting'
  AND ((j.wait_signal IS NOT NULL AND EXISTS (
            SELECT 1 FROM chit_signals AS s WHERE s.job_id = j.id AND s.name = j.wait_signal))
       OR (j.wait_jobs IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM json_each(j.wait_jobs) AS w JOIN chit_jobs AS c ON c.id = w.value
            WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled'))))

-- name: wake_waiters_of
-- Jobs that just ended (:ids, a JSON array; every statement that ends a job
-- returns has_dependents for one with waiters, and the store settles it in the
-- same transaction): each waiter whose jobs have all ended is queued. Not a
-- trigger: one on chit_jobs costs every claim and outcome some 12 us.
UPDATE chit_jobs
SET state = 'queued', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id IN (SELECT w.value FROM chit_jobs AS e, json_each(e.waiters) AS w
             WHERE e.id IN (SELECT value FROM json_each(:ids)) AND e.waiters IS NOT NULL)
  AND state = 'waiting' AND wait_jobs IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM json_each(chit_jobs.wait_jobs) AS w
      JOIN chit_jobs AS c ON c.id = w.value
      WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled'))

-- name: wake_waiters
-- Waiting jobs past their wait's deadline: queued, by chit_jobs_wait_until.
UPDATE chit_jobs
SET state = 'queued', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE state = 'waiting' AND wait_until IS NOT NULL
  AND wait_until <= strftime('%Y-%m-%dT%H:%M:%fZ', :now)
RETURNING id, wait_signal

-- name: signal_timed_out
-- The timed-out waits for a signal (:items, a JSON array of [id, name]) keep a
-- mark under the name, so that the rerun's wait_for reads None, and a signal
-- sent after it changes nothing.
INSERT INTO chit_signals (job_id, name, data, created_at)
SELECT i.value ->> 0, i.value ->> 1, NULL, strftime('%Y-%m-%dT%H:%M:%fZ', :now)
FROM json_each(:items) AS i
WHERE true
ON CONFLICT (job_id, name) DO NOTHING

-- name: signal_target
-- The job a signal is sent to, for the caller's tenant.
SELECT state FROM chit_jobs WHERE id = :id AND (:tenant IS NULL OR tenant = :tenant)

-- name: insert_signal
INSERT INTO chit_signals (job_id, name, data, created_at)
VALUES (:id, :name, :data, strftime('%Y-%m-%dT%H:%M:%fZ', :now))
ON CONFLICT (job_id, name) DO NOTHING
RETURNING data

-- name: stored_signal
SELECT data FROM chit_signals WHERE job_id = :id AND name = :name

-- name: resume_signalled
-- A waiting job waiting for the signal just stored: queued.
UPDATE chit_jobs
SET state = 'queued', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', :now)
WHERE id = :id AND state = 'waiting' AND wait_signal = :name

-- name: received
-- What wait_for reads: the signal (found, its data; data NULL: the wait timed out).
SELECT data, data IS NULL AS timed_out FROM chit_signals WHERE job_id = :id AND name = :name

-- name: waited_jobs
-- The jobs among :ids (a JSON array) that exist, in its order.
SELECT j.id, j.kind, j.state, j.tenant, j.result, j.result_external, j.error
FROM json_each(:ids) AS w JOIN chit_jobs AS j ON j.id = w.value
ORDER BY w.key

-- name: wait_timed_out
-- Whether the job's last wait, for exactly :jobs, ended by its deadline.
SELECT wait_jobs = :jobs AND wait_until <= strftime('%Y-%m-%dT%H:%M:%fZ', :now) AS timed_out
FROM chit_jobs WHERE id = :id
