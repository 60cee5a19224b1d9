#!/usr/bin/env python3
"""`ctxd mcp` through the official MCP Python client (the `mcp` package), over stdio, and `/mcp`
on `ctxd serve` over streamable HTTP.

A real Pi session is imported into a fresh store; `ctxd mcp --session KEY` serves ctxd's tools
for it. Checked: every registry tool is listed with its schema; notes are written and read back
(and are in the store for the CLI); the history tools list the session's windows and find its
items; `recall` returns an item's raw content by the id the history tools give; a tool's own
failure comes back as a result with isError; an unknown tool is a protocol error.

On `/mcp`, a call naming no session is bound to the session in which the gateway last saw the
tenant's model call one of ctxd's tools under the MCP client's name (`mcp__ctxd__...`): checked
with `ctxd-mock` as the upstream, scripted to make that call (`--mock`).

Usage: python3 tests/mcp/run.py --ctxd target/release/ctxd --mock target/release/ctxd-mock
Prints 'mcp: N passed, M failed' and exits non-zero on any failure.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("CTXD_SHARED") or os.path.join(HERE, "..", "..", "..", "shared")
SESSION_FILE = os.path.join(SHARED, "sessions", "pi", "large-session.jsonl")

EXPECTED_TOOLS = {
    "get_context_remaining", "notes_write", "notes_append",
    "notes_read", "notes_list", "notes_search", "history_list_windows", "history_list_items",
    "history_read_item", "history_search_contents", "recall",
}

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))


def flat(e):
    """An exception's message, with those of an exception group's members."""
    subs = getattr(e, "exceptions", None)
    return " | ".join(flat(x) for x in subs) if subs else str(e)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def session_checks(ctxd, store, key, env):
    params = StdioServerParameters(
        command=ctxd,
        args=["--store", store, "mcp", "--session", key, "--agent", "pi"],
        env=env,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check("server names itself ctxd", init.server_info.name == "ctxd", init.server_info)

            tools = (await session.list_tools()).tools
            names = {t.name for t in tools}
            check("every registry tool is listed", EXPECTED_TOOLS <= names, sorted(names))
            check("no reset tool (a reset needs the gateway to see the call)",
                  not names & {"new_context", "wipe_memory"}, sorted(names))
            write_tool = next(t for t in tools if t.name == "notes_write")
            check("tools carry their JSON schema", write_tool.input_schema.get("type") == "object",
                  write_tool.input_schema)

            r = await session.call_tool("notes_write", {"path": "checkpoint.md",
                                                         "text": "goal: ship mcp\nnext: tests"})
            check("notes_write succeeds", not r.is_error, text_of(r))
            r = await session.call_tool("notes_read", {"path": "checkpoint.md"})
            check("notes_read returns what was written",
                  not r.is_error and "goal: ship mcp" in text_of(r), text_of(r))

            r = await session.call_tool("history_list_windows", {})
            windows = text_of(r)
            check("history_list_windows answers", not r.is_error and "w_" in windows, windows[:300])

            r = await session.call_tool("history_search_contents", {"query": "README"})
            hits = text_of(r)
            check("history_search_contents finds the session's items",
                  not r.is_error and "i_" in hits, hits[:300])

            items = await session.call_tool("history_list_items", {"limit": 5})
            listing = json.loads(text_of(items)) if not items.is_error else {}
            first = (listing.get("items") or [{}])[0]
            item_id = first.get("item_id")
            check("history_list_items gives item ids", bool(item_id), text_of(items)[:300])
            if item_id:
                r = await session.call_tool("recall", {"entryId": item_id})
                check("recall takes the history's item id", not r.is_error and text_of(r).strip(),
                      text_of(r)[:300])

            r = await session.call_tool("notes_read", {"path": "no-such-note.md"})
            check("a tool's own failure is a result with isError", r.is_error, text_of(r))
            r = await session.call_tool("get_context_remaining", {})
            check("get_context_remaining answers", not r.is_error, text_of(r))

            try:
                r = await session.call_tool("no_such_tool", {})
                check("an unknown tool is a protocol error", False, text_of(r))
            except Exception as e:  # the client raises on a JSON-RPC error
                check("an unknown tool is a protocol error", "no_such_tool" in str(e), e)


async def http_checks(base):
    """`/mcp` on the gateway: tenants from the credential, as for the model APIs."""
    async def call(key, name, args, session=None):
        headers = {"x-api-key": key}
        if session:
            headers["x-ctxd-session"] = session
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(base + "/mcp", http_client=http) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    if name is None:
                        return (await s.list_tools()).tools
                    return await s.call_tool(name, args)

    tools = await call("sk-a", None, None)
    check("/mcp lists the tools", EXPECTED_TOOLS <= {t.name for t in tools})
    r = await call("sk-a", "notes_write", {"path": "@human/prefs.md", "text": "short answers"})
    check("/mcp notes_write for tenant A", not r.is_error, text_of(r))
    r = await call("sk-a", "notes_read", {"path": "@human/prefs.md"})
    check("/mcp tenant A reads its note", "short answers" in text_of(r), text_of(r))
    r = await call("sk-b", "notes_read", {"path": "@human/prefs.md"})
    check("/mcp tenant B does not see tenant A's note",
          r.is_error and "short answers" not in text_of(r), text_of(r))
    try:
        r = await call("sk-a", "history_list_windows", {}, session="not-a-session")
        check("/mcp refuses a session the credential does not own", False, text_of(r))
    except Exception as e:
        check("/mcp refuses a session the credential does not own", "not-a-session" in flat(e),
              flat(e))


async def bound_by_the_call(base, mock_url):
    """The model (through the gateway) calls `mcp__ctxd__notes_write`, a tool its client has from
    ctxd's MCP server; the client then makes that call on `/mcp` without naming the session:
    the note lands in the session the gateway saw the call in."""
    body = json.dumps({
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "metadata": {"user_id": "mcp-binding-test"},
        "tools": [{"name": "mcp__ctxd__notes_write", "description": "ctxd notes over MCP",
                   "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "write the checkpoint"}],
    }).encode()
    req = urllib.request.Request(base + "/v1/messages", data=body, method="POST", headers={
        "content-type": "application/json", "x-api-key": "sk-bind",
        "x-ctxd-session": "bound-session", "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=30) as r:
        answer = json.load(r)
    called = [b.get("name") for b in answer.get("content", []) if b.get("type") == "tool_use"]
    check("the model called ctxd's tool under its MCP name", called == ["mcp__ctxd__notes_write"],
          answer)
    headers = {"x-api-key": "sk-bind"}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(base + "/mcp", http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                await s.initialize()
                r = await s.call_tool("notes_write", {"path": "bound.md", "text": "bound note"})
                check("/mcp without x-ctxd-session: bound to the session of the call",
                      not r.is_error, text_of(r))
    return mock_url


def serve(ctxd, store, env, upstream=None):
    """`ctxd serve` on a free port, tenants by credential as on a shared gateway (on loopback
    they would all be the local user); returns (process, base URL)."""
    extra = {"CTXD_UPSTREAM_ANTHROPIC": upstream} if upstream else {}
    extra["CTXD_TENANCY"] = "credential"
    proc = subprocess.Popen([ctxd, "--store", store, "serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={**env, "CTXD_LISTEN": "127.0.0.1:0", **extra})
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        raise RuntimeError(f"ctxd serve did not start: {line!r}")
    return proc, line.split("listening on ", 1)[1].strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxd", required=True)
    ap.add_argument("--mock", help="the ctxd-mock binary (for the binding check)")
    args = ap.parse_args()
    ctxd = os.path.abspath(args.ctxd)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "ctxd.db")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp}
        out = subprocess.run([ctxd, "--store", store, "import", "--json", SESSION_FILE],
                             capture_output=True, text=True, env=env, check=True)
        key = json.loads(out.stdout)["key"]
        asyncio.run(session_checks(ctxd, store, key, env))
        # The note is in the store, where the CLI reads it.
        out = subprocess.run([ctxd, "--store", store, "notes", "read", "--session", key,
                              "checkpoint.md"], capture_output=True, text=True, env=env)
        check("the CLI reads the note the MCP client wrote", "goal: ship mcp" in out.stdout,
              out.stdout + out.stderr)
        mock = None
        upstream = None
        if args.mock:
            mock = subprocess.Popen(
                [os.path.abspath(args.mock), "--port", "0", "--reply",
                 'tool:mcp__ctxd__notes_write:{"path":"bound.md","text":"bound note"}'],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            line = mock.stderr.readline()
            upstream = line.split("listening on ", 1)[1].strip()
        proc, base = serve(ctxd, store, env, upstream)
        try:
            asyncio.run(http_checks(base))
            if mock:
                asyncio.run(bound_by_the_call(base, upstream))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            if mock:
                mock.terminate()
                mock.wait(timeout=10)
        if mock:
            out = subprocess.run([ctxd, "--store", store, "notes", "read", "bound.md",
                                  "--session", "bound-session", "--key-env", "BIND_KEY"],
                                 capture_output=True, text=True,
                                 env={**env, "BIND_KEY": "sk-bind"})
            check("the note is in the session the gateway saw the call in",
                  "bound note" in out.stdout, out.stdout + out.stderr)
    passed = sum(ok for _, ok in results)
    failed = len(results) - passed
    print(f"mcp: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
