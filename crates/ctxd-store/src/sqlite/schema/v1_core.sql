-- Sessions and their append-only entries. A tenant is a keyed hash of a client credential
-- ('' for the local CLI); no query crosses tenants.
CREATE TABLE sessions (
    id          INTEGER PRIMARY KEY,
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    agent       TEXT,
    meta        TEXT NOT NULL,          -- SessionMeta as JSON
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    leaf        TEXT,                   -- the active branch's leaf entry id
    UNIQUE (tenant, key)
);

CREATE TABLE entries (
    session_id  INTEGER NOT NULL REFERENCES sessions(id),
    seq         INTEGER NOT NULL,       -- append order within the session, from 1
    id          TEXT NOT NULL,
    parent      TEXT,
    timestamp   TEXT,
    sidechain   INTEGER NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL,          -- EntryKind tag, for queries without parsing
    body        TEXT NOT NULL,          -- EntryKind as JSON (entry format 1)
    format      INTEGER NOT NULL DEFAULT 1,
    raw         BLOB,                   -- the client's own bytes for this entry, when known
    batch       INTEGER NOT NULL,       -- the atomic batch the entry was appended in
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, id)
) WITHOUT ROWID;

-- Full-text index of what each entry says (history search). Contentless: the text lives in
-- `entries.body`; rows are keyed by (session_id, seq) through the rowid mapping table below.
CREATE TABLE entry_text (
    rowid       INTEGER PRIMARY KEY,
    session_id  INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE VIRTUAL TABLE entry_fts USING fts5(text, content='', tokenize='unicode61');
