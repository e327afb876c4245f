-- A job's `depends_on` (its dependencies, a JSON array of job ids in the order
-- given) in a table of its own, written once at enqueue and deleted with the
-- job. SQLite rewrites a whole row, overflow pages included, on every UPDATE:
-- a fan-in callback of 10,000 dependencies carried 290 KB in chit_jobs, which
-- each count-down of its deps_pending copied (0.37 ms a transaction, a third
-- of a finish-and-claim). `dependents` stays in chit_jobs: the finishing job
-- reads it, and its row is rewritten a few times in its life, not once per
-- dependency. PostgreSQL keeps both columns: an UPDATE there keeps an
-- unchanged TOASTed value where it is.
CREATE TABLE chit_edges (
    job_id     TEXT PRIMARY KEY REFERENCES chit_jobs (id) ON DELETE CASCADE,
    depends_on TEXT NOT NULL  -- JSON array of job ids
);

INSERT INTO chit_edges (job_id, depends_on)
SELECT id, depends_on FROM chit_jobs WHERE depends_on IS NOT NULL;

ALTER TABLE chit_jobs DROP COLUMN depends_on;
