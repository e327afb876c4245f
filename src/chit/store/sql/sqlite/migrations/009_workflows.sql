-- Workflows (DESIGN.md "Workflows and steps"): jobs that wait for others.
--
-- Each job row keeps both ends of its edges, as JSON arrays of job ids (NULL
-- when none): `depends_on`, in the order given, and `dependents`. A finishing
-- job reads its dependents from its own row, so releasing them costs work
-- proportional to them, and a job without any pays one NULL test.
-- `deps_pending` counts the dependencies not yet in the state that lets the job
-- run (succeeded; any terminal state for run_on = 'finished'): a waiting job
-- becomes queued in the statement that takes it to 0.
ALTER TABLE chit_jobs ADD COLUMN workflow_id TEXT;
ALTER TABLE chit_jobs ADD COLUMN ref TEXT;
ALTER TABLE chit_jobs ADD COLUMN run_on TEXT NOT NULL DEFAULT 'succeeded'
    CHECK (run_on IN ('succeeded', 'finished'));
ALTER TABLE chit_jobs ADD COLUMN depends_on TEXT;
ALTER TABLE chit_jobs ADD COLUMN dependents TEXT;
ALTER TABLE chit_jobs ADD COLUMN deps_pending INTEGER NOT NULL DEFAULT 0;

CREATE INDEX chit_jobs_workflow ON chit_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- The new state. SQLite cannot alter a CHECK constraint, and rebuilding the
-- table would cascade-delete every attempt and result (foreign keys are on in
-- the migrating transaction): widen the CHECK's text instead, which changes no
-- row (https://www.sqlite.org/lang_altertable.html, "making other kinds of
-- table schema changes"). Last, after the ALTERs, which edit the same text;
-- the CREATE INDEX above already moves the schema cookie, so other
-- connections read the new text, and RESET makes this one read it too.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql, 'CHECK (state IN (''queued'', ', 'CHECK (state IN (''waiting'', ''queued'', ')
WHERE type = 'table' AND name = 'chit_jobs';
PRAGMA writable_schema = RESET;
