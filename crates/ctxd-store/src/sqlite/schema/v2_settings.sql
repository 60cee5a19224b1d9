-- Store-wide settings and secrets (the gateway's tenant-hash key). Written once, never logged.
CREATE TABLE settings (
    key         TEXT PRIMARY KEY,
    value       BLOB NOT NULL
) WITHOUT ROWID;
