-- Budgets' spending counters (as SQLite's v4_spend.sql): per scope and period, what responses
-- were billed and what requests in flight reserved, in tokens and millionths of a dollar.
CREATE TABLE spend (
    scope               TEXT NOT NULL,
    period              TEXT NOT NULL,
    used_tokens         BIGINT NOT NULL DEFAULT 0,
    used_micro_usd      BIGINT NOT NULL DEFAULT 0,
    reserved_tokens     BIGINT NOT NULL DEFAULT 0,
    reserved_micro_usd  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, period)
);
