-- A waiter is queued by the store when the last of its jobs ends, in the
-- transaction that ends it (SQLBase._settle, wake_waiters_of), not by a
-- trigger: any trigger on chit_jobs state costs every claim and outcome on
-- SQLite some 12 us a job, used or not.
DROP TRIGGER IF EXISTS chit_jobs_wake_waiters;
