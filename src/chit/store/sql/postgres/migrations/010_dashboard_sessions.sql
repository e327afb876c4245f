-- The dashboard's sessions (chit.dashboard.session). The cookie holds a random
-- session id; only its sha256 is stored, so a copy of this table signs no one in.
-- A session ends at idle_expires_at (moved forward by each request, never past
-- expires_at), at expires_at, at sign-out (the row is deleted) and when its key
-- is revoked (its rows are deleted, and each request checks the key anyway).

CREATE TABLE chit_sessions (
    id_hash         text PRIMARY KEY,
    key_hash        text NOT NULL,  -- the key signed in with, hashed as chit_api_keys
    created_at      timestamptz NOT NULL,
    idle_expires_at timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL
);
CREATE INDEX chit_sessions_key ON chit_sessions (key_hash);
CREATE INDEX chit_sessions_expiry ON chit_sessions (idle_expires_at);
