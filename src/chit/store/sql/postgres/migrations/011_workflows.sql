-- Workflows (DESIGN.md "Workflows and steps"): jobs that wait for others.
--
-- Each job row keeps both ends of its edges as arrays of job ids (NULL when
-- none): `depends_on`, in the order given, and `dependents`. A finishing job
-- reads its dependents from its own row as its UPDATE returns it (the newest
-- version, a dependent added meanwhile included), so releasing them costs work
-- proportional to them, and a job without any pays one NULL test.
-- `deps_pending` counts the dependencies not yet in the state that lets the job
-- run (succeeded; any terminal state for run_on = 'finished'): a waiting job
-- becomes queued in the statement that takes it to 0.
ALTER TABLE chit_jobs DROP CONSTRAINT chit_jobs_state_check;
ALTER TABLE chit_jobs ADD CONSTRAINT chit_jobs_state_check
    CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE chit_jobs
    ADD COLUMN workflow_id text,
    ADD COLUMN ref text,
    ADD COLUMN run_on text NOT NULL DEFAULT 'succeeded'
        CHECK (run_on IN ('succeeded', 'finished')),
    ADD COLUMN depends_on text[],
    ADD COLUMN dependents text[],
    ADD COLUMN deps_pending integer NOT NULL DEFAULT 0;

CREATE INDEX chit_jobs_workflow ON chit_jobs (workflow_id, id COLLATE "C")
    WHERE workflow_id IS NOT NULL;

-- A finishing job's statement found fewer of its dependents than its row names:
-- one was enqueued (its transaction holding this job's row) after the
-- statement's snapshot was taken. Roll the statement back as a serialization
-- failure; the store runs it again, on a snapshot that sees the dependent.
CREATE FUNCTION chit_dependents_moved() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'a dependent was enqueued while its dependency finished; retry'
        USING ERRCODE = '40001';
END
$$;
