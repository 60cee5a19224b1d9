#!/usr/bin/env python3
"""Canned Gemini API server that records every request (stdlib only).

Answers the Gemini Developer API surface that real clients use:
  POST /{ver}/models/{model}:generateContent         -> one JSON GenerateContentResponse
  POST /{ver}/models/{model}:streamGenerateContent   -> SSE (`data: {...}\r\n\r\n`) with ?alt=sse,
                                                        else a JSON array of chunks
  POST /{ver}/models/{model}:countTokens             -> {"totalTokens": 10}
  GET  /{ver}/models[?pageSize..]                    -> a model list
  GET  /{ver}/models/{model}                         -> one model
Anything else is recorded and answered 404.

Script: when the request declares tools and the conversation does not yet contain a
functionResponse after the last user text, answer a functionCall to a read-like tool the
client declared (read_file / read / ...) for $CAPTURE_FILE (default README.md), with a
thoughtSignature "c2ln"; otherwise answer the text "done" (the first chunk "do" carrying
thoughtSignature "dHh0") with finishReason STOP. CAPTURE_THOUGHTS=1 puts a {"thought": true}
text part before either answer. A request asking
for JSON output (responseMimeType application/json with a schema) gets an object built from
its schema (first enum value; "next_speaker" -> "user").

Every request is appended to $CAPTURE_LOG (default ./gemini-captures.jsonl) as one JSON line:
{"ts","method","path","headers","body"} with credentials redacted (x-goog-api-key,
authorization, ?key=).

CAPTURE_FAIL_COUNT=N (CAPTURE_FAIL_STATUS=500) answers the first N POSTs with that status and a
Google-style {"error":{code,message,status}} body, to watch client retries.

Usage: python3 gemini_capture.py [--port 18090] [--log FILE]
       (env CAPTURE_PORT, CAPTURE_LOG, CAPTURE_FILE); prints "listening on PORT" when ready.
"""
import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qsl, urlencode

LOCK = threading.Lock()
SECRET_HEADERS = {"x-goog-api-key", "authorization", "proxy-authorization", "cookie"}
READ_TOOL_NAMES = ["read_file", "read", "Read", "readFile", "read_many_files", "view", "cat"]
PATH_ARG_NAMES = ["file_path", "absolute_path", "path", "filePath", "filename", "file"]
MODELS = ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview",
          "gemini-3-flash-preview", "gemini-embedding-001"]


