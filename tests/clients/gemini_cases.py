"""Gemini's API beyond the tool loops: google-genai without tools (JSON, SSE, and the JSON-array
stream Google sends without `alt=sse`, the last as a raw request), whose bodies ctxd must pass
through byte for byte; and a key in the URL (`?key=`, as curl examples and some SDKs send it),
which ctxd moves into the `x-goog-api-key` header on arrival: it must reach the mock there, the
path without it, and appear in neither the store file nor ctxd's log.
"""

import json
import os
import urllib.request
import uuid

import checks
import sdk_cases
from harness import route, wait_until

PLAIN = "gemini-sdk-plain"
QUERY_KEY = "gemini-query-key"
NAMES = (PLAIN, QUERY_KEY)
FINAL = "done"


def _post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict({"content-type": "application/json"}, **(headers or {})))
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.read()


def _get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.read()


def _chunks_text(chunks):
    return "".join(p.get("text", "") for c in chunks for cand in c.get("candidates") or []
                   for p in (cand.get("content") or {}).get("parts") or [] if not p.get("thought"))


def _sse_chunks(raw):
    out = []
    for event in raw.decode().replace("\r\n", "\n").split("\n\n"):
        data = "".join(l[len("data:"):].strip() for l in event.split("\n") if l.startswith("data:"))
        if data:
            out.append(json.loads(data))
    return out


def _new_sessions(gw, before, prompts):
    """The sessions created since `before` (ids), once each prompt's answer has landed."""
    def landed():
        news = [s for s in gw.sessions() if s["id"] not in before]
        texts = [" ".join(i["text"] for i in gw.items(s["id"])) for s in news]
        return news if all(any(p in t and FINAL in t for t in texts) for p in prompts) else None

    wait_until(landed, timeout=10)
    return [s for s in gw.sessions() if s["id"] not in before]


def _store_prompts(gw, news, prompts):
    """Each prompt in a new session of the SDK's: the user's text, then the model's answer."""
    problems, seen = [], []
    for p in prompts:
        found = None
        for s in news:
            items = gw.items(s["id"])
            roles = [(i["role"], i["text"].strip()) for i in items]
            if ("user", p) in roles and roles[-1] == ("assistant", FINAL):
                found = (s, roles)
        if found is None:
            problems.append("no new session holds %r then %r: %s" % (
                p, FINAL, [(s["id"], [(i["role"], i["text"][:60]) for i in gw.items(s["id"])]) for s in news]))
            continue
        s, roles = found
        if s["agent"] not in ("sdk", "api"):
            problems.append("session %s has agent %r" % (s["id"], s["agent"]))
        seen.append("%s (%s, %d items)" % (s["id"], s["agent"], len(roles)))
    if problems:
        return False, "; ".join(problems)
    return True, "sessions %s" % ", ".join(seen)


def run_plain(gw, mock, ctx, report):
    """generate_content, generate_content_stream (alt=sse), and the JSON-array stream: no
    tools, so ctxd offers none and every body reaches the mock as the client sent it."""
    name = PLAIN
    print("== %s" % name, flush=True)
    tag = uuid.uuid4().hex[:8]
    before = {s["id"] for s in gw.sessions()}
    gw.tap.take()
    mock.clear()
    from google.genai import types

    client = sdk_cases.gemini_client(gw.url, "v1beta")
    config = types.GenerateContentConfig(system_instruction=sdk_cases.GEMINI_SYSTEM, temperature=0.2,
                                         max_output_tokens=256)
    prompts = ["say done (gemini sdk, json, %s)" % tag, "say done (gemini sdk, sse, %s)" % tag,
               "say done (raw, json-array stream, %s)" % tag]
    texts = []
    try:
        texts.append(_text(client.models.generate_content(
            model=sdk_cases.GEMINI_MODEL, contents=prompts[0], config=config)))
        texts.append("".join(_text(c) for c in client.models.generate_content_stream(
            model=sdk_cases.GEMINI_MODEL, contents=prompts[1], config=config)))
        body = {"contents": [{"role": "user", "parts": [{"text": prompts[2]}]}],
                "systemInstruction": {"parts": [{"text": sdk_cases.GEMINI_SYSTEM}]}}
        status, raw = _post(gw.url + "/v1beta/models/%s:streamGenerateContent" % sdk_cases.GEMINI_MODEL, body,
                            {"x-goog-api-key": sdk_cases.GEMINI_KEY})
        texts.append(_chunks_text(json.loads(raw)))
        report.add(name, "client", True, "3 calls answered: %r" % texts)
    except Exception as e:  # the client failed: record it, go on
        report.add(name, "client", False, "raised %s: %s" % (type(e).__name__, e))
    report.add(name, "final answer", texts == [FINAL] * 3, "texts %r" % texts)

    sent, got = checks.model_pairs(gw.tap.take(), mock.requests())
    ctx.upstream_log.append((name, got))
    report.add(name, "request count", *checks.same_count(sent, got, 3, 3))
    report.add(name, "gateway status", *checks.gateway_answered(sent))
    report.add(name, "refusals", *checks.no_refusals(got))
    report.add(name, "upstream bytes", *checks.upstream_bodies(sent, got, ctx.tools, ctx.evidence, name))
    report.add(name, "upstream headers", *checks.forwarded_headers(sent, got))
    report.add(name, "upstream request", *checks.gemini_request(sent, got))
    news = _new_sessions(gw, before, prompts)
    report.add(name, "store sessions", *_store_prompts(gw, news, prompts))


