"""`ctxd run` with the real agents: Claude Code, Codex and Pi launched by `ctxd run` (a gateway
of its own on a store of the case's own, forwarding to the mock) each complete the mock's tool
task (the shell tool, then "done"). Checked: the agent's exit and answer, the requests reaching
the mock through ctxd (with ctxd's tools added), the agent's session in the store, the summary
line on stderr, and the agent's exit code coming back when it fails.
"""

import os
import re
import sqlite3

import agent_cases

NAME = "ctxd-run"
SUMMARY = re.compile(r"ctxd run: (\S+): (\d+) sessions?, (\d+) turns?, (\d+) requests?; sent [\d,]+ tokens "
                     r"of [\d,]+")


def _sessions(store, agent):
    """(key, entries) of the store's sessions of `agent`, read from the file itself."""
    db = sqlite3.connect("file:%s?mode=ro" % store, uri=True, timeout=10)
    try:
        return db.execute(
            "SELECT s.key, COUNT(e.seq) FROM sessions s LEFT JOIN entries e ON e.session_id = s.id"
            " WHERE s.agent = ? GROUP BY s.id", (agent,)).fetchall()
    finally:
        db.close()


def run(ctxd, mock, ctx, report):
    store = os.path.join(ctx.workdir, "ctxd-run.db")
    launcher = [ctxd, "--store", store, "run", "--"]
    upstreams = {"CTXD_UPSTREAM_ANTHROPIC": mock.url, "CTXD_UPSTREAM_OPENAI": mock.url,
                 "CTXD_UPSTREAM_GEMINI": mock.url}
    agents = [
        ("claude-code", "claude-code", lambda: agent_cases.claude_code(
            None, ctx.clients_dir, ctx.logdir, launcher=launcher, env_extra=upstreams,
            log_name="run-claude-code")),
        ("codex", "codex", lambda: agent_cases.codex(
            None, ctx.clients_dir, ctx.logdir, launcher=launcher, env_extra=upstreams)),
        ("pi", "pi", lambda: agent_cases.pi(
            "mock-anthropic", "claude-sonnet-4-5", None, ctx.clients_dir, ctx.logdir,
            launcher=launcher, env_extra=upstreams)),
    ]
    for name, stored_as, launch in agents:
        case = "%s %s" % (NAME, name)
        print("== %s" % case, flush=True)
        mock.clear()
        before = {k for k, _ in _sessions(store, stored_as)} if os.path.exists(store) else set()
        result = launch()
        report.add(case, "agent", result.rc == 0 and result.final == "done", "exit %d, printed %r%s" % (
            result.rc, result.final, "" if result.rc == 0 else ": " + result.stderr.strip()[-300:]))
        got = [r for r in mock.requests() if r.get("method") == "POST"]
        tools = [r for r in got if b"history_search_contents" in (r.get("decoded") or b"")]
        report.add(case, "through ctxd", len(got) >= 2 and len(tools) == len(got),
                   "%d requests reached the mock, %d with ctxd's tools" % (len(got), len(tools)))
        found = SUMMARY.search(result.stderr)
        ok = (bool(found) and found.group(1) == name and found.group(2) == "1" and found.group(3) == "1"
              and int(found.group(4)) == len(got))
        report.add(case, "summary", ok, (found.group(0) if found else "no summary line in: %r"
                                         % result.stderr.strip()[-400:]))
        news = [(k, n) for k, n in _sessions(store, stored_as) if k not in before]
        report.add(case, "store session", len(news) == 1 and news[0][1] >= 4,
                   "new %s sessions (key, entries): %r" % (stored_as, news))

    # A failing agent: ctxd run's exit code is the agent's own.
    case = "%s exit code" % NAME
    print("== %s" % case, flush=True)
    direct = agent_cases.codex(None, ctx.clients_dir, ctx.logdir, prompt="--no-such-flag")
    wrapped = agent_cases.codex(None, ctx.clients_dir, ctx.logdir, prompt="--no-such-flag",
                                launcher=launcher, env_extra=upstreams)
    report.add(case, "the agent's own", direct.rc != 0 and wrapped.rc == direct.rc,
               "codex alone exited %d, under ctxd run %d" % (direct.rc, wrapped.rc))
