-- Budgets (DESIGN.md, "Long AI tasks"): cost-weighted rates.
-- Nullable columns without defaults: adding them rewrites no table.

-- A job's expected cost, and each attempt's (the estimate, until the handler
-- reports what it spent). NULL: 1, so a plain job stores nothing new.
ALTER TABLE chit_jobs ADD COLUMN cost bigint;
ALTER TABLE chit_attempts ADD COLUMN cost bigint;

-- A kind's cost per window, and each key's. Counted on chit_attempts_starts
-- (and _key_starts), which rates already keep: no new index to write.
ALTER TABLE chit_limits ADD COLUMN cost_rate bigint;
ALTER TABLE chit_limits ADD COLUMN cost_rate_seconds double precision;
ALTER TABLE chit_limits ADD COLUMN key_cost_rate bigint;
ALTER TABLE chit_limits ADD COLUMN key_cost_rate_seconds double precision;
