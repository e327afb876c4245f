-- API keys for the HTTP API. The key itself is never stored: only the sha256
-- of the whole key, looked up on each request.

CREATE TABLE chit_api_keys (
    id         TEXT PRIMARY KEY,  -- public handle, shown by `chit keys list`
    name       TEXT NOT NULL DEFAULT '',
    tenant     TEXT NOT NULL DEFAULT '',  -- '*' means every tenant
    scopes     TEXT NOT NULL,  -- space-separated: submit read admin
    key_hash   TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
