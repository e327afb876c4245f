-- Timeouts (DESIGN.md, "Time"): the seconds an attempt may run before it is
-- failed "timed out after N s"; NULL: no deadline (the task's, if it has one).
-- No default: adding the column rewrites no table.
ALTER TABLE chit_jobs ADD COLUMN timeout double precision;