def redact_path(path):
    parts = urlsplit(path)
    if not parts.query:
        return path
    q = [(k, "REDACTED" if k.lower() in ("key", "access_token") else v)
         for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return parts.path + "?" + urlencode(q)


def usage(prompt=20, out=5):
    return {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out}


def decls(body):
    out = []
    for t in body.get("tools") or []:
        for d in t.get("functionDeclarations") or t.get("function_declarations") or []:
            out.append(d)
    return out


def schema_of(decl):
    return decl.get("parametersJsonSchema") or decl.get("parameters") or \
        decl.get("parameters_json_schema") or {}


def pick_read_call(body):
    ds = decls(body)
    if not ds:
        return None
    by_name = {d.get("name"): d for d in ds}
    chosen = None
    for n in READ_TOOL_NAMES:
        if n in by_name:
            chosen = by_name[n]
            break
    if chosen is None:
        for d in ds:
            if "read" in (d.get("name") or "").lower():
                chosen = d
                break
    if chosen is None:
        chosen = ds[0]
    props = (schema_of(chosen).get("properties") or {})
    target = os.environ.get("CAPTURE_FILE", "README.md")
    args = {}
    for n in PATH_ARG_NAMES:
        if n in props:
            args[n] = target
            break
    else:
        for n in (schema_of(chosen).get("required") or []):
            args[n] = target
    return {"name": chosen.get("name"), "args": args}


def needs_tool_call(body):
    """True when tools are declared and no functionResponse follows the last user text."""
    if not decls(body):
        return False
    contents = body.get("contents") or []
    for c in reversed(contents):
        parts = c.get("parts") or []
        if any("functionResponse" in p or "function_response" in p for p in parts):
            return False
        if c.get("role", "user") == "user" and any("text" in p for p in parts):
            return True
    return True


def from_schema(s, key=None):
    if not isinstance(s, dict):
        return None
    if key == "next_speaker":
        return "user"
    if "enum" in s and s["enum"]:
        return s["enum"][0]
    t = s.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    t = (t or "").lower()
    if t == "object" or "properties" in s:
        return {k: from_schema(v, k) for k, v in (s.get("properties") or {}).items()}
    if t == "array":
        return []
    if t in ("integer", "number"):
        # Gemini CLI's router validates complexity_score >= 1; 10 reads as "trivial task".
        return max(s.get("minimum", 10), 10) if "maximum" not in s else s.get("minimum", 1)
    if t == "boolean":
        return False
    return "canned"


def json_request_schema(body):
    gc = body.get("generationConfig") or body.get("generation_config") or {}
    if gc.get("responseMimeType") == "application/json" or gc.get("response_mime_type") == "application/json":
        return gc.get("responseJsonSchema") or gc.get("responseSchema") or \
            gc.get("response_json_schema") or gc.get("response_schema") or {}
    return None


def answer_parts(body):
    """Return (list of chunks of parts, kind)."""
    schema = json_request_schema(body)
    if schema is not None:
        return [[{"text": json.dumps(from_schema(schema))}]], "json"
    thought = []
    if os.environ.get("CAPTURE_THOUGHTS") == "1":
        # a summarized thought part first, as Gemini sends with includeThoughts
        thought = [[{"text": "**Thinking** about it", "thought": True}]]
    if needs_tool_call(body):
        call = pick_read_call(body)
        return thought + [[{"functionCall": call, "thoughtSignature": "c2ln"}]], "functionCall"
    return thought + [[{"text": "do", "thoughtSignature": "dHh0"}], [{"text": "ne"}]], "text"


def response_obj(parts, model, last=True, rid="resp-1"):
    cand = {"content": {"role": "model", "parts": parts}, "index": 0}
    if last:
        cand["finishReason"] = "STOP"
    r = {"candidates": [cand], "modelVersion": model, "responseId": rid}
    r["usageMetadata"] = usage() if last else {"promptTokenCount": 20, "totalTokenCount": 20}
    return r


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gemini-capture/1"

    def log_message(self, fmt, *args):
        pass

    def record(self, body_raw):
        headers = {}
        for k, v in self.headers.items():
            headers[k] = "REDACTED" if k.lower() in SECRET_HEADERS else v
        try:
            body = json.loads(body_raw) if body_raw else None
        except ValueError:
            body = body_raw.decode("utf-8", "replace")
        rec = {"ts": time.time(), "method": self.command, "path": redact_path(self.path),
               "headers": headers, "body": body,
               "key_in": [w for w, ok in (("header:x-goog-api-key", "x-goog-api-key" in {h.lower() for h in self.headers.keys()}),
                                          ("header:authorization", "authorization" in {h.lower() for h in self.headers.keys()}),
                                          ("query:key", "key=" in urlsplit(self.path).query)) if ok]}
        with LOCK:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        return body if isinstance(body, dict) else {}

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            buf = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                buf += self.rfile.read(size)
                self.rfile.readline()
            return buf
        return b""

    def do_GET(self):
        self.record(b"")
        p = urlsplit(self.path).path
        m = re.match(r"^/(v1beta|v1|v1alpha)/models/?$", p)
        if m:
            return self.send_json(200, {"models": [model_info(x) for x in MODELS]})
        m = re.match(r"^/(v1beta|v1|v1alpha)/models/([^/:]+)$", p)
        if m:
            return self.send_json(200, model_info(m.group(2)))
        self.send_json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})

    def do_HEAD(self):
        self.record(b"")
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.record(self.read_body())
        with LOCK:
            fail = self.server.fail_left > 0
            if fail:
                self.server.fail_left -= 1
        if fail:
            st = self.server.fail_status
            names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 400: "INVALID_ARGUMENT"}
            return self.send_json(st, {"error": {"code": st, "message": "injected failure",
                                                 "status": names.get(st, "UNKNOWN")}})
        parts = urlsplit(self.path)
        m = re.match(r"^/(v1beta|v1|v1alpha)/(?:models|tunedModels)/([^/:]+):(\w+)$", parts.path)
        if not m:
            return self.send_json(404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}})
        model, method = m.group(2), m.group(3)
        if method == "countTokens":
            return self.send_json(200, {"totalTokens": 10})
        if method == "generateContent":
            chunks, _ = answer_parts(body)
            merged = [p for c in chunks for p in c]
            if all("text" in p and len(p) == 1 for p in merged):
                merged = [{"text": "".join(p["text"] for p in merged)}]
            return self.send_json(200, response_obj(merged, model))
        if method == "streamGenerateContent":
            chunks, _ = answer_parts(body)
            objs = [response_obj(c, model, last=(i == len(chunks) - 1)) for i, c in enumerate(chunks)]
            if dict(parse_qsl(parts.query)).get("alt") == "sse":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for o in objs:
                    self.wfile.write(b"data: " + json.dumps(o).encode() + b"\r\n\r\n")
                    self.wfile.flush()
                self.close_connection = True
                return
            return self.send_json(200, objs)
        if method in ("embedContent", "batchEmbedContents"):
            return self.send_json(200, {"embedding": {"values": [0.0] * 8}})
        self.send_json(404, {"error": {"code": 404, "message": "unknown method", "status": "NOT_FOUND"}})


def model_info(name):
    return {"name": "models/" + name, "baseModelId": name, "version": "001", "displayName": name,
            "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens", "streamGenerateContent"],
            "thinking": True}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=int(os.environ.get("CAPTURE_PORT", "18090")))
    ap.add_argument("--log", default=os.environ.get("CAPTURE_LOG", "gemini-captures.jsonl"))
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.log_path = a.log
    srv.fail_status = int(os.environ.get("CAPTURE_FAIL_STATUS", "500"))
    srv.fail_left = int(os.environ.get("CAPTURE_FAIL_COUNT", "0"))
    print("listening on %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
