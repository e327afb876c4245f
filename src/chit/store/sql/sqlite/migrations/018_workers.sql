-- Workers register themselves (DESIGN.md "Autoscaling signals"): each
-- worker's upkeep writes its row (its queues, kinds, slots and busy slots), a
-- clean stop deletes it, and a row not written again by its stale_at is a dead
-- worker's: left out of every answer, deleted by the next beat of any worker.
CREATE TABLE chit_workers (
    id          TEXT PRIMARY KEY,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    queues      TEXT NOT NULL,  -- a JSON array
    kinds       TEXT NOT NULL,  -- a JSON array
    slots       INTEGER NOT NULL,
    busy        INTEGER NOT NULL,
    started_at  TEXT NOT NULL,
    seen_at     TEXT NOT NULL,
    stale_at    TEXT NOT NULL
);
