-- Budgets' spending counters: per scope (a session, project, tenant or everything) and period
-- (a UTC day, a month, or the whole life), what responses were billed and what requests in
-- flight reserved. Amounts in tokens and in millionths of a dollar.
CREATE TABLE spend (
    scope               TEXT NOT NULL,
    period              TEXT NOT NULL,
    used_tokens         INTEGER NOT NULL DEFAULT 0,
    used_micro_usd      INTEGER NOT NULL DEFAULT 0,
    reserved_tokens     INTEGER NOT NULL DEFAULT 0,
    reserved_micro_usd  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, period)
) WITHOUT ROWID;
