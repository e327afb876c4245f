-- Debounce (DESIGN.md "Changing work already queued"): while a job with a
-- debounce key (and tenant) has not started, another enqueue with the key
-- replaces its payload and moves its start, never past debounce_until (the
-- first enqueue's time plus debounce_max).
--
-- The unique index is the lock: at most one such job per key, so concurrent
-- enqueues insert one job and debounce into it. A job leaves the index when it
-- is first claimed (started_at is set, whatever happens to it later: a retry
-- or a snooze does not make it a debounce target again) or is cancelled; a
-- replay clears its key (`replay_reset`). The claim writes started_at already:
-- plain jobs pay nothing for this.
ALTER TABLE chit_jobs ADD COLUMN debounce_key text;
ALTER TABLE chit_jobs ADD COLUMN debounce_until timestamptz;
CREATE UNIQUE INDEX chit_jobs_debounce ON chit_jobs (tenant, debounce_key)
    WHERE debounce_key IS NOT NULL AND state = 'queued' AND started_at IS NULL;
