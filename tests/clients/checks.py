"""The assertions every case makes, each returning (ok, detail):

- what reached the mock: as many model requests as the client sent to the gateway, in the same
  order, to the same paths, with the client's credentials and API headers; a body without
  tools byte-identical, a body with tools the client's bytes (decompressed when the client
  compressed them) with ctxd's tool definitions inserted after the client's own, nothing else
  changed (ctxd has nothing else to change in short sessions);
- what the store holds: one new session for the conversation, with the expected agent, and its
  items in order: the user's message, the assistant's tool call, the tool's result, the final
  assistant text (once per tool loop);
- what the CLI shows of it: `ctxd sessions --store DB` lists it as the file holds it, `ctxd report`
  has one turn per model request with the provider's usage, `ctxd history items` the same items.
"""

import json
import os

from harness import (conversation, decode_body, exchanges, is_gemini, is_model_request, is_system, route,
                     tool_defs, tool_name)
from tools_cases import BOOT_MARK, RESET_AT

# Headers that must reach the provider as the client sent them.
FORWARDED = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta", "content-encoding",
             "x-goog-api-key", "x-goog-api-client")


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


def _save_evidence(evidence_dir, case, i, client, upstream):
    os.makedirs(evidence_dir, exist_ok=True)
    stem = os.path.join(evidence_dir, "%s-%d" % (case, i))
    with open(stem + ".client.body", "wb") as f:
        f.write(client)
    with open(stem + ".upstream.body", "wb") as f:
        f.write(upstream)
    return stem


class CtxdTools:
    """ctxd's tool definitions as the gateway offers them, checked against the registry and
    kept per API over the whole run: the same bytes on every request.

    `registry`: name -> (description, schema), as `ctxd mcp` lists the tools; the gateway also
    offers the reset tools `ctxd mcp` leaves out (`gateway_only`)."""

    GATEWAY_ONLY = ("new_context", "wipe_memory")

    def __init__(self, registry):
        self.registry = registry
        self.names = set(registry) | set(self.GATEWAY_ONLY)
        self.offered = {}  # API route -> the definitions' bytes first offered

    def check(self, path, client_tools, inserted):
        """Problems with `inserted` (the bytes the gateway put after the client's tools)."""
        defs = tool_defs(json.loads(b"[" + inserted.lstrip(b",") + b"]"))
        client_names = {tool_name(t) for t in tool_defs(client_tools)}
        names = [tool_name(d) for d in defs]
        problems = []
        unknown = [n for n in names if n not in self.names]
        if unknown:
            problems.append("not ctxd's tools: %s" % unknown)
        shadowed = [n for n in names if n in client_names]
        if shadowed:
            problems.append("shadow the client's own: %s" % shadowed)
        missing = sorted(n for n in set(self.registry) - client_names - set(names))
        if missing:
            problems.append("registry tools not offered: %s" % missing)
        for d in defs:
            spec = self.registry.get(tool_name(d))
            if spec is None:
                continue
            f = d.get("function") or d
            got = (f.get("description"), f.get("input_schema", f.get("parameters", f.get("parametersJsonSchema"))))
            if got != spec:
                problems.append("%s differs from the registry's definition" % tool_name(d))
        api = "gemini" if is_gemini(path) else route(path)  # every model and action alike
        first = self.offered.setdefault(api, inserted.lstrip(b","))
        if first != inserted.lstrip(b","):
            problems.append("not the bytes offered on the run's first %s request" % api)
        return names, problems


