#!/usr/bin/env python3
"""Several `ctxd serve` on one PostgreSQL database (issue 17), with real SDK clients.

1. **Same bytes as one gateway.** The anthropic and openai SDK conversations (three APIs, JSON
   and streaming, two tool loops each) run once through one gateway on a SQLite store, then
   through two gateways on one PostgreSQL database with a proxy that alternates between them on
   every request. Each run has a fresh mock, so its ids repeat: every request body that reached
   the mock must be the same bytes in both runs, and the PostgreSQL store must hold each
   conversation's turns once (the same history items as the SQLite store: nothing lost,
   nothing twice).
   An agent too: Pi (from ../shared/clients) runs a seven-request tool loop the same two ways,
   its requests alternating between the two gateways; the same checks, and its own answer.
   Distillation too: a run's end served by one gateway, whose pass distils a grep's output;
   the session's next request, served by the other, carries the distilled text.
2. **A gateway killed mid-stream.** A streamed answer is cut by SIGKILL of the gateway serving
   it; the client retries against the other gateway. Every answer the client received in full
   before is in the store; the retry is answered and stored.
3. **One budget, two gateways.** Sixteen clients at once through both gateways against one hard
   budget: what was billed passes the limit by less than one request, the shared counter holds
   exactly what was billed, and every refusal is the API's own 400.
4. **PostgreSQL restarted under load** (when `CTXD_TEST_POSTGRES_DATA` names the server's data
   directory and `pg_ctl` is on PATH): while requests flow through both gateways the server
   restarts; requests during the outage get the API's own error (HTTP 503), none hangs; after
   it, both gateways serve again without being restarted, and every acknowledged answer is in
   the store.

    python tests/multi/run.py --ctxd target/release/ctxd --mock target/release/ctxd-mock \\
        [--postgres postgres://USER@127.0.0.1:PORT/postgres]

`--postgres` (default: `CTXD_TEST_POSTGRES`) is an admin URL: the runner creates a database of
its own there and drops it at the end. The last line is "multi: N passed, N failed".
"""

import argparse
import itertools
import re
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients"))

import agent_cases  # noqa: E402
import sdk_cases  # noqa: E402
from harness import Mock, Process, decode_body, is_model_request  # noqa: E402
from tap import Tap  # noqa: E402


class Alternating(Tap):
    """The tap, forwarding each request to the next gateway in turn (a load balancer with no
    stickiness). `pin(i)` sends everything to gateway `i` instead."""

    def __init__(self, ports):
        super().__init__(upstream_port=0)
        self._turn = threading.Lock()
        self.route_to(ports)

    def route_to(self, ports):
        """From now on, alternate between these gateways (and forget where requests went)."""
        with self._turn:
            self._ports = list(ports)
            self._next = itertools.cycle(range(len(self._ports)))
            self._pinned = None
            self.routed = []

    @property
    def upstream_port(self):
        with self._turn:
            i = self._pinned if self._pinned is not None else next(self._next)
            self.routed.append(self._ports[i])
            return self._ports[i]

    @upstream_port.setter
    def upstream_port(self, _value):
        pass

    def pin(self, i):
        with self._turn:
            self._pinned = i


class SlowMock(Mock):
    """The mock with a pause between SSE events, so a streamed answer can be cut mid-way."""

    def __init__(self, binary, workdir, event_delay_ms):
        self.process = Process(
            "ctxd-mock (slow)",
            [binary, "--port", "0", "--event-delay-ms", str(event_delay_ms)],
            os.path.join(workdir, "mock-slow.log"),
            r"listening on (http://\S+)",
            stream="stderr",
        )
        self.url = self.process.address


def serve(ctxd, store, mock_url, workdir, name, *flags):
    env = dict(os.environ, CTXD_LOG=os.environ.get("CTXD_LOG", "info"))
    return Process(
        name,
        [ctxd, "--store", store, "serve", "--listen", "127.0.0.1:0",
         "--upstream-anthropic", mock_url, "--upstream-openai", mock_url, "--upstream-gemini", mock_url] + list(flags),
        os.path.join(workdir, name + ".log"),
        r"ctxd serve: listening on http://(\S+)",
        env=env,
    )


