"""The assertions every case makes, each returning (ok, detail):

- what reached the mock: as many model requests as the client sent to the gateway, in the same
  order, to the same paths, with byte-identical bodies (ctxd has nothing to change in short
  sessions) and the client's credentials and API headers;
- what the store holds: one new session for the conversation, with the expected agent, and its
  items in order: the user's message, the assistant's tool call, the tool's result, the final
  assistant text (once per tool loop);
- what the CLI shows of it: `ctxd sessions --store` lists it as the file holds it, `ctxd report`
  has one turn per model request with the provider's usage, `ctxd history items` the same items.
"""

import os

from harness import is_model_request, route

# Headers that must reach the provider as the client sent them.
FORWARDED = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta", "content-encoding")


def model_pairs(tapped, received):
    """The client's model requests (at the tap) and the mock's, each in arrival order."""
    sent = [t for t in tapped if is_model_request(t.method, t.path)]
    got = [r for r in received if is_model_request(r["method"], r["path"])]
    return sent, got


def same_count(sent, got, at_least, client_count=None):
    detail = "client sent %d model requests, mock received %d" % (len(sent), len(got))
    if client_count is not None:
        detail += ", the client made %d calls" % client_count
    ok = len(sent) == len(got) and len(sent) >= at_least
    if client_count is not None:
        ok = ok and client_count == len(sent)
    if len(sent) < at_least:
        detail += " (expected at least %d)" % at_least
    return ok, detail


def gateway_answered(sent):
    bad = [(i, t.status) for i, t in enumerate(sent) if not 200 <= t.status < 300]
    if bad:
        return False, "non-2xx answers from the gateway (request index, status): %s" % bad
    return True, "%d model requests answered 2xx" % len(sent)


def _first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def identical_bodies(sent, got, evidence_dir, case):
    """Body bytes as the client sent them (still compressed if they were) == what the mock got."""
    problems = []
    for i, (t, r) in enumerate(zip(sent, got)):
        if t.path != r["path"]:
            problems.append("#%d path %s at the client, %s at the mock" % (i, t.path, r["path"]))
        if t.body != r["body_bytes"]:
            at = _first_difference(t.body, r["body_bytes"])
            os.makedirs(evidence_dir, exist_ok=True)
            stem = os.path.join(evidence_dir, "%s-%d" % (case, i))
            with open(stem + ".client.body", "wb") as f:
                f.write(t.body)
            with open(stem + ".upstream.body", "wb") as f:
                f.write(r["body_bytes"])
            problems.append(
                "#%d %s: %d bytes sent, %d received, first difference at byte %d (saved %s.*)"
                % (i, route(t.path), len(t.body), len(r["body_bytes"]), at, stem)
            )
    if problems:
        return False, "; ".join(problems)
    total = sum(len(t.body) for t in sent)
    return True, "%d bodies, %d bytes, byte-identical" % (len(sent), total)


def forwarded_headers(sent, got):
    problems = []
    for i, (t, r) in enumerate(zip(sent, got)):
        for name in FORWARDED:
            if t.headers.get(name) != r["headers"].get(name):
                problems.append("#%d %s: %r sent, %r received" % (i, name, t.headers.get(name),
                                                               r["headers"].get(name)))
    if problems:
        return False, "; ".join(problems[:6])
    return True, "credentials and API headers forwarded unchanged"


def one_session(new_sessions, agents, grown=()):
    """Exactly one new session, its agent one of `agents` (`grown`: older sessions that got
    entries meanwhile, where the conversation went instead)."""
    if len(new_sessions) != 1:
        keys = [(s.get("key"), s.get("agent")) for s in new_sessions]
        detail = "expected one new session, found %d: %s" % (len(new_sessions), keys)
        if grown:
            detail += "; appended instead to %s" % ", ".join(
                "session %s (key %s, now %d entries)" % (s["id"], s["key"], s["entries"]) for s in grown)
        return False, detail
    s = new_sessions[0]
    if s.get("agent") not in agents:
        return False, "session %s (key %s) has agent %r, expected %s" % (
            s.get("id"), s.get("key"), s.get("agent"), " or ".join(map(repr, agents)))
    return True, "session %s, key %s, agent %s, %s entries" % (
        s.get("id"), s.get("key"), s.get("agent"), s.get("entries"))


