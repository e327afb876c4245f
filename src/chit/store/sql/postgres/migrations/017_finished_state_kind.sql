-- chit_jobs_state_kind holds waiting and finished jobs only, as the list indexes
-- do since migration 006. It was the one index over every job that changes
-- state, so each transition of every job (claim, finish: updates that cannot be
-- HOT, as their state is indexed) wrote an entry in it for a version that lives
-- a few milliseconds. Queued and running jobs are counted by the indexes their
-- own transitions keep: chit_jobs_groups and chit_jobs_claimable (queued),
-- chit_jobs_leases (running).
--
-- The planner uses it for `state = 'failed'` (it proves the predicate from a
-- constant), not for a state it reads from a join: such queries also write
-- `state NOT IN ('queued', 'running')` (count_by_state_kind).
DROP INDEX chit_jobs_state_kind;
CREATE INDEX chit_jobs_state_kind ON chit_jobs (state, kind, tenant, id)
    WHERE state NOT IN ('queued', 'running');
