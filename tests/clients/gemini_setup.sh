#!/usr/bin/env bash
# Install the pinned Gemini API clients and lay out their homes under $CLIENTS_DIR
# (default /tmp/ctxd-clients), configured for a Gemini API server on 127.0.0.1:${PORT:-18080}
# (the capture server tests/clients/gemini_capture.py, or ctxd in front of it).
# Mirrors shared/clients/setup.sh for the other clients; installs only what is missing.
#
#   PORT=18090 tests/clients/gemini_setup.sh [VENV]
#
# - Gemini CLI @google/gemini-cli@0.61.0 -> $C/gemini/node_modules/.bin/gemini
#   home $C/home-gemini (.gemini/settings.json: api-key auth, folder trust, telemetry, usage stats,
#   auto-update and IDE off; .gemini/.env: GOOGLE_GEMINI_BASE_URL + GEMINI_API_KEY=dummy)
#   run:  cd $C/repo && HOME=$C/home-gemini gemini -p "..." --yolo [-m gemini-2.5-flash] </dev/null
#   (or source $C/gemini/env.sh; env vars set by the caller win over .gemini/.env)
# - google-genai==3.6.1 into the existing venv VENV (first argument), when given
# - Pi: adds provider "mock-google" (api google-generative-ai, baseUrl .../v1beta) to
#   $C/home-pi/.pi/agent/models.json when that file exists (written by shared/clients/setup.sh)
set -eu
C=${CLIENTS_DIR:-/tmp/ctxd-clients}
PORT=${PORT:-18080}
GEMINI_CLI_VERSION=0.61.0
GENAI_VERSION=3.6.1
BASE=http://127.0.0.1:$PORT
mkdir -p "$C/gemini"

if [ ! -x "$C/gemini/node_modules/.bin/gemini" ] ||
   [ "$(node -p "require('$C/gemini/node_modules/@google/gemini-cli/package.json').version" 2>/dev/null)" != "$GEMINI_CLI_VERSION" ]; then
  (cd "$C/gemini" && { [ -f package.json ] || npm init -y >/dev/null; } &&
   npm install --no-audit --no-fund "@google/gemini-cli@$GEMINI_CLI_VERSION" >npm_install.log 2>&1)
fi

H=$C/home-gemini
mkdir -p "$H/.gemini"
cat > "$H/.gemini/settings.json" <<'EOF'
{
  "general": {
    "enableAutoUpdate": false,
    "enableAutoUpdateNotification": false,
    "sessionRetention": {"enabled": false}
  },
  "privacy": {"usageStatisticsEnabled": false},
  "telemetry": {"enabled": false, "logPrompts": false},
  "ide": {"enabled": false, "hasSeenNudge": true},
  "security": {
    "auth": {"selectedType": "gemini-api-key"},
    "folderTrust": {"enabled": false}
  },
  "ui": {"hideTips": true, "hideBanner": true}
}
EOF
printf 'GOOGLE_GEMINI_BASE_URL=%s\nGEMINI_API_KEY=dummy\n' "$BASE" > "$H/.gemini/.env"
cat > "$C/gemini/env.sh" <<EOF
export PATH=$C/gemini/node_modules/.bin:\$PATH
export HOME=$H
export GOOGLE_GEMINI_BASE_URL=$BASE
export GEMINI_API_KEY=dummy
EOF

if [ $# -ge 1 ] && [ -n "$1" ]; then
  VENV=$1
  if [ "$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("google-genai"))' 2>/dev/null)" != "$GENAI_VERSION" ]; then
    "$VENV/bin/pip" install -q "google-genai==$GENAI_VERSION"
  fi
fi

PI_MODELS=$C/home-pi/.pi/agent/models.json
if [ -f "$PI_MODELS" ]; then
  python3 - "$PI_MODELS" "$BASE" <<'EOF'
import json, sys
path, base = sys.argv[1], sys.argv[2]
m = json.load(open(path))
m.setdefault("providers", {})["mock-google"] = {
    "baseUrl": base + "/v1beta",  # pi-ai sets apiVersion "" : the version must be in baseUrl
    "api": "google-generative-ai",
    "apiKey": "dummy",
    "models": [{"id": "gemini-2.5-flash", "name": "Mock Gemini", "reasoning": True,
                "contextWindow": 1048576, "maxTokens": 65536}],
}
json.dump(m, open(path, "w"), indent=2)
EOF
fi

mkdir -p "$C/repo"
if [ ! -d "$C/repo/.git" ]; then
  (cd "$C/repo" && git init -q && printf '# demo\n' > README.md && printf 'print("hi")\n' > main.py \
     && git add -A && git -c user.email=t@t -c user.name=t commit -qm init)
fi
echo "gemini clients ready in $C (gemini: $C/gemini/node_modules/.bin/gemini, HOME=$H); Gemini API server expected on $BASE"