def _is_tool_result(item):
    # Chat and Responses results are `tool` messages; Anthropic's are user messages holding
    # tool_result blocks (the CLI shows them as user items naming the tool).
    if "blocks" in item:
        return "tool_result" in item["blocks"]
    return item.get("role") == "tool" or (item.get("role") == "user" and bool(item.get("tools")))


def _is_tool_call(item):
    if "blocks" in item:
        return item.get("role") == "assistant" and "tool_call" in item["blocks"]
    return item.get("role") == "assistant" and bool(item.get("tools"))


def tool_loops(items, prompts, final_text):
    """For each prompt in order: the user item with it, an assistant tool call, a tool result,
    then an assistant item with the final text, as a subsequence of the session's items."""
    steps = []
    for p in prompts:
        steps += [
            ("user message %r" % p, lambda it, p=p: it.get("role") == "user" and p in it.get("text", "")),
            ("assistant tool call", _is_tool_call),
            ("tool result listing README.md",
             lambda it: _is_tool_result(it) and ("results" not in it or "README.md" in it["results"])),
            ("assistant %r" % final_text,
             lambda it: it.get("role") == "assistant" and not it.get("tools")
             and it.get("text", "").strip() == final_text),
        ]
    k = 0
    for it in items:
        if k < len(steps) and steps[k][1](it):
            k += 1
    summary = ", ".join("%s%s" % (it.get("role"), "[%s]" % ",".join(it["tools"]) if it.get("tools") else "")
                        for it in items)
    if k < len(steps):
        return False, "missing %s (found %d of %d steps) in items: %s" % (steps[k][0], k, len(steps), summary)
    return True, "%d items: %s" % (len(items), summary)


def cli_sessions(session, listed):
    """`ctxd sessions --store --json` lists the session as the store file holds it."""
    rows = [s for s in listed if s.get("id") == session["id"]]
    if not rows:
        return False, "`ctxd sessions --json` does not list session %s (key %s, tenant %s); it lists %d" % (
            session["id"], session["key"], session["tenant"], len(listed))
    row = rows[0]
    diff = ["%s %r (file: %r)" % (k, row.get(k), session[k]) for k in ("key", "tenant", "agent", "entries")
            if k in row and row.get(k) != session[k]]
    if diff:
        return False, "the CLI shows " + ", ".join(diff)
    return True, "listed: key %s, agent %s, %s entries, %s turns" % (
        row.get("key"), row.get("agent"), row.get("entries"), row.get("turns"))


def cli_report(report, requests):
    """`ctxd report SESSION --json`: one turn per model request, each with the provider's usage."""
    turns = report.get("turns") or []
    count = (report.get("session") or {}).get("turn_count")
    if count != requests or len(turns) != requests:
        return False, "report shows %s turns (%d rows), the client made %d model requests" % (
            count, len(turns), requests)
    missing = [t.get("turn") for t in turns if not t.get("provider")]
    if missing:
        return False, "turns without the provider's usage: %s" % missing
    return True, "%d turns, each with provider usage (peak %d input tokens)" % (
        count, max(t["provider"] for t in turns))


def cli_history(cli_items, items):
    """`ctxd history items --json` shows the items the store file holds (role, tools, order)."""
    want = [(i["role"], sorted(set(i["tools"]))) for i in items]
    got = [(i.get("role"), sorted(set(i.get("tools", [])))) for i in cli_items]
    if want != got:
        return False, "`ctxd history items` shows %s, the store holds %s" % (got, want)
    return True, "%d items, as in the store" % len(cli_items)
