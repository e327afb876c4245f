-- An attempt record is written twice in a plain job's life: opened at the claim,
-- closed with the outcome. chit_attempts_open (unique on job_id while finished_at
-- IS NULL) took an index entry at the first and gave it back at the second. The
-- close finds the open attempt by chit_attempts_job instead; the claim still
-- closes an attempt left open before opening the next (SQLiteStore._opened).
DROP INDEX chit_attempts_open;
