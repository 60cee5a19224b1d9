"""A login that rotates: Claude Code on a Pro/Max login sends an OAuth access token that is
refreshed every few hours. Two runs of one Claude Code session (`--session-id`, then `--resume`)
under two different tokens, through a gateway on loopback (one local tenant whatever the
credential): the first run's model writes a note for the human and one for the session, the
second's reads both back. Checked: the tokens and the OAuth beta reach the mock untouched, the
second run's continuation carries both notes, and the store holds one session for the two runs.
"""

import json
import uuid

import agent_cases
from harness import wait_until

NAME = "claude-code-oauth-rotation"


def run(gw, mock, ctx, report):
    tag = uuid.uuid4().hex[:8]
    session_id = str(uuid.uuid4())
    human = {"path": "@human/oauth-%s.md" % tag, "text": "HUMAN-NOTE-%s" % tag}
    own = {"path": "oauth-%s.md" % tag, "text": "SESSION-NOTE-%s" % tag}
    tokens = ("sk-ant-oat01-first-" + tag, "sk-ant-oat01-refreshed-" + tag)
    before = {s["id"] for s in gw.sessions()}
    gw.tap.take()
    mock.clear()
    runs = []
    for i, (token, specs, args) in enumerate([
        (tokens[0], ["tool:notes_write:" + json.dumps(human), "tool:notes_write:" + json.dumps(own)],
         ["--session-id", session_id]),
        (tokens[1], ["tool:notes_read:" + json.dumps({"path": human["path"]}),
                     "tool:notes_read:" + json.dumps({"path": own["path"]})],
         ["--resume", session_id]),
    ]):
        mock.queue(specs)
        result = agent_cases.claude_code(gw.url, ctx.clients_dir, ctx.logdir, "run %d (%s)" % (i + 1, tag),
                                         oauth_token=token, args=args, log_name="%s-%d" % (NAME, i + 1))
        runs.append(result)
        report.add(NAME, "run %d" % (i + 1), result.rc == 0 and result.final == "done",
                   "exit %d, printed %r%s" % (result.rc, result.final,
                                              "" if result.rc == 0 else ": " + result.stderr.strip()[-300:]))

    got = [r for r in mock.requests() if r.get("method") == "POST"]
    bearer = [(r.get("headers") or {}).get("authorization") for r in got]
    want = ["Bearer " + tokens[0]] * 3 + ["Bearer " + tokens[1]] * 3
    report.add(NAME, "tokens untouched", bearer == want, "authorization upstream: %r" % bearer)
    betas = [(r.get("headers") or {}).get("anthropic-beta", "") for r in got]
    report.add(NAME, "oauth beta untouched", bool(betas) and all("oauth-2025-04-20" in b for b in betas),
               "anthropic-beta upstream: %r" % betas[:1])
    leaked = [k for r in got for k in (r.get("headers") or {}) if k.lower().startswith("x-ctxd-")]
    report.add(NAME, "no ctxd header upstream", not leaked, "%r" % leaked)
    text = (got[-1].get("decoded") or b"").decode("utf-8", "replace") if got else ""
    report.add(NAME, "notes kept across the refresh",
               human["text"] in text and own["text"] in text,
               "the second run's last upstream request %s the human note and %s the session note" % (
                   "carries" if human["text"] in text else "lacks", "carries" if own["text"] in text else "lacks"))

    def landed():
        news = [s for s in gw.sessions() if s["id"] not in before]
        return news if news and all(s["entries"] > 0 for s in news) else None

    wait_until(landed, timeout=10)
    news = [s for s in gw.sessions() if s["id"] not in before]
    ok = len(news) == 1 and news[0]["key"] == session_id and news[0]["tenant"] == ""
    report.add(NAME, "one session", ok, "new sessions: %r" % [
        (s["key"], s["tenant"][:12], s["entries"]) for s in news])
    return runs
