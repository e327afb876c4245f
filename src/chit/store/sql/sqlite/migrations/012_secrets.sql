-- Secrets the server makes for itself, once, and every API process shares: the
-- key that signs event-stream tokens (chit.api.tokens). Made at first use; a
-- row is never changed, so tokens stay valid across restarts and processes.

CREATE TABLE chit_secrets (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,  -- hex
    created_at TEXT NOT NULL
);
