-- Secrets the server makes for itself, once, and every API process shares: the
-- key that signs event-stream tokens (chit.api.tokens). Made at first use; a
-- row is never changed, so tokens stay valid across restarts and processes.

CREATE TABLE chit_secrets (
    name       text PRIMARY KEY,
    value      text NOT NULL,  -- hex
    created_at timestamptz NOT NULL DEFAULT now()
);
