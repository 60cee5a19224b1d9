-- The PostgreSQL schema: SQLite's tables (schema/v1_*.sql .. v3) with PostgreSQL's types and
-- PostgreSQL's own search indexes. Ordered text columns use the "C" collation, so listings sort
-- by bytes as SQLite's do, whatever the database's locale.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE sessions (
    id          BIGSERIAL PRIMARY KEY,
    tenant      TEXT COLLATE "C" NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    agent       TEXT,
    meta        TEXT NOT NULL,          -- SessionMeta as JSON
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL,
    leaf        TEXT,                   -- the active branch's leaf entry id
    UNIQUE (tenant, key)
);

CREATE TABLE entries (
    session_id  BIGINT NOT NULL REFERENCES sessions(id),
    seq         BIGINT NOT NULL,        -- append order within the session, from 1
    id          TEXT NOT NULL,
    parent      TEXT,
    ts          TEXT,                   -- the entry's timestamp
    sidechain   BOOLEAN NOT NULL DEFAULT FALSE,
    kind        TEXT NOT NULL,          -- EntryKind tag, for queries without parsing
    body        TEXT NOT NULL,          -- EntryKind as JSON (entry format 1)
    format      INTEGER NOT NULL DEFAULT 1,
    raw         BYTEA,                  -- the client's own bytes for this entry, when known
    batch       BIGINT NOT NULL,        -- the atomic batch the entry was appended in
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, id)
);
CREATE INDEX entries_batch ON entries (session_id, batch);

-- Ranked search: each entry's words (ctxd_core::history::ranked_words, lower-cased), built by
-- ctxd rather than by a text search parser, so both stores split text the same way.
CREATE TABLE entry_text (
    session_id  BIGINT NOT NULL,
    seq         BIGINT NOT NULL,
    words       TSVECTOR NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX entry_text_words ON entry_text USING GIN (words);

-- History index: derived from `entries`, as SQLite's (schema/v1_history.sql). `text` is the
-- item's text for literal search (SQLite keeps it in a contentless trigram index instead).
CREATE TABLE history_items (
    session_id  BIGINT NOT NULL,
    seq         BIGINT NOT NULL,
    parent_seq  BIGINT,
    lane        BIGINT NOT NULL,
    window_seq  BIGINT NOT NULL,
    item_key    BIGINT,
    kind        TEXT,
    role        TEXT,
    tools       TEXT NOT NULL DEFAULT '',
    sidechain   BOOLEAN NOT NULL DEFAULT FALSE,
    text        TEXT,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX history_items_parent ON history_items (session_id, parent_seq);
CREATE INDEX history_items_lane ON history_items (session_id, lane, seq);
CREATE INDEX history_items_window ON history_items (session_id, window_seq, seq);
CREATE INDEX history_items_starts ON history_items (session_id, seq) WHERE window_seq = seq;
CREATE INDEX history_items_key ON history_items (session_id, item_key) WHERE item_key IS NOT NULL;
-- Literal (case-sensitive substring) search: LIKE through a trigram index.
CREATE INDEX history_items_text ON history_items USING GIN (text gin_trgm_ops);

CREATE TABLE history_calls (
    session_id  BIGINT NOT NULL,
    call_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    PRIMARY KEY (session_id, call_id)
);

CREATE TABLE notes (
    tenant      TEXT NOT NULL,
    home        TEXT NOT NULL,
    path        TEXT COLLATE "C" NOT NULL,
    body        TEXT NOT NULL,
    bytes       BIGINT NOT NULL,
    lines       BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    stale       BOOLEAN NOT NULL DEFAULT FALSE,
    created_ms  BIGINT NOT NULL,
    updated_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant, home, path)
);

CREATE TABLE note_versions (
    tenant      TEXT NOT NULL,
    home        TEXT NOT NULL,
    path        TEXT NOT NULL,
    version     BIGINT NOT NULL,
    op          TEXT NOT NULL,
    body        TEXT,
    other       TEXT,
    at_ms       BIGINT NOT NULL,
    PRIMARY KEY (tenant, home, path, version)
);

CREATE TABLE settings (
    key         TEXT PRIMARY KEY,
    value       BYTEA NOT NULL
);