def upstream_bodies(sent, got, tools, evidence_dir, case):
    """What the mock received against what the client sent: a body without tools arrives
    byte-identical (still compressed if it was); a body with tools arrives as the client's
    (decompressed) bytes with ctxd's definitions inserted at the end of its `tools` array and
    not one other byte changed, so the conversation is the client's bytes. `tools`: CtxdTools."""
    problems, exact, added = [], 0, set()
    for i, (t, r) in enumerate(zip(sent, got)):
        if t.path != r["path"]:
            problems.append("#%d path %s at the client, %s at the mock" % (i, t.path, r["path"]))
        where = "#%d %s" % (i, route(t.path))
        try:
            client = decode_body(t.body, t.headers)
            upstream = decode_body(r["body_bytes"], r["headers"])
            client_doc = json.loads(client)
        except ValueError as e:
            problems.append("%s: cannot decode: %s" % (where, e))
            continue
        client_tools = client_doc.get("tools") or []
        if not client_tools:
            if t.body != r["body_bytes"]:
                stem = _save_evidence(evidence_dir, case, i, t.body, r["body_bytes"])
                problems.append("%s (no tools): %d bytes sent, %d received, first difference at byte "
                                "%d (saved %s.*)" % (where, len(t.body), len(r["body_bytes"]),
                                                     _first_difference(t.body, r["body_bytes"]), stem))
            else:
                exact += 1
            continue
        at = _first_difference(client, upstream)
        grown = len(upstream) - len(client)
        inserted = upstream[at:at + grown] if grown > 0 else b""
        why = None
        if grown <= 0:
            why = "ctxd's tools were not added (%d bytes sent, %d received)" % (len(client), len(upstream))
        elif upstream[at + grown:] != client[at:]:
            why = "more than an insertion changed: first difference at byte %d" % at
        else:
            try:
                upstream_doc = json.loads(upstream)
                defs = json.loads(b"[" + inserted.lstrip(b",") + b"]")
            except ValueError as e:
                upstream_doc, defs = None, None
                why = "the inserted bytes at %d are not tool definitions: %s" % (at, e)
            if upstream_doc is not None and upstream_doc != dict(client_doc, tools=client_tools + defs):
                why = "the bytes inserted at %d are not at the end of the `tools` array" % at
        if why is None:
            names, wrong = tools.check(t.path, client_tools, inserted)
            added.update(names)
            why = "; ".join(wrong) or None
        if why:
            stem = _save_evidence(evidence_dir, case, i, client, upstream)
            problems.append("%s: %s (saved %s.*)" % (where, why, stem))
    if problems:
        return False, "; ".join(problems)
    compressed = sorted({t.headers["content-encoding"] for t in sent if t.headers.get("content-encoding")})
    return True, "%d bodies%s: %d without tools byte-identical, %d the client's bytes + ctxd's %d tools (%s)" % (
        len(sent), " (sent %s)" % "/".join(compressed) if compressed else "", exact, len(sent) - exact,
        len(added), ", ".join(sorted(added)))


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


