-- Schedules (DESIGN.md, "Time"; chit/schedules.py). One row a schedule; each
-- worker's maintenance tick enqueues the slots due (next_at <= now), each job
-- keyed `schedule:{name}:{slot}`, and moves next_at on.
CREATE TABLE chit_schedules (
    name          text PRIMARY KEY,
    kind          text NOT NULL,
    payload       jsonb NOT NULL,
    cron          text,           -- 5 fields, in tz
    every_seconds integer CHECK (every_seconds >= 1),
    tz            text NOT NULL DEFAULT 'UTC',
    catch_up      text NOT NULL CHECK (catch_up IN ('latest', 'all', 'none')),
    paused        boolean NOT NULL DEFAULT false,
    source        text NOT NULL CHECK (source IN ('code', 'operator')),
    next_at       timestamptz NOT NULL,  -- the first slot not enqueued yet
    last_slot     timestamptz,
    last_job_id   text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
-- A tick reads the due schedules only: one seek, however many schedules exist.
CREATE INDEX chit_schedules_due ON chit_schedules (next_at) WHERE NOT paused;
