-- The foreign key from attempts to their job checked every attempt written with
-- a row lock on the job (FOR KEY SHARE): about a fifth of a claim's cost. chit
-- writes an attempt only in the statement that claims or finishes its job, so
-- the check never caught anything. Deleting jobs (prune, or by hand) still
-- deletes their attempts, as ON DELETE CASCADE did: one trigger per statement.
ALTER TABLE chit_attempts DROP CONSTRAINT chit_attempts_job_id_fkey;

CREATE FUNCTION chit_delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM chit_attempts WHERE job_id IN (SELECT id FROM chit_deleted);
    RETURN NULL;
END
$$;

CREATE TRIGGER chit_jobs_delete_attempts AFTER DELETE ON chit_jobs
    REFERENCING OLD TABLE AS chit_deleted
    FOR EACH STATEMENT EXECUTE FUNCTION chit_delete_attempts();
