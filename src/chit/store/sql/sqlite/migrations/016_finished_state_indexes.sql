-- The two indexes led by the state hold waiting and finished jobs only, as
-- PostgreSQL's list indexes do (its migration 006). A plain job's life moved
-- its entry in each of them at every transition: written at enqueue, moved at
-- claim, moved again at finish, five index writes each and a dirty page more
-- per commit; a job now enters them once, when it finishes (a finish-and-claim
-- of 8 jobs: 122 -> 89 us a job). Queued and running jobs, the work in hand,
-- are found by the indexes their own transitions keep: chit_jobs_claimable and
-- chit_jobs_groups (queued), chit_jobs_leases (running).
--
-- A query reads these only when its WHERE holds the predicate's very term,
-- `state NOT IN ('queued', 'running')`: SQLite does not prove it from
-- `state = 'failed'` (queries.sql writes it out beside each such equality).
DROP INDEX chit_jobs_state_id;
DROP INDEX chit_jobs_state_kind;
CREATE INDEX chit_jobs_state_id ON chit_jobs (state, id)
    WHERE state NOT IN ('queued', 'running');
CREATE INDEX chit_jobs_state_kind ON chit_jobs (state, kind, tenant, id)
    WHERE state NOT IN ('queued', 'running');