def tool_loops(items, prompts, final_text, result_mark="README.md"):
    """For each prompt in order: the user item with it, an assistant tool call, a tool result
    holding `result_mark` (the listing's README.md, a file's text), then an assistant item with
    the final text, as a subsequence of the session's items."""
    steps = []
    for p in prompts:
        steps += [
            ("user message %r" % p, lambda it, p=p: it.get("role") == "user" and p in it.get("text", "")),
            ("assistant tool call", _is_tool_call),
            ("tool result holding %r" % result_mark,
             lambda it: _is_tool_result(it) and ("results" not in it or result_mark in it["results"])),
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
    """`ctxd sessions --store DB --json` lists the session as the store file holds it."""
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


# ------------------------------------------------------------------ ctxd's tools (tools_cases.py)
def _elements(r):
    return conversation(r["path"], json.loads(r["decoded"]))


def _key(element):
    return json.dumps(element, sort_keys=True)


def _excerpt(element, n=100):
    return _key(element)[:n]


def no_refusals(got):
    """The strict mock refused none of the gateway's requests."""
    refused = [(i, r.get("refused")) for i, r in enumerate(got) if r.get("refused")]
    if refused:
        return False, "refused by the mock (upstream request, rule): %s" % refused
    return True, "%d upstream requests, none refused" % len(got)


def upstream_count(sent, got, client_requests, upstream_requests):
    ok = len(sent) == client_requests and len(got) == upstream_requests
    return ok, "the client sent %d model requests (expected %d), the mock received %d (expected %d: %d " \
               "hidden rounds)" % (len(sent), client_requests, len(got), upstream_requests,
                                   upstream_requests - client_requests)


def _answer(r, name):
    """The result text of the last call of `name` in request `r`'s conversation."""
    found = [e for e in exchanges(r["path"], _elements(r)) if e["name"] == name]
    return found[-1]["result"] if found else None


def hidden_rounds(got, sc):
    """Each continuation carries the answer to the ctxd call the model made on the request
    before it, and the client's later requests still show the model its own ctxd exchanges."""
    if len(got) < 8:
        return False, "only %d upstream requests" % len(got)
    want = [
        (1, "notes_write", lambda t: t is not None and sc.note_path in t),
        (2, "notes_write", lambda t: t is not None),  # the client's echo found the exchange
        (4, "notes_read", lambda t: t is not None),
        (5, "history_search_contents", lambda t: t is not None),
        (6, "recall", lambda t: t is not None),
        (7, "recall", lambda t: t is not None),  # the new window keeps its own exchanges
    ]
    problems = []
    for at, name, ok in want:
        answer = _answer(got[at], name)
        if not ok(answer):
            problems.append("upstream #%d: %s %s" % (at, name, "unanswered" if answer is None
                                                     else "answered %r" % answer[:200]))
    if problems:
        return False, "; ".join(problems)
    return True, "notes_write answered in #1 and kept in the client's #2; notes_read, " \
                 "history_search_contents, recall answered in #4-#6 and kept in #7"


def _reset_at(got):
    for i, r in enumerate(got):
        for el in _elements(r):
            if not is_system(el) and BOOT_MARK in _key(el):
                return i, el
    return None, None


def _ctxd_parts(r, ctxd_names):
    """Indexes of the elements of request `r` that are ctxd's calls or their answers."""
    out = set()
    for e in exchanges(r["path"], _elements(r)):
        if e["name"] in ctxd_names:
            out.add(e["at"])
            if e["result_at"] is not None:
                out.add(e["result_at"])
    return out


def window_cut(got, sc, ctxd_names):
    """The window is cut right after new_context: the next request starts with the boot, whose
    notes index names the note; no element of the earlier requests reaches the mock again; the
    first command's output appears after the cut only inside ctxd's calls and answers (the
    history search, recall), the prompt only there and in the boot's checkpoint (which quotes
    the user's recent requests)."""
    r, boot = _reset_at(got)
    if r is None:
        return False, "no request carries the boot (%r)" % BOOT_MARK
    problems = []
    if r != RESET_AT:
        problems.append("the boot first reaches the mock in upstream #%d, not #%d (after new_context)"
                        % (r, RESET_AT))
    if sc.note_path not in _key(boot):
        problems.append("the boot's notes index does not name %s: %s" % (sc.note_path, _key(boot)[:1500]))
    before = {_key(el) for q in got[:r] for el in _elements(q) if not is_system(el)}
    for i, q in enumerate(got[r:], r):
        elements = _elements(q)
        leaked = [el for el in elements if not is_system(el) and _key(el) in before]
        if leaked:
            problems.append("upstream #%d carries %d element(s) of the earlier window: %s"
                            % (i, len(leaked), "; ".join(_excerpt(el) for el in leaked[:3])))
        ctxd = _ctxd_parts(q, ctxd_names)
        rest = [el for k, el in enumerate(elements) if k not in ctxd]
        # The boot's checkpoint quotes the user's recent requests by design; the output of a
        # tool may come back only through ctxd's history tools.
        for label, text, where in (("the first command's output", sc.marker, rest),
                                   ("the prompt", sc.prompt, [el for el in rest if BOOT_MARK not in _key(el)])):
            blob = " ".join(_key(el) for el in where)
            at = blob.find(text)
            if at >= 0:
                problems.append("upstream #%d shows %s outside ctxd's answers: ...%s..."
                                % (i, label, blob[max(0, at - 300):at + len(text) + 50]))
    if problems:
        return False, "; ".join(problems)
    kept = len([el for el in _elements(got[r]) if not is_system(el)])
    return True, "cut at upstream #%d (%d non-system element(s), the boot naming %s); #%d-#%d carry " \
                 "none of the %d earlier elements" % (r, kept, sc.note_path, r, len(got) - 1, len(before))


def notes_read_answer(got, sc):
    answer = _answer(got[4], "notes_read") if len(got) > 4 else None
    if answer is None or sc.note_text not in answer:
        return False, "notes_read's answer in upstream #4 lacks %r: %r" % (sc.note_text, (answer or "")[:300])
    return True, "the note's text, read back in the new window"


def recall_answer(got, found, cli_text, client_output):
    """recall's answer (upstream #6) is what `ctxd recall` reads from the store for the item the
    search named, and holds the output as the client sent it."""
    if found is None:
        return False, "the history search named no item id, so recall was never scripted"
    item_id, _ = found
    answer = _answer(got[6], "recall") if len(got) > 6 else None
    if answer is None:
        return False, "no recall answer in upstream #6"
    problems = []
    if cli_text is None or answer.strip() != cli_text.strip():
        problems.append("the answer differs from `ctxd recall`: %r vs %r" % (answer[:300], (cli_text or "")[:300]))
    if not client_output or client_output.strip() not in answer:
        problems.append("the answer does not hold the client's output %r: %r" % ((client_output or "")[:200],
                                                                             answer[:300]))
    if problems:
        return False, "; ".join(problems)
    return True, "recall(%s) = `ctxd recall` on the store = the client's raw output (%d chars)" % (
        item_id, len(answer))


# Tool-call shapes in transcripts and SDK conversations (Claude Code, Pi, Codex, the three APIs).
CALL_TYPES = ("tool_use", "toolCall", "tool_call", "function_call", "custom_tool_call", "local_shell_call")


def _walk(value):
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def client_view(docs, texts, shell_name, sc, ctxd_names):
    """What the client holds (its transcript's JSON `docs`, its printed `texts`): its own tool
    called twice, and nothing of ctxd's: no call of ctxd's tools, not the note, not the boot."""
    calls, named = {}, []
    for d in _walk(docs):
        if d.get("type") in CALL_TYPES or "tool_calls" in d:
            for c in d.get("tool_calls") or [d]:
                name = c.get("name") or (c.get("function") or {}).get("name")
                calls.setdefault(c.get("id") or c.get("call_id") or id(c), name)
        # Gemini: a `functionCall` part (google-genai's dump spells it `function_call`), Gemini
        # CLI's session records (`toolCalls`, the same ids as the parts).
        for key in ("functionCall", "function_call"):
            c = d.get(key)
            if isinstance(c, dict):
                calls.setdefault(c.get("id") or id(c), c.get("name"))
        for c in d.get("toolCalls") or []:
            if isinstance(c, dict):
                calls.setdefault(c.get("id") or id(c), c.get("name"))
        if d.get("name") in ctxd_names:
            named.append(d.get("name"))
    blob = json.dumps(docs) + "\n".join(texts)
    problems = []
    if named:
        problems.append("the client saw ctxd's tools: %s" % sorted(set(named)))
    for label, text in (("the note", sc.note_text), ("the boot", BOOT_MARK)):
        if text in blob:
            problems.append("the client saw %s (%r)" % (label, text))
    shown = list(calls.values())
    if shown != [shell_name, shell_name]:
        problems.append("the client's tool calls are %s, expected %s twice" % (shown, shell_name))
    if problems:
        return False, "; ".join(problems)
    return True, "the client saw only its %s, twice; no ctxd tool, note or boot" % shell_name


def no_message_after_reset(log, known=()):
    """Over the whole run (`log`: (case, upstream requests) in order): no conversation element
    that reached the mock before a reset reaches it afterwards, in that case or any later.
    `known`: cases whose window cut is a known gateway gap, left out (named in the detail)."""
    problems, resets, checked = [], 0, 0
    skipped = sorted({case for case, _ in log if case in known})
    log = [(case, got) for case, got in log if case not in known]
    for k, (case, got) in enumerate(log):
        try:
            r, _ = _reset_at(got)
        except (ValueError, TypeError):
            continue
        if r is None:
            continue
        resets += 1
        before = {_key(el) for q in got[:r] for el in _elements(q) if not is_system(el)}
        later = [(case, i, q) for i, q in enumerate(got[r:], r)]
        later += [(c, i, q) for c, g in log[k + 1:] for i, q in enumerate(g)]
        for c, i, q in later:
            checked += 1
            try:
                leaked = [el for el in _elements(q) if not is_system(el) and _key(el) in before]
            except (ValueError, TypeError):
                continue
            if leaked:
                problems.append("%s's pre-reset %s reached the mock in %s #%d" % (
                    case, _excerpt(leaked[0], 80), c, i))
    left_out = "; left out (known gaps): %s" % ", ".join(skipped) if skipped else ""
    if problems:
        return False, "; ".join(problems[:5]) + left_out
    return True, "%d resets; none of their earlier elements in the %d requests after them%s" % (
        resets, checked, left_out)


def json_lines(text):
    """The JSON values of a JSON-lines text (other lines skipped)."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def tool_output(tapped, shell_name):
    """The result of the client's first `shell_name` call, as the client sent it (at the tap)."""
    doc = json.loads(decode_body(tapped.body, tapped.headers))
    for e in exchanges(tapped.path, conversation(tapped.path, doc)):
        if e["name"] == shell_name and e["result"] is not None:
            return e["result"]
    return None


def save_upstream(evidence_dir, case, got):
    """The decoded bodies the mock received, one JSON line each, for reading a failure."""
    os.makedirs(evidence_dir, exist_ok=True)
    with open(os.path.join(evidence_dir, "%s.upstream.jsonl" % case), "w") as f:
        for r in got:
            body = (r["decoded"] or b"").decode("utf-8", "replace")
            f.write(json.dumps({"path": r["path"], "refused": r.get("refused"), "body": body}) + "\n")


def self_test(registry, evidence_dir):
    """The body comparison on a zstd-compressed Responses body (no client here compresses: Codex
    0.171 as setup.sh configures it sends plain JSON): accepted with ctxd's definitions
    inserted, refused when one byte of the conversation changes or nothing was inserted."""
    import zstandard

    from tap import Tapped

    client = (b'{"model":"gpt-5","input":[{"role":"user","content":"hi"}],'
              b'"tools":[{"type":"function","name":"bash","parameters":{}}]}')
    defs = b",".join(json.dumps({"type": "function", "name": n, "description": d, "parameters": p}).encode()
                     for n, (d, p) in sorted(registry.items()))
    at = client.rindex(b"]")
    zstd = {"content-encoding": "zstd"}

    def compare(upstream):
        sent = Tapped("POST", "/v1/responses", zstd, zstandard.ZstdCompressor().compress(client))
        got = {"path": "/v1/responses", "headers": zstd, "body_bytes": zstandard.ZstdCompressor().compress(upstream)}
        return upstream_bodies([sent], [got], CtxdTools(registry), evidence_dir, "self-test")[0]

    results = (compare(client[:at] + b"," + defs + client[at:]),
               not compare((client[:at] + b"," + defs + client[at:]).replace(b'"hi"', b'"ho"')),
               not compare(client))
    if all(results):
        return True, "a zstd body with ctxd's tools inserted passes; a changed conversation or no tools fails"
    return False, "the comparison judged wrongly (insertion ok, changed byte refused, no tools refused): %s" % (
        results,)


def gemini_request(sent, got):
    """Gemini's request as the model reads it: the client's `systemInstruction` and
    `generationConfig` unchanged, and the conversation ending with the client's last content."""
    problems, n = [], 0
    for i, (t, r) in enumerate(zip(sent, got)):
        if not is_gemini(t.path):
            continue
        n += 1
        try:
            client = json.loads(decode_body(t.body, t.headers))
            upstream = json.loads(r["decoded"])
        except (TypeError, ValueError) as e:
            problems.append("#%d: cannot decode: %s" % (i, e))
            continue
        for key in ("systemInstruction", "generationConfig"):
            if client.get(key) != upstream.get(key):
                problems.append("#%d %s: %s sent, %s received" % (i, key, _excerpt(client.get(key)),
                                                                  _excerpt(upstream.get(key))))
        mine, theirs = client.get("contents") or [], upstream.get("contents") or []
        if not theirs or not mine or theirs[-1] != mine[-1]:
            problems.append("#%d: the conversation does not end with the client's last content: %s" % (
                i, _excerpt(theirs[-1] if theirs else None)))
    if problems:
        return False, "; ".join(problems[:6])
    return True, "%d Gemini requests: the client's systemInstruction and generationConfig, its last " \
                 "content last" % n
