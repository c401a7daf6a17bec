-- Secrets the collectors of one deployment share and nobody configures: the key that signs
-- session cookies (docs/security.md). Generated at random by the first collector that needs
-- one; `gpulens rotate-session-key` replaces it.
CREATE TABLE secrets (
    name        text   PRIMARY KEY,
    value       bytea  NOT NULL,
    created_ms  bigint NOT NULL
);
