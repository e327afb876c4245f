-- Waits (DESIGN.md "Long AI tasks"): a handler's wait_for / wait_for_jobs
-- leaves its job `waiting` with what it waits for; a signal, the last of its
-- jobs ending, or its deadline makes it `queued` in the transaction that sees it.
ALTER TABLE chit_jobs ADD COLUMN wait_signal TEXT;  -- the signal's name
ALTER TABLE chit_jobs ADD COLUMN wait_jobs TEXT;    -- JSON array of job ids
ALTER TABLE chit_jobs ADD COLUMN wait_until TEXT;   -- the wait's deadline; NULL: none
-- On a job others wait for: their ids (a JSON array), read when it ends.
ALTER TABLE chit_jobs ADD COLUMN waiters TEXT;

-- What wake_waiters reads: waiting jobs with a deadline, by it, and no others.
CREATE INDEX chit_jobs_wait_until ON chit_jobs (wait_until)
    WHERE state = 'waiting' AND wait_until IS NOT NULL;

-- A job's signals, one per name (the first wins); `data` NULL marks a wait
-- for that name that ended by its timeout (a later signal changes nothing).
CREATE TABLE chit_signals (
    job_id     TEXT NOT NULL REFERENCES chit_jobs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    data       TEXT,  -- JSON
    created_at TEXT NOT NULL,
    PRIMARY KEY (job_id, name)
);

-- A job others wait for ends, whichever statement ends it (an outcome, a
-- cancel, a rescue, an expiry): each waiter whose jobs have all ended is
-- queued in the same transaction. Only rows with waiters pay for the trigger.
CREATE TRIGGER chit_jobs_wake_waiters AFTER UPDATE OF state ON chit_jobs
WHEN NEW.waiters IS NOT NULL
 AND NEW.state IN ('succeeded', 'failed', 'cancelled')
 AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE chit_jobs SET state = 'queued', updated_at = NEW.updated_at
    WHERE id IN (SELECT value FROM json_each(NEW.waiters))
      AND state = 'waiting' AND wait_jobs IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM json_each(chit_jobs.wait_jobs) AS w
          JOIN chit_jobs AS c ON c.id = w.value
          WHERE c.state NOT IN ('succeeded', 'failed', 'cancelled'));
END;