def _text(response):
    """A response's (or a stream chunk's) text, thoughts left out, without the SDK's warning
    about non-text parts."""
    out = []
    for cand in response.candidates or []:
        for p in (cand.content.parts if cand.content else None) or []:
            if p.text and not p.thought:
                out.append(p.text)
    return "".join(out)


def run_query_key(gw, mock, ctx, report):
    """The key in the URL: generateContent, streamGenerateContent?alt=sse, countTokens and the
    model list, each with `?key=SECRET` and no header."""
    name = QUERY_KEY
    print("== %s" % name, flush=True)
    tag = uuid.uuid4().hex[:8]
    secret = "AIzaSy-ctxd-query-key-%s" % uuid.uuid4().hex
    before = {s["id"] for s in gw.sessions()}
    gw.tap.take()
    mock.clear()
    base = gw.url + "/v1beta/models/" + sdk_cases.GEMINI_MODEL
    prompts = ["say done (key in the query, json, %s)" % tag, "say done (key in the query, sse, %s)" % tag]
    body = lambda p: {"contents": [{"role": "user", "parts": [{"text": p}]}]}  # noqa: E731
    calls = [
        ("generateContent", lambda: _post(base + ":generateContent?key=" + secret, body(prompts[0]))),
        ("streamGenerateContent?alt=sse",
         lambda: _post(base + ":streamGenerateContent?alt=sse&key=" + secret, body(prompts[1]))),
        ("countTokens", lambda: _post(base + ":countTokens?key=" + secret, body(prompts[0]))),
        ("GET models", lambda: _get(gw.url + "/v1beta/models?key=%s&pageSize=5" % secret)),
    ]
    answers = []
    for label, call in calls:
        try:
            status, raw = call()
            if label.startswith("generate"):
                answers.append((label, status, _chunks_text([json.loads(raw)])))
            elif label.startswith("stream"):
                answers.append((label, status, _chunks_text(_sse_chunks(raw))))
            elif label == "countTokens":
                answers.append((label, status, json.loads(raw).get("totalTokens")))
            else:
                answers.append((label, status, len(json.loads(raw).get("models") or [])))
        except Exception as e:
            answers.append((label, "raised %s: %s" % (type(e).__name__, e), None))
    ok = [a[1] for a in answers] == [200] * 4 and answers[0][2] == FINAL and answers[1][2] == FINAL \
        and isinstance(answers[2][2], int) and answers[3][2] > 0
    report.add(name, "client", ok, "answers (call, status, text/tokens/models): %r" % answers)

    got = [r for r in mock.requests() if not route(r["path"]).startswith("/_mock")]
    ctx.upstream_log.append((name, [r for r in got if r["method"] == "POST" and ":countTokens" not in r["path"]]))
    report.add(name, "refusals", *checks.no_refusals(got))
    problems = []
    want = [":generateContent", ":streamGenerateContent?alt=sse", ":countTokens", "/v1beta/models?pageSize=5"]
    if len(got) != len(want):
        problems.append("the mock received %d requests, expected %d: %s" % (
            len(got), len(want), [r["path"] for r in got]))
    for r, suffix in zip(got, want):
        key = (r.get("headers") or {}).get("x-goog-api-key")
        if key != secret:
            problems.append("%s %s arrived with x-goog-api-key %r" % (r["method"], r["path"], key))
        if secret in r["path"] or "key=" in r["path"]:
            problems.append("%s arrived with the key in its path: %s" % (r["method"], r["path"]))
        if not r["path"].endswith(suffix):
            problems.append("%s arrived as %s, expected ...%s" % (r["method"], r["path"], suffix))
    report.add(name, "key as header", not problems, "; ".join(problems) or
               "%d requests reached the mock with the key in x-goog-api-key, none with it in the path"
               % len(got))

    _new_sessions(gw, before, prompts)
    leaks = []
    for path in (gw.store, gw.store + "-wal", gw.store + "-shm"):
        if os.path.exists(path) and secret.encode() in open(path, "rb").read():
            leaks.append(os.path.basename(path))
    report.add(name, "key not stored", not leaks,
               "the key is in %s" % leaks if leaks else "not in the store's files (db, wal, shm)")
    log = gw.process.log_path
    gw.process._log.flush()
    in_log = secret.encode() in open(log, "rb").read()
    report.add(name, "key not logged", not in_log, "the key is in %s" % log if in_log else
               "not in ctxd's log output (%d bytes)" % os.path.getsize(log))
    news = [s for s in gw.sessions() if s["id"] not in before]
    report.add(name, "store sessions", *_store_prompts(gw, news, prompts))


def run(gw, mock, ctx, report, only=None):
    for case, fn in ((PLAIN, run_plain), (QUERY_KEY, run_query_key)):
        if only is None or case in only:
            fn(gw, mock, ctx, report)
