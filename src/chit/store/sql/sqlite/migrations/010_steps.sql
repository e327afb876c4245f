-- Durable steps (JobContext.step): one row per (job, step name), holding the
-- step's JSON result. Written only by the worker holding the job's lease (the
-- insert is fenced on chit_jobs), read by every later attempt of the job, so a
-- reclaimed or retried job resumes after its last finished step. Kept across
-- retry and replay; deleted with the job (prune, or by hand).
CREATE TABLE chit_steps (
    job_id     TEXT NOT NULL REFERENCES chit_jobs (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    attempt    INTEGER NOT NULL,  -- the attempt that stored it
    result     TEXT NOT NULL,     -- JSON
    created_at TEXT NOT NULL,
    PRIMARY KEY (job_id, name)
);
