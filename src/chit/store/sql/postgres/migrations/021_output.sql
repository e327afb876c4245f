-- Output (JobContext.emit, DESIGN.md "Long AI tasks"): the JSON values a
-- handler emits, numbered per job across attempts (seq, never reused), each
-- with the attempt that emitted it. Written only by the worker holding the
-- lease (the counters on chit_jobs are moved by a fenced update first, which
-- also serialises two writers); kept across retry and replay; deleted with the
-- job. A job that never emits has no row here and its counters stay 0.
-- `json`, not jsonb: a value reads back with its keys in the order emitted.
ALTER TABLE chit_jobs ADD COLUMN output_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE chit_jobs ADD COLUMN output_bytes bigint NOT NULL DEFAULT 0;
-- job.progress(done, total, message): the message travels with the numbers.
ALTER TABLE chit_jobs ADD COLUMN progress_message text;
-- An event stream follows the job (`mark_listened`): its changes are announced.
ALTER TABLE chit_jobs ADD COLUMN listened boolean NOT NULL DEFAULT false;

-- No foreign key, for the reason migration 012 gives for steps.
CREATE TABLE chit_output (
    job_id  text NOT NULL,
    seq     bigint NOT NULL,
    attempt integer NOT NULL,
    data    json NOT NULL,
    at      timestamptz NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE FUNCTION chit_delete_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM chit_output WHERE job_id IN (SELECT id FROM chit_deleted_output);
    RETURN NULL;
END
$$;

CREATE TRIGGER chit_jobs_delete_output AFTER DELETE ON chit_jobs
    REFERENCING OLD TABLE AS chit_deleted_output
    FOR EACH STATEMENT EXECUTE FUNCTION chit_delete_output();

-- Listeners of a job with output, or of one an event stream follows, hear of
-- its state changes too, as they are committed: the trigger every statement
-- updating jobs already runs (migration 001) also notifies chit_output with
-- the id of each such changed job. Any other job costs a look at two of its
-- columns in a table the trigger scans anyway.
CREATE OR REPLACE FUNCTION chit_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chit_jobs', q.queue)
    FROM (SELECT DISTINCT queue FROM chit_changed WHERE state = 'queued') AS q;
    PERFORM pg_notify('chit_output', c.id) FROM chit_changed AS c
    WHERE c.output_seq > 0 OR c.listened;
    RETURN NULL;
END
$$;
