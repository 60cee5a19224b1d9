-- Notes: virtual files in five homes. `scope` names the home ('session:<id>', 'project:<key>',
-- 'human', 'agent:<name>', 'model:<name>'); every change is a row in note_versions, so an
-- overwrite or a delete loses nothing.
CREATE TABLE notes (
    tenant      TEXT NOT NULL,
    scope       TEXT NOT NULL,
    path        TEXT NOT NULL,
    body        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    stale       INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant, scope, path)
) WITHOUT ROWID;

CREATE TABLE note_versions (
    tenant      TEXT NOT NULL,
    scope       TEXT NOT NULL,
    path        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    op          TEXT NOT NULL,          -- write, append, delete, rename_from, rename_to, stale
    body        TEXT,                   -- the note after the change (NULL after a delete)
    at          TEXT NOT NULL,
    PRIMARY KEY (tenant, scope, path, version)
) WITHOUT ROWID;
