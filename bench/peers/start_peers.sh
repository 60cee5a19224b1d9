#!/usr/bin/env bash
# Start two peer proxies (nginx, LiteLLM) in front of an Anthropic Messages API upstream.
#   start_peers.sh UPSTREAM_PORT NGINX_PORT LITELLM_PORT   # install if missing, start, wait until ready
#   start_peers.sh stop                                    # stop both
# Readiness does not depend on the upstream (it may be started after the peers).
# The venv, pid files and logs: $CTXD_PEERS_DIR (default $TMPDIR/ctxd-peers or /tmp/ctxd-peers).
# Used by `ctxd-bench gateway --mock-port UPSTREAM_PORT --peer nginx=... --peer litellm=...`
# (docs/benchmarks.md).
set -euo pipefail

PEERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${CTXD_PEERS_DIR:-${TMPDIR:-/tmp}/ctxd-peers}"
RUN="$STATE/run"
VENV="$STATE/venv"
LITELLM_VERSION="1.108.7"   # newest litellm whose [proxy] extra installs from PyPI here
                            # (>=1.108.8 needs a litellm-proxy package that PyPI does not have)
NGINX_PREFIX="$RUN/nginx"

log() { echo "[start_peers] $*" >&2; }

stop_pidfile() {  # stop_pidfile NAME PIDFILE
    local name="$1" pf="$2" pid
    [ -f "$pf" ] || return 0
    pid="$(cat "$pf" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            log "$name (pid $pid) did not exit on TERM, sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        log "stopped $name (pid $pid)"
    fi
    rm -f "$pf"
}

do_stop() {
    stop_pidfile litellm "$RUN/litellm.pid"
    stop_pidfile nginx "$NGINX_PREFIX/nginx.pid"   # TERM to the master = fast shutdown
}

if [ "${1:-}" = "stop" ]; then
    do_stop
    exit 0
fi

if [ $# -ne 3 ]; then
    echo "usage: $0 UPSTREAM_PORT NGINX_PORT LITELLM_PORT | $0 stop" >&2
    exit 2
fi
UPSTREAM_PORT="$1" NGINX_PORT="$2" LITELLM_PORT="$3"

# ---------------------------------------------------------------- install
install_nginx() {
    command -v nginx >/dev/null 2>&1 && return 0
    log "installing nginx (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nginx >/dev/null
}

install_litellm() {
    if [ -x "$VENV/bin/litellm" ] && \
       [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))' 2>/dev/null)" = "$LITELLM_VERSION" ]; then
        return 0
    fi
    log "installing litellm[proxy]==$LITELLM_VERSION into $VENV"
    if [ ! -x "$VENV/bin/python" ]; then
        if ! python3 -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
            python3 -m venv "$VENV"
        fi
    fi
    local cons=()
    # constraints.txt = pip freeze of the tested venv (pins all transitive deps)
    [ -f "$PEERS_DIR/constraints.txt" ] && cons=(-c "$PEERS_DIR/constraints.txt")
    "$VENV/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" "${cons[@]}"
}

install_nginx
install_litellm

# ---------------------------------------------------------------- start
do_stop   # idempotent restart: stop anything we started before
mkdir -p "$RUN" "$NGINX_PREFIX/tmp"

render() {  # render TEMPLATE OUT
    sed -e "s|@PREFIX@|$NGINX_PREFIX|g" -e "s|@NGINX_PORT@|$NGINX_PORT|g" \
        -e "s|@UPSTREAM_PORT@|$UPSTREAM_PORT|g" -e "s|@LITELLM_PORT@|$LITELLM_PORT|g" "$1" > "$2"
}
render "$PEERS_DIR/conf/nginx.conf.tmpl" "$NGINX_PREFIX/nginx.conf"
render "$PEERS_DIR/conf/litellm.yaml.tmpl" "$RUN/litellm.yaml"

T0=$(date +%s.%N)

# nginx: daemonizes itself; pid file $NGINX_PREFIX/nginx.pid. -e avoids opening the
# compiled-in /var/log/nginx/error.log before the config is read.
nginx -e "$NGINX_PREFIX/error.log" -c "$NGINX_PREFIX/nginx.conf" -p "$NGINX_PREFIX/" -t -q
nginx -e "$NGINX_PREFIX/error.log" -c "$NGINX_PREFIX/nginx.conf" -p "$NGINX_PREFIX/"
ln -sf "$NGINX_PREFIX/nginx.pid" "$RUN/nginx.pid"

# LiteLLM: offline and quiet.
(
    cd "$RUN"
    export LITELLM_LOCAL_MODEL_COST_MAP=True          # no model-cost-map download
    export LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True  # no anthropic beta-headers config download
    export LITELLM_LOCAL_BLOG_POSTS=True
    export LITELLM_LOCAL_POLICY_TEMPLATES=True
    export LITELLM_LOCAL_AUTOROUTER_PRESETS=True
    export LITELLM_TELEMETRY_DISABLED=true
    export LITELLM_LOG=WARNING
    export DISABLE_ADMIN_UI=True
    export NO_DOCS=True
    unset DATABASE_URL LITELLM_MASTER_KEY
    exec setsid "$VENV/bin/litellm" --config "$RUN/litellm.yaml" \
        --host 127.0.0.1 --port "$LITELLM_PORT" --num_workers 1 --keepalive_timeout 75 \
        > "$RUN/litellm.log" 2>&1 < /dev/null
) &
echo $! > "$RUN/litellm.pid"

# ---------------------------------------------------------------- wait
wait_http() {  # wait_http NAME URL TIMEOUT_S
    local name="$1" url="$2" timeout="$3" start now
    start=$(date +%s)
    while :; do
        if curl -sf -o /dev/null --max-time 2 "$url"; then
            log "$name ready after $(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}')s"
            return 0
        fi
        now=$(date +%s)
        if [ $((now - start)) -ge "$timeout" ]; then
            log "$name not ready after ${timeout}s: $url"
            return 1
        fi
        if [ "$name" = litellm ] && ! kill -0 "$(cat "$RUN/litellm.pid")" 2>/dev/null; then
            log "litellm exited; last log lines:"; tail -n 30 "$RUN/litellm.log" >&2
            return 1
        fi
        sleep 0.2
    done
}
ok=1
wait_http nginx "http://127.0.0.1:$NGINX_PORT/__nginx_health" 20 || ok=0
wait_http litellm "http://127.0.0.1:$LITELLM_PORT/health/liveliness" 180 || ok=0
if [ "$ok" != 1 ]; then
    do_stop
    exit 1
fi
echo "nginx=http://127.0.0.1:$NGINX_PORT litellm=http://127.0.0.1:$LITELLM_PORT"
