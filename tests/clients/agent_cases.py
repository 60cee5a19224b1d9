"""The real agent CLIs from ../shared/clients (installed and configured by its setup.sh with PORT
set to the tap in front of the gateway), each asked to "list the files" once, non-interactively,
with no standard input and a hard timeout, as that directory's HOWTO.md runs them; and Gemini CLI
(installed and configured by tests/clients/gemini_setup.sh, same PORT).
"""

import json
import os
import subprocess
import time

PROMPT = "list the files"
# `timeout` kills the client's whole process group; the SDK-level timeouts are the clients' own.
CLIENT_TIMEOUT_S = 150


# Where each client keeps its transcripts, under its home (HOWTO.md).
TRANSCRIPTS = {
    "claude-code": ("home-claude", ".claude", "projects"),
    "pi": ("home-pi", ".pi", "agent", "sessions"),
    "codex": ("codex-home", "sessions"),
    "gemini-cli": ("home-gemini", ".gemini", "tmp"),
}


class AgentRun:
    """What one CLI run did, for the checks."""

    def __init__(self, argv, rc, stdout, stderr, final, transcripts=()):
        self.argv = argv
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.final = final  # the final answer the client printed, as the client reports it
        self.transcripts = list(transcripts)  # the client's session files this run wrote


def _transcripts(agent, clients_dir, since):
    """The .jsonl transcripts under the client's home written since `since` (time.time())."""
    root = os.path.join(clients_dir, *TRANSCRIPTS[agent])
    out = []
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            if name.endswith(".jsonl") and os.path.getmtime(path) >= since:
                out.append(path)
    return sorted(out)


def _base_env(clients_dir, home):
    """A clean environment: no provider keys or base URLs leak in from the caller's."""
    return {
        "PATH": os.path.join(clients_dir, "node_modules", ".bin") + os.pathsep + os.environ.get("PATH", ""),
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def _run(argv, env, repo, log_prefix):
    argv = ["timeout", "-k", "10", str(CLIENT_TIMEOUT_S)] + argv
    out = subprocess.run(argv, cwd=repo, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    stdout, stderr = out.stdout.decode("utf-8", "replace"), out.stderr.decode("utf-8", "replace")
    with open(log_prefix + ".stdout", "w") as f:
        f.write(stdout)
    with open(log_prefix + ".stderr", "w") as f:
        f.write(stderr)
    return out.returncode, stdout, stderr


def claude_code(base_url, clients_dir, logdir, prompt=PROMPT, oauth_token=None, args=(), log_name="claude-code",
                launcher=(), env_extra=None):
    """Claude Code on an API key, or with `oauth_token` as a Pro/Max login sends it
    (`CLAUDE_CODE_OAUTH_TOKEN`: `Authorization: Bearer` and the `oauth-...` beta). `launcher`
    goes before the command (`ctxd run --`, which sets the base URL: `base_url` None)."""
    env = _base_env(clients_dir, os.path.join(clients_dir, "home-claude"))
    env.update(
        IS_SANDBOX="1",  # as root, --dangerously-skip-permissions refuses to start without it
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        **(env_extra or {}),
    )
    if base_url:
        env["ANTHROPIC_BASE_URL"] = base_url
    if oauth_token:
        env["CLAUDE_CODE_OAUTH_TOKEN"] = oauth_token
    else:
        env["ANTHROPIC_API_KEY"] = "dummy"
    argv = [*launcher, "claude", "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--dangerously-skip-permissions", *args]
    since = time.time()
    rc, out, err = _run(argv, env, os.path.join(clients_dir, "repo"), os.path.join(logdir, log_name))
    final = None
    for line in out.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("type") == "result":
            final = None if ev.get("is_error") else ev.get("result")
    return AgentRun(argv, rc, out, err, final, _transcripts("claude-code", clients_dir, since))


def pi(provider, model, base_url, clients_dir, logdir, prompt=PROMPT, launcher=(), env_extra=None):
    """Pi on a provider of its models.json (setup.sh points them at `base_url`, the tap)."""
    env = _base_env(clients_dir, os.path.join(clients_dir, "home-pi"))
    env.update(PI_OFFLINE="1", **(env_extra or {}))
    argv = [*launcher, "pi", "--offline", "--provider", provider, "--model", model, "-p", prompt]
    since = time.time()
    log = os.path.join(logdir, ("run-" if launcher else "") + "pi-" + provider)
    rc, out, err = _run(argv, env, os.path.join(clients_dir, "repo"), log)
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    return AgentRun(argv, rc, out, err, lines[-1] if lines else None, _transcripts("pi", clients_dir, since))


def codex(base_url, clients_dir, logdir, prompt=PROMPT, launcher=(), env_extra=None):
    """Codex on the `mock` provider of its config.toml (setup.sh points it at `base_url`)."""
    env = _base_env(clients_dir, os.path.join(clients_dir, "home-codex"))
    os.makedirs(env["HOME"], exist_ok=True)
    env.update(CODEX_HOME=os.path.join(clients_dir, "codex-home"), MOCK_API_KEY="dummy", **(env_extra or {}))
    argv = [*launcher, "codex", "exec", "--skip-git-repo-check", prompt]
    since = time.time()
    log = os.path.join(logdir, ("run-" if launcher else "") + "codex")
    rc, out, err = _run(argv, env, os.path.join(clients_dir, "repo"), log)
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    return AgentRun(argv, rc, out, err, lines[-1] if lines else None, _transcripts("codex", clients_dir, since))


GEMINI_MODEL = "gemini-2.5-flash"


def gemini_cli(base_url, clients_dir, logdir, prompt=PROMPT, model=GEMINI_MODEL, log_name="gemini-cli"):
    """Gemini CLI headless in yolo mode on `model` (`-m`: no routing classifier call), its home
    the one tests/clients/gemini_setup.sh writes (API-key auth, no telemetry, no folder trust),
    the key and base URL in the environment (they win over that home's .gemini/.env)."""
    env = _base_env(clients_dir, os.path.join(clients_dir, "home-gemini"))
    env["PATH"] = os.path.join(clients_dir, "gemini", "node_modules", ".bin") + os.pathsep + env["PATH"]
    env.update(GEMINI_API_KEY="AIza-ctxd-gemini-cli", GOOGLE_GEMINI_BASE_URL=base_url)
    argv = ["gemini", "-p", prompt, "--yolo", "-m", model]
    since = time.time()
    rc, out, err = _run(argv, env, os.path.join(clients_dir, "repo"), os.path.join(logdir, log_name))
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    return AgentRun(argv, rc, out, err, lines[-1] if lines else None, _transcripts("gemini-cli", clients_dir, since))
