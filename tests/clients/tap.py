"""A recording pass-through in front of the gateway: the exact bytes each client sent.

Clients talk to the tap, the tap forwards every request unchanged (method, path, headers but
the hop-by-hop ones, body bytes as received, still compressed if they were) to `ctxd serve`,
and relays the response as it arrives (SSE chunk by chunk, never buffered whole). What the tap
recorded is what the client sent, so it can be compared byte for byte with what reached the
mock behind the gateway.
"""

import http.client
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Headers that describe one hop, not the request: not forwarded either way.
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
}


@dataclass
class Tapped:
    """One request as the client sent it."""

    method: str
    path: str
    headers: dict  # lower-case names; repeated headers joined by ", "
    body: bytes
    status: int = 0  # the gateway's answer (0: it never answered)


@dataclass
class Tap:
    """The server and what it recorded, in arrival order."""

    upstream_port: int
    port: int = 0
    requests: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer = None

    def start(self):
        tap = self

        class Handler(_Forward):
            pass

        Handler.tap = tap
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="tap", daemon=True).start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def record(self, req):
        with self._lock:
            self.requests.append(req)

    def take(self):
        """What was recorded since the last call, and forget it."""
        with self._lock:
            out, self.requests = self.requests, []
        return out


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    tap: Tap = None

    def log_message(self, fmt, *args):  # the runner reports; stderr stays quiet
        pass

    def _body(self):
        n = self.headers.get("Content-Length")
        if n is not None:
            return self.rfile.read(int(n))
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _handle(self):
        body = self._body()
        headers = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = headers[name] + ", " + value if name in headers else value
        rec = Tapped(self.command, self.path, headers, body)
        self.tap.record(rec)
        forward = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
        if body or self.command in ("POST", "PUT", "PATCH"):
            forward["content-length"] = str(len(body))
        conn = http.client.HTTPConnection("127.0.0.1", self.tap.upstream_port, timeout=300)
        try:
            conn.request(self.command, self.path, body=body or None, headers=forward)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            msg = ("tap: gateway unreachable: %s" % e).encode()
            self.send_response(502)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        rec.status = resp.status
        try:
            self._relay(resp)
        finally:
            conn.close()

    def _relay(self, resp):
        self.send_response_only(resp.status, resp.reason)
        length = resp.getheader("Content-Length")
        for name, value in resp.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        chunked = length is None and self.command != "HEAD" and resp.status not in (204, 304)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if self.command == "HEAD":
            return
        while True:
            data = resp.read1(65536) if chunked else resp.read(65536)
            if not data:
                break
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            else:
                self.wfile.write(data)
            self.wfile.flush()
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = _handle
