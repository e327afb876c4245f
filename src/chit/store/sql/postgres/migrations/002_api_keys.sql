-- API keys for the HTTP API. The key itself is never stored: only the sha256
-- of the whole key, looked up on each request.

CREATE TABLE chit_api_keys (
    id         text PRIMARY KEY,  -- public handle, shown by `chit keys list`
    name       text NOT NULL DEFAULT '',
    tenant     text NOT NULL DEFAULT '',  -- '*' means every tenant
    scopes     text NOT NULL,  -- space-separated: submit read admin
    key_hash   text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