def stop_all(balancer, gateways, mock):
    """Stop a phase's balancer, gateways and mock (in that order)."""
    balancer.stop()
    for g in gateways:
        g.stop()
    mock.stop()


def metric_lines(gateway, prefix):
    """The gateway's /metrics lines starting with `prefix`."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % gateway.port(), timeout=10) as r:
        return [l for l in r.read().decode().splitlines() if l.startswith(prefix)]


def landed_at_pass_end(gateway):
    """How many distillation passes of this gateway committed their edits at their end."""
    return sum(float(l.rsplit(" ", 1)[1]) for l in metric_lines(gateway, "ctxd_distill_landed_total")
               if 'at="pass_end"' in l)


def cli(ctxd, store, *args):
    out = subprocess.run([ctxd, "--store", store] + list(args), capture_output=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError("ctxd %s: %s" % (" ".join(args), out.stderr.decode().strip()[-800:]))
    return [json.loads(l) for l in out.stdout.decode().splitlines() if l.strip()]


def psql(admin_url, sql):
    subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], check=True,
                   capture_output=True, timeout=60)


def with_database(url, name):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


# The conversations: (name, run(base_url, repo)).
CONVERSATIONS = [
    ("anthropic-json", lambda url, repo: sdk_cases.anthropic_messages(url, repo, False)),
    ("anthropic-stream", lambda url, repo: sdk_cases.anthropic_messages(url, repo, True)),
    ("chat-json", lambda url, repo: sdk_cases.openai_chat(url, repo, False)),
    ("chat-stream", lambda url, repo: sdk_cases.openai_chat(url, repo, True)),
    ("responses-json", lambda url, repo: sdk_cases.openai_responses(url, repo, False)),
    ("responses-stream", lambda url, repo: sdk_cases.openai_responses(url, repo, True)),
]


# The agent's tool loop: the mock has Pi run these, one per request, then answers "done".
AGENT_COMMANDS = ["ls", "cat README.md", "cat main.py", "wc -l notes.txt", "ls -la", "echo multi-$((6*7))"]

# Each mock process names its ids with a nonce of its own (`toolu_mock5c1419b2000000000001`):
# the two runs' ids differ only there.
BASH_TOOL = {"name": "bash", "description": "Run a shell command",
             "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                              "required": ["command"]}}
MOCK_NONCE = re.compile(rb"mock[0-9a-f]{8}")


def model_bodies(mock):
    """The decoded body of every model request the mock received, in order, with the mock's
    nonce taken out of its ids."""
    return [MOCK_NONCE.sub(b"mock-nonce", r["decoded"]) for r in mock.requests()
            if is_model_request(r["method"], r["path"])]


def stored_items(ctxd, store):
    """Per session key: the history items (entry id, role, text) of its active branch (the
    mock's nonce taken out of the text)."""
    out = {}
    for s in cli(ctxd, store, "sessions", "--json", "--limit", "10000"):
        pages = cli(ctxd, store, "history", "items", str(s["id"]), "--json", "--limit", "500",
                    "--max-chars", "4000")
        items = pages[0]["items"] if pages else []
        out[s["key"]] = [(i["entry_id"], i["role"],
                          MOCK_NONCE.sub(b"mock-nonce", (i.get("text") or "").encode()).decode())
                         for i in items]
    return out


class Run:
    def __init__(self, args):
        self.args = args
        self.results = []
        self.work = tempfile.mkdtemp(prefix="ctxd-multi-")
        self.repo = os.path.join(self.work, "repo")
        os.makedirs(self.repo)
        for name in ("README.md", "main.py", "notes.txt"):
            with open(os.path.join(self.repo, name), "w") as f:
                f.write(name + "\n")
        self.db_name = "ctxd_multi_%d" % os.getpid()
        self.pg = with_database(args.postgres, self.db_name)

    def check(self, name, ok, detail=""):
        self.results.append((name, bool(ok), detail))
        print("%s %s%s" % ("ok  " if ok else "FAIL", name, (": " + detail) if detail and not ok else ""),
              flush=True)

    def same_bodies(self, name, one, two):
        """Check that the upstream bodies of two runs are the same bytes, pair by pair (the
        first difference shown)."""
        differing = [i for i, (a, b) in enumerate(zip(one, two)) if a != b]
        self.check(name, not differing, "requests %s differ; first:\n  one: %s\n  two: %s" % (
            differing, one[differing[0]][:600] if differing else "",
            two[differing[0]][:600] if differing else ""))

    # ------------------------------------------------------------------ 1. same bytes
    def same_bytes(self):
        mock = Mock(self.args.mock, self.work)
        one = serve(self.args.ctxd, os.path.join(self.work, "one.db"), mock.url, self.work, "one")
        tap = Tap(one.port()).start()
        try:
            for _, run in CONVERSATIONS:
                run("http://127.0.0.1:%d" % tap.port, self.repo)
            single = model_bodies(mock)
        finally:
            tap.stop()
            one.stop()
            mock.stop()
        single_items = stored_items(self.args.ctxd, os.path.join(self.work, "one.db"))

        mock = Mock(self.args.mock, self.work)
        gateways = [serve(self.args.ctxd, self.pg, mock.url, self.work, "pg-%d" % i) for i in (0, 1)]
        lb = Alternating([g.port() for g in gateways]).start()
        try:
            for _, run in CONVERSATIONS:
                run("http://127.0.0.1:%d" % lb.port, self.repo)
            shared = model_bodies(mock)
            statuses = [r.status for r in lb.take()]
        finally:
            stop_all(lb, gateways, mock)
        self.check("every request through the alternating gateways answered",
                   statuses and all(s == 200 for s in statuses), "statuses %s" % statuses)
        self.check("as many upstream requests as one gateway sends", len(shared) == len(single),
                   "%d vs %d" % (len(shared), len(single)))
        self.same_bodies("every upstream body the same bytes as one gateway's", single, shared)
        shared_items = stored_items(self.args.ctxd, self.pg)
        self.check("the shared store holds the same sessions", sorted(shared_items) == sorted(single_items),
                   "%s vs %s" % (sorted(shared_items), sorted(single_items)))
        for key in sorted(single_items):
            # Entry ids hash their content, which holds the mock's ids: compare the rest.
            a = [(role, text) for _, role, text in single_items[key]]
            b = [(role, text) for _, role, text in shared_items.get(key, [])]
            ids = [i for i, _, _ in shared_items.get(key, [])]
            self.check("session %s: the same turns, none lost or twice" % key,
                       a == b and len(set(ids)) == len(ids),
                       "%d items vs %d: %s" % (len(a), len(b), [x for x in zip(a, b) if x[0] != x[1]][:2]))

    # ------------------------------------------------------------------ 1b. an agent
    def agent_alternating(self):
        """Pi (Anthropic Messages, streaming) in a seven-request tool loop, through one SQLite
        gateway and then through two PostgreSQL gateways taking its requests in turn: the same
        upstream bytes, every turn stored once, the agent's own answer."""
        pi = os.path.join(self.args.clients_dir, "node_modules", ".bin", "pi")
        if not os.access(pi, os.X_OK):
            self.check("agent: Pi installed (../shared/clients/setup.sh)", not os.environ.get("CI"),
                       "%s missing" % pi)
            return
        lb = Alternating([]).start()
        # The clients' configs name the provider's port: the balancer's, for both runs.
        setup_clients(self.args.clients_dir, lb.port)
        scripted = ["tool:bash:" + json.dumps({"command": c}) for c in AGENT_COMMANDS]
        logdir = os.path.join(self.work, "agent-logs")
        os.makedirs(logdir, exist_ok=True)
        runs = {}
        try:
            for label, store, count in (("one", os.path.join(self.work, "agent-one.db"), 1),
                                        ("two", self.pg, 2)):
                mock = Mock(self.args.mock, self.work)
                gateways = [serve(self.args.ctxd, store, mock.url, self.work, "agent-%s-%d" % (label, i))
                            for i in range(count)]
                lb.route_to([g.port() for g in gateways])
                try:
                    mock.queue(scripted)
                    run = agent_cases.pi("mock-anthropic", "claude-sonnet-4-5", None,
                                         self.args.clients_dir, logdir)
                    runs[label] = (run, model_bodies(mock), [r.status for r in lb.take()],
                                   list(lb.routed), [g.port() for g in gateways])
                finally:
                    for g in gateways:
                        g.stop()
                    mock.stop()
        finally:
            lb.stop()
        (one, one_bodies, _, _, _), (two, two_bodies, statuses, routed, ports) = runs["one"], runs["two"]
        want = len(AGENT_COMMANDS) + 1
        self.check("agent: Pi finished its task through the alternating gateways",
                   two.rc == 0 and two.final == "done", "rc %s, final %r; stderr: %s" % (
                       two.rc, two.final, two.stderr[-400:]))
        self.check("agent: every request answered, both gateways served it",
                   statuses and all(s == 200 for s in statuses) and set(routed) == set(ports),
                   "statuses %s, routed %s" % (statuses, routed))
        self.check("agent: %d upstream requests, as through one gateway" % want,
                   len(two_bodies) == len(one_bodies) == want,
                   "%d vs %d" % (len(two_bodies), len(one_bodies)))
        self.same_bodies("agent: every upstream body the same bytes as one gateway's",
                         one_bodies, two_bodies)
        single = stored_items(self.args.ctxd, os.path.join(self.work, "agent-one.db"))
        shared = {k: v for k, v in stored_items(self.args.ctxd, self.pg).items()
                  if any("multi-" in text for _, _, text in v)}
        a = [(role, text) for items in single.values() for _, role, text in items]
        b = [(role, text) for items in shared.values() for _, role, text in items]
        ids = [i for items in shared.values() for i, _, _ in items]
        self.check("agent: the shared store holds the session's turns once, as one gateway's",
                   len(single) == len(shared) == 1 and len(a) >= want and a == b
                   and len(set(ids)) == len(ids),
                   "%d/%d sessions, %d items vs %d" % (len(single), len(shared), len(a), len(b)))

    # ------------------------------------------------------------------ 1c. distillation
    def distilled_across_gateways(self):
        """A grep's large output distilled by the pass that ran on the gateway serving the
        run's end; the session's next request goes to the other gateway and carries the
        distilled text (the cited line verbatim, the rest left for `recall`)."""
        mock = Mock(self.args.mock, self.work)
        # Digests off: the grep's output is over their threshold, and distillation is tested.
        gateways = [serve(self.args.ctxd, self.pg, mock.url, self.work, "distill-%d" % i,
                          "--no-digests") for i in (0, 1)]
        lb = Alternating([g.port() for g in gateways]).start()
        url = "http://127.0.0.1:%d" % lb.port
        headers = {"x-api-key": "sk-ant-ctxd-multi", "anthropic-version": "2023-06-01",
                   "content-type": "application/json", "x-ctxd-session": "multi-distill"}
        cited = "src/config.rs:42: pub const WIDGET_LIMIT: usize = 7;"
        marker = "OMITTED-MARK-91"
        output = "".join(
            "src/module_%03d/handler.rs:%d: let retry_limit_%d = backoff(attempt, %d);\n"
            % (i, 10 + i, i, i * 3)
            + (cited + "\n" if i == 40 else "")
            + ("src/module_120/handler.rs:130: // %s legacy limit\n" % marker if i == 120 else "")
            for i in range(160))
        mock.queue(['tool:bash:{"command": "grep -rn limit src/"}',
                    "text:The widget limit is WIDGET_LIMIT in src/config.rs line 42 (set to 7).",
                    "text:Noted."])
        try:
            def ask(messages):
                # An agent's request: its system prompt and its tools (ctxd offers `recall`
                # beside them, which distillation needs).
                return post_json(url + "/v1/messages", headers, {
                    "model": "claude-sonnet-4-5", "max_tokens": 256,
                    "system": "You are a coding agent.", "tools": [BASH_TOOL],
                    "messages": messages})

            messages = [{"role": "user", "content": "Where is the widget limit set? Grep for it."}]
            call = ask(messages)  # gateway 0
            use = [b for b in call["content"] if b["type"] == "tool_use"][0]
            messages += [{"role": "assistant", "content": call["content"]},
                         {"role": "user", "content": [{"type": "tool_result",
                                                       "tool_use_id": use["id"], "content": output}]}]
            answer = ask(messages)  # gateway 1: the run ends there, and its pass runs there
            messages += [{"role": "assistant", "content": answer["content"]}]
            deadline = time.time() + 30
            while time.time() < deadline and landed_at_pass_end(gateways[1]) < 1:
                time.sleep(0.1)
            self.check("distill: the pass committed its edits at its end, on the gateway that ran it",
                       landed_at_pass_end(gateways[1]) >= 1,
                       "gateway 1's ctxd_distill_landed_total: %s" % metric_lines(gateways[1], "ctxd_distill"))
            messages.append({"role": "user", "content": "Thanks. Which file would I edit to raise it?"})
            ask(messages)  # gateway 0, which did not run the pass
            sent = [r for r in mock.requests() if is_model_request(r["method"], r["path"])]
            statuses = [r.status for r in lb.take()]
        finally:
            stop_all(lb, gateways, mock)
        self.check("distill: every request answered and accepted upstream",
                   statuses == [200] * 3 and len(sent) == 3 and not any(r.get("refused") for r in sent),
                   "statuses %s, refused %s" % (statuses, [r.get("refused") for r in sent]))
        last = (sent[-1]["decoded"] or b"").decode("utf-8", "replace") if sent else ""
        self.check("distill: the other gateway's next request carries the distilled output",
                   "[ctxd] Distilled output of bash" in last and cited in last and marker not in last,
                   "distilled %s, cited line %s, unrelated marker %s" % (
                       "[ctxd] Distilled output of bash" in last, cited in last, marker in last))

    # ------------------------------------------------------------------ 2. killed mid-stream
    def killed_mid_stream(self):
        # Slow events: a streamed answer takes seconds, long enough to be cut.
        mock = SlowMock(self.args.mock, self.work, 500)
        gateways = [serve(self.args.ctxd, self.pg, mock.url, self.work, "kill-%d" % i) for i in (0, 1)]
        lb = Alternating([g.port() for g in gateways]).start()
        url = "http://127.0.0.1:%d" % lb.port
        headers = {"x-api-key": "sk-ant-ctxd-multi", "anthropic-version": "2023-06-01",
                   "content-type": "application/json", "x-ctxd-session": "multi-kill"}
        messages = []
        try:
            lb.pin(0)
            # Two whole turns on gateway 0.
            for i in range(2):
                messages.append({"role": "user", "content": "turn %d" % i})
                reply = post_json(url + "/v1/messages", headers, {
                    "model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages})
                messages.append({"role": "assistant", "content": reply["content"][0]["text"]})
            # A third, streamed slowly, cut by SIGKILL after its first bytes.
            messages.append({"role": "user", "content": "turn 2"})
            body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 4000, "stream": True,
                               "messages": messages}).encode()
            req = urllib.request.Request(url + "/v1/messages", data=body, headers=headers)
            received = b""
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    received = resp.read1(64)
                    gateways[0].proc.send_signal(signal.SIGKILL)
                    gateways[0].proc.wait()
                    while True:
                        chunk = resp.read1(65536)
                        if not chunk:
                            break
                        received += chunk
            except Exception:
                pass
            self.check("the stream was cut by the kill before its end", received
                       and b"message_stop" not in received, received[-300:])
            # The client retries the same request against the other gateway.
            lb.pin(1)
            post_json(url + "/v1/messages", headers, {
                "model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages})
        finally:
            stop_all(lb, gateways, mock)
        items = stored_items(self.args.ctxd, self.pg).get("multi-kill", [])
        roles = [(role, text if role == "user" else "") for _, role, text in items]
        want = [("user", "turn 0"), ("assistant", ""), ("user", "turn 1"), ("assistant", ""),
                ("user", "turn 2"), ("assistant", "")]
        self.check("every answer received in full is stored once (kill, then retry elsewhere)",
                   roles == want, "stored %s" % roles)

    # ------------------------------------------------------------------ 3. database restart
    def restart_under_load(self):
        data = os.environ.get("CTXD_TEST_POSTGRES_DATA")
        pg_bin = os.environ.get("CTXD_TEST_POSTGRES_BIN")
        pg_ctl = os.path.join(pg_bin, "pg_ctl") if pg_bin else shutil.which("pg_ctl")
        if not data or not pg_ctl:
            self.check("PostgreSQL restart under load (CTXD_TEST_POSTGRES_DATA unset)",
                       not os.environ.get("CI"), "CI must give CTXD_TEST_POSTGRES_DATA")
            return
        mock = Mock(self.args.mock, self.work)
        gateways = [serve(self.args.ctxd, self.pg, mock.url, self.work, "restart-%d" % i) for i in (0, 1)]
        lb = Alternating([g.port() for g in gateways]).start()
        url = "http://127.0.0.1:%d" % lb.port
        outcomes = []  # (session, prompt, status, text)
        stop = threading.Event()

        def load(worker):
            n = 0
            while not stop.is_set():
                session = "restart-%d-%d" % (worker, n)
                headers = {"x-api-key": "sk-ant-ctxd-multi", "anthropic-version": "2023-06-01",
                           "content-type": "application/json", "x-ctxd-session": session}
                prompt = "question %d of worker %d" % (n, worker)
                try:
                    reply = post_json(url + "/v1/messages", headers, {
                        "model": "claude-sonnet-4-5", "max_tokens": 64,
                        "messages": [{"role": "user", "content": prompt}]}, timeout=30)
                    outcomes.append((session, prompt, 200, reply["content"][0]["text"]))
                except urllib.error.HTTPError as e:
                    outcomes.append((session, prompt, e.code, e.read().decode("utf-8", "replace")))
                except Exception as e:  # a hang or a reset: reported below
                    outcomes.append((session, prompt, 0, repr(e)))
                n += 1
                time.sleep(0.05)

        workers = [threading.Thread(target=load, args=(w,), daemon=True) for w in range(3)]
        try:
            for w in workers:
                w.start()
            time.sleep(1.5)
            before = len(outcomes)
            # The new server inherits pg_ctl's output: a file, not a pipe this run would wait on.
            log = os.path.join(os.path.dirname(data), "restart.log")
            argv = [pg_ctl, "-D", data, "-m", "fast", "-w", "-l", log, "restart"]
            if os.getuid() == 0:
                argv = ["runuser", "-u", "postgres", "--"] + argv
            restart = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, timeout=60)
            self.check("pg_ctl restart", restart.returncode == 0, "see %s" % log)
            restarted_at = len(outcomes)
            time.sleep(4)
            stop.set()
            for w in workers:
                w.join(60)
        finally:
            stop_all(lb, gateways, mock)
        bad = [o for o in outcomes if o[2] not in (200, 503)]
        self.check("during the outage every request answered 200 or 503 (none hung or reset)", not bad,
                   "%s" % bad[:5])
        after = outcomes[restarted_at:]
        tail = after[len(after) // 2:]
        self.check("after the restart both gateways serve again without a restart",
                   len(tail) >= 4 and all(o[2] == 200 for o in tail),
                   "%d requests after the restart, statuses %s" % (len(after), [o[2] for o in tail]))
        self.check("requests flowed before the restart", before > 3, "%d" % before)
        stored = stored_items(self.args.ctxd, self.pg)
        lost = [o for o in outcomes if o[2] == 200
                and [role for _, role, _ in stored.get(o[0], [])] != ["user", "assistant"]]
        self.check("every acknowledged answer is in the store", not lost,
                   "%d of %d lost, e.g. %s" % (len(lost), sum(o[2] == 200 for o in outcomes), lost[:2]))

    # ------------------------------------------------------------------ 4. one budget, two gateways
    def budget_across_gateways(self):
        """Two gateways with one hard budget (`tenant/total`) on one database, sixteen clients
        sending at once through both: the tokens billed exceed the limit by less than one
        request, the counter holds exactly what was billed (no double count, none lost), no
        reservation is left, and every refusal is the API's own 400."""
        mock = Mock(self.args.mock, self.work)
        limit = 4000
        flags = ("--tenancy", "credential", "--budget", "tenant/total=%d" % limit)
        gateways = [serve(self.args.ctxd, self.pg, mock.url, self.work, "budget-%d" % i, *flags)
                    for i in (0, 1)]
        key = "sk-ant-budget-%d" % os.getpid()
        outcomes = []  # (status, tokens billed or the error body)
        lock = threading.Lock()

        def client(worker):
            for n in range(8):
                port = gateways[(worker + n) % 2].port()
                headers = {"x-api-key": key, "anthropic-version": "2023-06-01",
                           "content-type": "application/json",
                           "x-ctxd-session": "budget-%d-%d" % (worker, n)}
                body = {"model": "claude-sonnet-4-5", "max_tokens": 32,
                        "messages": [{"role": "user", "content": "question %d of %d " % (n, worker) * 20}]}
                try:
                    u = post_json("http://127.0.0.1:%d/v1/messages" % port, headers, body)["usage"]
                    billed = sum(u.get(k) or 0 for k in ("input_tokens", "output_tokens",
                                                        "cache_read_input_tokens",
                                                        "cache_creation_input_tokens"))
                    result = (200, billed)
                except urllib.error.HTTPError as e:
                    result = (e.code, e.read().decode("utf-8", "replace"))
                with lock:
                    outcomes.append(result)

        try:
            threads = [threading.Thread(target=client, args=(w,)) for w in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            admitted = [b for status, b in outcomes if status == 200]
            refused = [b for status, b in outcomes if status == 400]
            others = [(status, b) for status, b in outcomes if status not in (200, 400)]
            billed = sum(admitted)
            biggest = max(admitted, default=0)
            print("budget: %d admitted, %d refused; billed %d tokens against a limit of %d "
                  "(largest request %d)" % (len(admitted), len(refused), billed, limit, biggest),
                  flush=True)
            self.check("budget: some requests admitted, the rest refused with the API's 400",
                       admitted and refused and not others
                       and all("tenant/total budget" in b for b in refused),
                       "%d admitted, %d refused, others %r, a refusal: %r" % (
                           len(admitted), len(refused), others[:2], refused[:1]))
            self.check("budget: two gateways under concurrent requests pass the limit by less "
                       "than one request", billed < limit + biggest,
                       "billed %d against %d (largest request %d, %d admitted)" % (
                           billed, limit, biggest, len(admitted)))
            deadline = time.time() + 10
            row = None
            while time.time() < deadline:
                out = subprocess.run(
                    ["psql", self.pg, "-At", "-c",
                     "SELECT used_tokens, reserved_tokens FROM spend WHERE scope LIKE 'tenant:%'"],
                    capture_output=True, text=True, timeout=60).stdout.strip()
                row = [int(x) for x in out.split("|")] if out else None
                if row and row[1] == 0:
                    break
                time.sleep(0.1)
            self.check("budget: the shared counter holds exactly what was billed, nothing reserved",
                       row == [billed, 0], "counter %r, billed %d" % (row, billed))
        finally:
            for g in gateways:
                g.stop()
            mock.stop()

    def main(self):
        psql(self.args.postgres, "DROP DATABASE IF EXISTS %s" % self.db_name)
        psql(self.args.postgres, "CREATE DATABASE %s" % self.db_name)
        try:
            for phase in (self.same_bytes, self.agent_alternating,
                          self.distilled_across_gateways, self.killed_mid_stream,
                          self.budget_across_gateways, self.restart_under_load):
                try:
                    phase()
                except Exception:
                    self.check(phase.__name__, False, traceback.format_exc())
        finally:
            try:
                psql(self.args.postgres, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.db_name)
            except Exception:
                pass
            if not self.args.keep:
                shutil.rmtree(self.work, ignore_errors=True)
            else:
                print("kept", self.work)
        passed = sum(ok for _, ok, _ in self.results)
        failed = len(self.results) - passed
        print("multi: %d passed, %d failed" % (passed, failed))
        return 1 if failed else 0


def setup_clients(clients_dir, port):
    """../shared/clients/setup.sh with PORT = `port`: the pinned CLIs (installed once, cached in
    CLIENTS_DIR) configured for that port."""
    shared = os.environ.get("CTXD_SHARED") or os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                           "..", "shared")
    env = dict(os.environ, CLIENTS_DIR=clients_dir, PORT=str(port))
    subprocess.run(["bash", os.path.join(shared, "clients", "setup.sh")], env=env, check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=900)


def post_json(url, headers, doc, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ctxd", required=True)
    p.add_argument("--mock", required=True)
    p.add_argument("--postgres", default=os.environ.get("CTXD_TEST_POSTGRES"))
    p.add_argument("--clients-dir", default=os.environ.get("CLIENTS_DIR", "/tmp/ctxd-clients"))
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    if not args.postgres:
        print("multi: no PostgreSQL (--postgres or CTXD_TEST_POSTGRES)", file=sys.stderr)
        return 1 if os.environ.get("CI") else 0
    return Run(args).main()


if __name__ == "__main__":
    sys.exit(main())
