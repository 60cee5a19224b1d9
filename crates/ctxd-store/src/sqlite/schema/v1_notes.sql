-- Notes: virtual files in five homes. `home` names the home ('session:<key>', 'project:<key>',
-- 'human', 'agent:<name>', 'model:<name>'); no query crosses tenants. Times are milliseconds
-- since the Unix epoch, given by the engine. Every change is a row in note_versions in the same
-- transaction, so an overwrite, an append, a rename or a delete loses nothing.
CREATE TABLE notes (
    tenant      TEXT NOT NULL,
    home        TEXT NOT NULL,
    path        TEXT NOT NULL,
    body        TEXT NOT NULL,
    bytes       INTEGER NOT NULL,       -- UTF-8 bytes of body
    lines       INTEGER NOT NULL,       -- editor-style line count of body
    version     INTEGER NOT NULL,       -- the note_versions row holding this state
    stale       INTEGER NOT NULL DEFAULT 0,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, home, path)
) WITHOUT ROWID;

-- Versions of a note path, numbered from 1 and never reused (a path deleted and written again
-- continues its numbering). `body` holds the whole note for 'write' and 'rename_in', only the
-- appended bytes for 'append', and NULL for 'delete', 'rename_out', 'stale' and 'fresh'; any
-- version's body is the last whole body before it plus the appends since.
CREATE TABLE note_versions (
    tenant      TEXT NOT NULL,
    home        TEXT NOT NULL,
    path        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    op          TEXT NOT NULL,          -- write, append, delete, rename_in, rename_out, stale, fresh
    body        TEXT,
    other       TEXT,                   -- rename_in: 'home\tpath' it came from; rename_out: where it went
    at_ms       INTEGER NOT NULL,
    PRIMARY KEY (tenant, home, path, version)
) WITHOUT ROWID;
