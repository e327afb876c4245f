-- Output (JobContext.emit, DESIGN.md "Long AI tasks"): the JSON values a
-- handler emits, numbered per job across attempts (seq, never reused), each
-- with the attempt that emitted it. Written only by the worker holding the
-- lease (the counters on chit_jobs are moved by a fenced update first); kept
-- across retry and replay; deleted with the job. A job that never emits has
-- no row here and its counters stay 0: claims and outcomes never read them.
ALTER TABLE chit_jobs ADD COLUMN output_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chit_jobs ADD COLUMN output_bytes INTEGER NOT NULL DEFAULT 0;
-- job.progress(done, total, message): the message travels with the numbers.
ALTER TABLE chit_jobs ADD COLUMN progress_message TEXT;
CREATE TABLE chit_output (
    job_id  TEXT NOT NULL REFERENCES chit_jobs (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    data    TEXT NOT NULL,  -- JSON
    at      TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
