-- Waits (DESIGN.md "Long AI tasks"): a handler's wait_for / wait_for_jobs
-- leaves its job `waiting` with what it waits for; a signal, the last of its
-- jobs ending, or its deadline makes it `queued` in the transaction that sees it.
ALTER TABLE chit_jobs
    ADD COLUMN wait_signal text,        -- the signal's name
    ADD COLUMN wait_jobs text[],        -- the jobs' ids
    ADD COLUMN wait_until timestamptz,  -- the wait's deadline; NULL: none
    ADD COLUMN waiters text[];          -- on a job others wait for: their ids

-- What wake_waiters reads: waiting jobs with a deadline, by it, and no others.
CREATE INDEX chit_jobs_wait_until ON chit_jobs (wait_until)
    WHERE state = 'waiting' AND wait_until IS NOT NULL;

-- A job's signals, one per name (the first wins); `data` NULL marks a wait
-- for that name that ended by its timeout (a later signal changes nothing).
-- Deleted with the job by the trigger that deletes its steps (below).
CREATE TABLE chit_signals (
    job_id     text NOT NULL,
    name       text NOT NULL,
    data       jsonb,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);

CREATE OR REPLACE FUNCTION chit_delete_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM chit_steps WHERE job_id IN (SELECT id FROM chit_deleted_steps);
    DELETE FROM chit_signals WHERE job_id IN (SELECT id FROM chit_deleted_steps);
    RETURN NULL;
END
$$;

-- A job others wait for ends, whichever statement ends it (an outcome, a
-- cancel, a rescue, an expiry): each waiter whose jobs have all ended is
-- queued in the same transaction. The waiters' rows are locked before the
-- check, which then reads a fresh snapshot: two of a waiter's jobs ending in
-- two transactions at once cannot each miss the other's end.
CREATE FUNCTION chit_wake_waiters() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM chit_jobs
    WHERE id = ANY (NEW.waiters) AND state = 'waiting' ORDER BY id FOR UPDATE;
    UPDATE chit_jobs AS w SET state = 'queued', updated_at = NEW.updated_at
    WHERE w.id = ANY (NEW.waiters) AND w.state = 'waiting' AND w.wait_jobs IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM chit_jobs AS c
          WHERE c.id = ANY (w.wait_jobs) AND c.state NOT IN ('succeeded', 'failed', 'cancelled'));
    RETURN NULL;
END
$$;

CREATE TRIGGER chit_jobs_wake_waiters AFTER UPDATE OF state ON chit_jobs
    FOR EACH ROW
    WHEN (NEW.waiters IS NOT NULL
          AND NEW.state IN ('succeeded', 'failed', 'cancelled')
          AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION chit_wake_waiters();
