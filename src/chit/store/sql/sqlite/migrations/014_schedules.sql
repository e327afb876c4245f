-- Schedules (DESIGN.md, "Time"; chit/schedules.py). One row a schedule; each
-- worker's maintenance tick enqueues the slots due (next_at <= now), each job
-- keyed `schedule:{name}:{slot}`, and moves next_at on.
CREATE TABLE chit_schedules (
    name          TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    payload       TEXT NOT NULL,  -- JSON object
    cron          TEXT,           -- 5 fields, in tz
    every_seconds INTEGER CHECK (every_seconds >= 1),
    tz            TEXT NOT NULL DEFAULT 'UTC',
    catch_up      TEXT NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    paused        INTEGER NOT NULL DEFAULT 0,
    source        TEXT NOT NULL CHECK (source IN ('code', 'operator')),
    next_at       TEXT NOT NULL,  -- the first slot not enqueued yet
    last_slot     TEXT,
    last_job_id   TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
-- A tick reads the due schedules only: one seek, however many schedules exist.
CREATE INDEX chit_schedules_due ON chit_schedules (next_at) WHERE paused = 0;
