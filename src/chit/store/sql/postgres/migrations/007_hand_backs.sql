-- How often a job was handed back unfinished (a worker stopping): the first
-- hand-backs do not use up an attempt, later ones do (invariant 6), so a job no
-- deploy lets finish still ends failed. A constant default: no table rewrite.
ALTER TABLE chit_jobs ADD COLUMN hand_backs integer NOT NULL DEFAULT 0;
