-- History index: derived from `entries` (the log stays the truth), filled incrementally by the
-- history feature before it reads (rows up to the session's highest indexed seq are current).
-- One row per entry: its lane (the chain it continues, so the active branch is a few
-- (lane, last seq) pairs), the window it belongs to, and for items (entries that say something)
-- the opaque item key, role and tool names.
CREATE TABLE history_items (
    rowid       INTEGER PRIMARY KEY,
    session_id  INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    parent_seq  INTEGER,                -- NULL for a root or an unknown parent
    lane        INTEGER NOT NULL,       -- seq of the lane's first entry
    window_seq  INTEGER NOT NULL,       -- seq of the entry that opened the window
    item_key    INTEGER,                -- NULL when the entry is not an item
    kind        TEXT,                   -- message, boot, compaction, branch_summary
    role        TEXT,
    tools       TEXT NOT NULL DEFAULT '', -- tool names, one per line
    sidechain   INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, seq)
);
CREATE INDEX history_items_parent ON history_items (session_id, parent_seq);
CREATE INDEX history_items_lane ON history_items (session_id, lane, seq);
CREATE INDEX history_items_window ON history_items (session_id, window_seq, seq);
-- Window openers (a root or a marker): few rows, found without scanning the session.
CREATE INDEX history_items_starts ON history_items (session_id, seq) WHERE window_seq = seq;
CREATE INDEX history_items_key ON history_items (session_id, item_key) WHERE item_key IS NOT NULL;

-- Tool call ids to names, so a result that does not name its tool can be filtered by it.
CREATE TABLE history_calls (
    session_id  INTEGER NOT NULL,
    call_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;

-- Literal (case-sensitive substring) search: a contentless trigram index of items' text, keyed
-- by history_items.rowid. A query of 3+ characters is one phrase of its trigrams.
CREATE VIRTUAL TABLE history_trigram USING fts5(text, content='', tokenize='trigram case_sensitive 1');
