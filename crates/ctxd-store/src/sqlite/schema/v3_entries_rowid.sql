-- Entries become a rowid table. As `WITHOUT ROWID`, a row's whole record was its B-tree key:
-- every seek that met a large entry (a 1 MB tool result) read its overflow pages to compare
-- keys, so a 2-entry append beside 170 KB entries cost 0.7 ms at the median (0.05 ms beside
-- small ones), on the path of every response the gateway acknowledges. Keyed by rowid, seeks
-- compare integers; (session_id, seq) and (session_id, id) are unique indexes. Same columns,
-- same order, every row copied.
CREATE TABLE entries_v3 (
    session_id  INTEGER NOT NULL REFERENCES sessions(id),
    seq         INTEGER NOT NULL,
    id          TEXT NOT NULL,
    parent      TEXT,
    timestamp   TEXT,
    sidechain   INTEGER NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    format      INTEGER NOT NULL DEFAULT 1,
    raw         BLOB,
    batch       INTEGER NOT NULL,
    UNIQUE (session_id, seq),
    UNIQUE (session_id, id)
);
INSERT INTO entries_v3 (session_id, seq, id, parent, timestamp, sidechain, kind, body, format, raw, batch)
    SELECT session_id, seq, id, parent, timestamp, sidechain, kind, body, format, raw, batch
    FROM entries ORDER BY session_id, seq;
DROP TABLE entries;
ALTER TABLE entries_v3 RENAME TO entries;
-- An append's batch number is the session's highest + 1: read from this index, not from the
-- last row, whose `batch` sits behind its `body` and `raw`.
CREATE INDEX entries_batch ON entries (session_id, batch);
