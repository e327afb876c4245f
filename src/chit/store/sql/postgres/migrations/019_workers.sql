-- Workers register themselves (DESIGN.md "Autoscaling signals"): each
-- worker's upkeep writes its row (its queues, kinds, slots and busy slots), a
-- clean stop deletes it, and a row not written again by its stale_at is a dead
-- worker's: left out of every answer, deleted by the next beat of any worker.
CREATE TABLE chit_workers (
    id          text PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    queues      jsonb NOT NULL,
    kinds       jsonb NOT NULL,
    slots       integer NOT NULL,
    busy        integer NOT NULL,
    started_at  timestamptz NOT NULL,
    seen_at     timestamptz NOT NULL,
    stale_at    timestamptz NOT NULL
);
