-- Durable steps (JobContext.step): one row per (job, step name), holding the
-- step's JSON result. Written only by the worker holding the job's lease (the
-- insert is fenced on chit_jobs), read by every later attempt of the job, so a
-- reclaimed or retried job resumes after its last finished step. Kept across
-- retry and replay.
--
-- No foreign key, for the reason migration 005 gives for attempts: the insert
-- already joins the job's row, and a foreign key would add a check to every
-- delete and key update of chit_jobs for users who never use steps. Deleting
-- jobs (prune, or by hand) deletes their steps: one trigger per statement.
CREATE TABLE chit_steps (
    job_id     text NOT NULL,
    name       text NOT NULL,
    seq        bigint GENERATED ALWAYS AS IDENTITY,  -- the order they were stored in
    attempt    integer NOT NULL,  -- the attempt that stored it
    result     jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);

CREATE FUNCTION chit_delete_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM chit_steps WHERE job_id IN (SELECT id FROM chit_deleted_steps);
    RETURN NULL;
END
$$;

CREATE TRIGGER chit_jobs_delete_steps AFTER DELETE ON chit_jobs
    REFERENCING OLD TABLE AS chit_deleted_steps
    FOR EACH STATEMENT EXECUTE FUNCTION chit_delete_steps();
