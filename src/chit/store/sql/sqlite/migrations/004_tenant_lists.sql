-- Lists for one tenant (`GET /jobs` with a tenant's API key), newest first. No
-- earlier index starts with the tenant but chit_jobs_idempotency, which holds only
-- the jobs that have a key; without this one a tenant's page walked the primary
-- key over every other tenant's jobs (300 ms at a million jobs for a tenant with
-- none).
CREATE INDEX chit_jobs_tenant_id ON chit_jobs (tenant, id);
