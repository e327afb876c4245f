-- The dashboard's pages at a million jobs: each of their queries reads an index.

-- Counts by state and kind, read from this index alone (a loose scan finds each
-- state's kinds, then a count capped per pair); lists filtered by state and kind.
CREATE INDEX chit_jobs_state_kind ON chit_jobs (state, kind, tenant, id);
-- Lists filtered by queue. The queue never changes: this costs only at insert.
CREATE INDEX chit_jobs_queue_id ON chit_jobs (queue, id);
-- Throughput per minute and the last hour's outcomes per kind, read from the
-- index alone; pruning still uses its leading column.
DROP INDEX chit_jobs_finished;
CREATE INDEX chit_jobs_finished ON chit_jobs (finished_at, state, kind, tenant)
    WHERE finished_at IS NOT NULL;
