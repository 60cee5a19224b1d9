"""The pieces every case runs against: the mock, `ctxd serve` on a temp store, the tap in front
of it, and readers for what the mock received and what the store holds (the store file itself,
read-only, and the CLI's JSON view of it); ctxd's tool registry as `ctxd mcp` serves it; the
conversation array of a request body, whatever its API.
"""

import asyncio
import base64
import gzip
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.request

import zstandard

from tap import Tap

# Routes that ask the model for a turn (count_tokens and the rest are not conversations).
MODEL_ROUTES = ("/v1/messages", "/v1/chat/completions", "/v1/responses")
# Gemini's: `/v1beta/models/MODEL:generateContent` and `:streamGenerateContent` (also under
# `/v1/`, the Python SDK's default version); `:countTokens` and the model list are not turns.
GEMINI_ROUTE = re.compile(r"^/v1(?:beta)?/models/[^/:]+:(?:generateContent|streamGenerateContent)$")


def route(path):
    return path.split("?", 1)[0]


def is_gemini(path):
    """A Gemini model request's path (whatever its version, model and query)."""
    return bool(GEMINI_ROUTE.match(route(path)))


def is_model_request(method, path):
    return method == "POST" and (route(path) in MODEL_ROUTES or is_gemini(path))


def decode_body(body, headers):
    """A body as JSON bytes: decompressed per its `content-encoding` (Codex sends zstd)."""
    encoding = (headers.get("content-encoding") or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "zstd":
        # Codex's frames may not state their size: a streaming read handles both.
        return zstandard.ZstdDecompressor().stream_reader(body).read()
    if encoding in ("gzip", "x-gzip"):
        return gzip.decompress(body)
    raise ValueError("content-encoding %r not handled" % encoding)


def conversation(path, doc):
    """The conversation array of a model request: `messages`, Gemini's `contents`, or Responses'
    `input` (a string input is one user message)."""
    if is_gemini(path):
        return list(doc.get("contents") or [])
    if route(path) == "/v1/responses":
        items = doc.get("input")
        return [{"role": "user", "content": items}] if isinstance(items, str) else list(items or [])
    return list(doc.get("messages") or [])


def exchanges(path, elements):
    """The tool calls in a conversation and their results, in the order of the calls: dicts of
    call_id, name, args, at (the call's element index), result (text, None when unanswered)
    and result_at."""
    if is_gemini(path):
        return _gemini_exchanges(elements)
    calls, results = [], {}
    responses = route(path) == "/v1/responses"
    for i, el in enumerate(elements):
        if not isinstance(el, dict):
            continue
        if responses:
            kind = el.get("type")
            if kind in ("function_call", "custom_tool_call", "local_shell_call"):
                calls.append((i, el.get("call_id"), el.get("name") or kind,
                              el.get("arguments", el.get("input", el.get("action")))))
            elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                results[el.get("call_id")] = (i, text_of(el.get("output")))
            continue
        content = el.get("content")
        for c in el.get("tool_calls") or []:  # Chat
            f = c.get("function") or {}
            calls.append((i, c.get("id"), f.get("name"), f.get("arguments")))
        if el.get("role") == "tool":
            results[el.get("tool_call_id")] = (i, text_of(content))
        for b in content if isinstance(content, list) else []:  # Anthropic blocks
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_use":
                calls.append((i, b.get("id"), b.get("name"), b.get("input")))
            elif b.get("type") == "tool_result":
                results[b.get("tool_use_id")] = (i, text_of(b.get("content")))
    out = []
    for at, call_id, name, args in calls:
        result_at, result = results.get(call_id, (None, None))
        out.append(dict(call_id=call_id, name=name, args=args, at=at, result=result, result_at=result_at))
    return out


def _gemini_exchanges(contents):
    """Gemini's calls (`functionCall` parts of `model` contents) and their answers
    (`functionResponse` parts of the next `user` content): paired by `id` when both carry one
    (Gemini CLI adds its own), else by name, in order (the SDKs and Pi send no ids)."""
    out, previous = [], []  # previous: the calls of the content before
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            previous = []
            continue
        pending, current = list(previous), []
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            call = part.get("functionCall")
            if isinstance(call, dict):
                e = dict(call_id=call.get("id"), name=call.get("name"), args=call.get("args"), at=i,
                         result=None, result_at=None)
                out.append(e)
                current.append(e)
            answer = part.get("functionResponse")
            if isinstance(answer, dict):
                rid, name = answer.get("id"), answer.get("name")
                match = [e for e in pending if rid and e["call_id"] == rid] or \
                    [e for e in pending if e["name"] == name]
                if match:
                    e = match[0]
                    pending.remove(e)
                    e["result"], e["result_at"] = _gemini_result(answer.get("response")), i
        previous = current
    return out


def _gemini_result(response):
    """A functionResponse's text: its `output` (the clients' convention), else its JSON."""
    for key in ("output", "content"):  # as ctxd reads it (ctxd-formats' wire/gemini.rs)
        if isinstance(response, dict) and isinstance(response.get(key), str):
            return response[key]
    return json.dumps(response, ensure_ascii=False)


def tool_defs(tools):
    """The tool definitions of a `tools` array, Gemini's `functionDeclarations` groups
    flattened into their declarations."""
    out = []
    for t in tools or []:
        if isinstance(t, dict) and isinstance(t.get("functionDeclarations"), list):
            out.extend(t["functionDeclarations"])
        else:
            out.append(t)
    return out


def is_system(element):
    """A system or developer message inside the conversation array (Chat's and Responses'
    instructions, Claude Code's mid-conversation system entries): the system prompt ctxd keeps
    in every window."""
    return isinstance(element, dict) and element.get("role") in ("system", "developer")


def tool_name(tool):
    """A tool definition's name in any of the four APIs' shapes (a Gemini declaration, not its
    group: see tool_defs)."""
    return tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type")


class Process:
    """A child process whose first matching output line announces its address."""

    def __init__(self, name, argv, log_path, announce, stream="stdout", env=None):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        pipe = {"stdout": subprocess.PIPE, "stderr": self._log}
        if stream == "stderr":
            pipe = {"stdout": self._log, "stderr": subprocess.PIPE}
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, **pipe)
        self._pipe = self.proc.stdout if stream == "stdout" else self.proc.stderr
        self.address = self._wait_for(re.compile(announce), timeout=30)
        # Keep draining the pipe into the log so the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for(self, pattern, timeout):
        found = {}

        def read():
            for line in self._pipe:
                self._log.write(line)
                self._log.flush()
                m = pattern.search(line.decode("utf-8", "replace"))
                if m:
                    found["addr"] = m.group(1)
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if "addr" not in found:
            self.stop()
            raise RuntimeError("%s did not start (see %s)" % (self.name, self.log_path))
        return found["addr"]

    def _drain(self):
        for line in self._pipe:
            self._log.write(line)
        self._log.flush()

    def port(self):
        return int(self.address.rsplit(":", 1)[1])

    def stop(self):
        """SIGTERM (the gateway then finishes in-flight requests and closes the store)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.flush()
        return self.proc.returncode


class Mock:
    """The project's mock upstream (`ctxd-mock`) and its record of requests."""

    def __init__(self, binary, workdir):
        self.process = Process(
            "ctxd-mock",
            [binary, "--port", "0"],
            os.path.join(workdir, "mock.log"),
            r"listening on (http://\S+)",
            stream="stderr",
        )
        self.url = self.process.address

    def requests(self):
        with urllib.request.urlopen(self.url + "/_mock/requests", timeout=10) as r:
            recs = json.load(r)
        for rec in recs:
            raw = rec.get("body") or ""
            if rec.get("body_encoding") == "base64":
                rec["body_bytes"] = base64.b64decode(raw)
            else:
                rec["body_bytes"] = raw.encode("utf-8")
            try:
                rec["decoded"] = decode_body(rec["body_bytes"], rec.get("headers") or {})
            except Exception:  # an undecodable body is reported by the checks that read it
                rec["decoded"] = None
        return recs

    def clear(self):
        """Forgets the requests recorded and the replies still queued."""
        for route_ in ("/_mock/requests", "/_mock/script"):
            req = urllib.request.Request(self.url + route_, method="DELETE")
            urllib.request.urlopen(req, timeout=10).close()

    def queue(self, specs):
        """Queues replies (`--reply` specs) after those queued: `POST /_mock/script`."""
        req = urllib.request.Request(self.url + "/_mock/script", data=json.dumps(specs).encode(),
                                     method="POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)["queued"]

    def answer_when(self, find, specs_for, timeout):
        """In the background: polls the record until `find(requests)` returns something, then
        queues `specs_for(found)` (for a request a `wait` reply holds). `.join()` returns the
        found value, or raises what went wrong (nothing found in time included)."""
        return _Answerer(self, find, specs_for, timeout)

    def stop(self):
        self.process.stop()


class _Answerer:
    def __init__(self, mock, find, specs_for, timeout):
        self.found = self.error = None
        self._stop = threading.Event()

        def run():
            deadline = time.monotonic() + timeout
            try:
                while not self._stop.is_set():
                    found = find(mock.requests())
                    if found is not None:
                        mock.queue(specs_for(found))
                        self.found = found
                        return
                    if time.monotonic() > deadline:
                        raise TimeoutError("no request matched within %d s" % timeout)
                    time.sleep(0.05)
            except Exception as e:  # reported by join()
                self.error = e

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def join(self):
        """Stops looking (the client is done) and returns what was found."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self.error is not None:
            raise self.error
        return self.found


class Gateway:
    """`ctxd serve` on a fresh store with the mock as both upstreams, behind the tap."""

    def __init__(self, ctxd, mock_url, workdir):
        self.ctxd = ctxd
        self.store = os.path.join(workdir, "ctxd.db")
        env = dict(os.environ, CTXD_LOG=os.environ.get("CTXD_LOG", "info"))
        self.process = Process(
            "ctxd serve",
            [
                ctxd,
                "--store",
                self.store,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--upstream-anthropic",
                mock_url,
                "--upstream-openai",
                mock_url,
                "--upstream-gemini",
                mock_url,
            ],
            os.path.join(workdir, "gateway.log"),
            r"ctxd serve: listening on http://(\S+)",
            env=env,
        )
        self.tap = Tap(self.process.port()).start()
        self.url = "http://127.0.0.1:%d" % self.tap.port

    def cli(self, *args):
        """A CLI command on the gateway's store, its stdout parsed as JSON lines."""
        argv = [self.ctxd, "--store", self.store] + list(args)
        out = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            raise RuntimeError(
                "%s exited %d: %s" % (" ".join(args), out.returncode, out.stderr.decode().strip()[-500:])
            )
        return [json.loads(l) for l in out.stdout.decode().splitlines() if l.strip()]

    def cli_sessions(self):
        """`ctxd sessions --store DB --json`: what the CLI shows of the store."""
        return self.cli("sessions", "--json", "--limit", "10000")

    def cli_items(self, session):
        """`ctxd history items SESSION --json`: the active branch's items, oldest first."""
        pages = self.cli("history", "items", str(session), "--json", "--max-chars", "2000",
                         "--limit", "500")
        return pages[0]["items"] if pages else []

    def cli_recall(self, session, entry_id):
        """`ctxd recall SESSION ENTRY_ID --json`: the text the `recall` tool returns."""
        docs = self.cli("recall", str(session), entry_id, "--json")
        return docs[0]["text"] if docs else None

    def cli_report(self, session):
        """`ctxd report SESSION --json` on a stored session (by id)."""
        docs = self.cli("report", str(session), "--json")
        return docs[0] if docs else {}

    def _db(self):
        # Read-only, beside the running gateway (WAL): the store file as any reader sees it.
        return sqlite3.connect("file:%s?mode=ro" % self.store, uri=True, timeout=10)

    def sessions(self):
        """Every session in the store, all tenants, read from the file itself."""
        with self._db() as db:
            rows = db.execute(
                "SELECT s.id, s.tenant, s.key, s.agent, COUNT(e.seq) FROM sessions s"
                " LEFT JOIN entries e ON e.session_id = s.id GROUP BY s.id ORDER BY s.id"
            ).fetchall()
        return [dict(id=r[0], tenant=r[1], key=r[2], agent=r[3], entries=r[4]) for r in rows]

    def items(self, session_id):
        """The active branch's messages (leaf back to the root through `parent`), oldest first,
        in the shape of `ctxd history items`: role, text, tools, plus the content block types."""
        with self._db() as db:
            (leaf,) = db.execute("SELECT leaf FROM sessions WHERE id = ?", (session_id,)).fetchone()
            rows = db.execute(
                "SELECT id, parent, kind, body FROM entries WHERE session_id = ?", (session_id,)
            ).fetchall()
        by_id = {r[0]: r for r in rows}
        chain, at = [], leaf
        while at in by_id and len(chain) <= len(rows):
            chain.append(by_id[at])
            at = by_id[at][1]
        names = {}
        items = []
        for _, _, kind, body in reversed(chain):
            if kind not in ("message", "window_boot"):
                continue
            m = json.loads(body)
            if kind == "window_boot":  # a new window's first message, as the history lists it
                m = m.get("message") or {}
            blocks = m.get("content") or []
            tools, results = [], []
            for b in blocks:
                if b.get("type") == "tool_call":
                    names[b.get("id")] = b.get("name")
                    tools.append(b.get("name"))
                elif b.get("type") == "tool_result":
                    tools.append(b.get("tool_name") or names.get(b.get("call_id")) or "?")
                    results.append(text_of(b.get("content")))
            text = "\n".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            items.append(dict(role=m.get("role"), text=text, tools=tools, results="\n".join(results),
                              blocks=[b.get("type") for b in blocks]))
        return items

    def stop(self):
        self.tap.stop()
        return self.process.stop()


def registry(ctxd, workdir):
    """ctxd's tool registry as `ctxd mcp` lists it (the official MCP client over stdio, on a
    store of its own): name -> (description, input schema). `ctxd mcp` leaves out the reset
    tools (a reset needs the gateway to see the call), which the gateway offers beside these."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=ctxd, args=["--store", os.path.join(workdir, "mcp.db"), "mcp"],
                                   env=dict(os.environ))

    async def list_tools():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return (await session.list_tools()).tools

    return {t.name: (t.description, t.input_schema) for t in asyncio.run(list_tools())}


def text_of(content):
    """A tool result's text: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(b.get("text", b.get("content"))) for b in content if isinstance(b, dict))
    return ""



def wait_until(pred, timeout=10.0, step=0.05):
    """Poll `pred` until it returns a truthy value (the store writer is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)
