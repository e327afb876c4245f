-- Lists for one tenant (`GET /jobs` with a tenant's API key), newest first. No
-- earlier index starts with the tenant but chit_jobs_idempotency, which holds only
-- the jobs that have a key; without this one a page for a tenant with few jobs
-- read the whole table (70 ms at a million jobs). The planner still walks the
-- primary key for a tenant whose jobs are common, as their rows come soon.
CREATE INDEX chit_jobs_tenant_id ON chit_jobs (tenant, id);
