#!/usr/bin/env bash
# The whole gpulens test suite, as the README's second command and CI run it.
# Installs what is missing (PostgreSQL server binaries, Alertmanager, Prometheus, Chromium, playwright-core and oidc-provider
# from npm, cargo-nextest), starts a throwaway
# PostgreSQL cluster on a free port in a temporary directory, runs every test once with
# `cargo nextest run --workspace`, then the fuzz targets for a bounded time each
# (tests/fuzz.sh) and schemathesis against a demo collector's OpenAPI description
# (tests/schemathesis.sh), and stops the cluster again.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

find_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Debian packages the suite needs, installed in one apt run when any is missing.
missing=()
find_pg_bin >/dev/null || missing+=(postgresql)
command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1 \
  || missing+=(prometheus-alertmanager)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || missing+=(prometheus)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v curl >/dev/null 2>&1 || missing+=(curl)   # the README test runs its curl commands
command -v kubectl >/dev/null 2>&1 || missing+=(kubectl)   # kustomize renders deploy/kubernetes
command -v openssl >/dev/null 2>&1 || missing+=(openssl)   # the TLS test makes its certificates
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
PG_BIN=$(find_pg_bin) || { echo "PostgreSQL server binaries are missing after the install" >&2; exit 1; }
if [ ! -d tests/browser/node_modules/playwright-core ] || [ ! -d tests/browser/node_modules/oidc-provider ]; then
  log "installing playwright-core (npm) to drive Chromium, and oidc-provider for the sign-in test"
  (cd tests/browser && npm ci --silent --no-audit --no-fund)
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

# Throwaway cluster. initdb refuses to run as root, so the cluster belongs to `postgres`
# (or the current user when not root).
WORK=$(mktemp -d /tmp/gpulens-test.XXXXXX)
chmod 755 "$WORK"
AS=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  chown postgres "$WORK"
  AS=(runuser -u postgres --)
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
stop_pg() {
  "${AS[@]}" "$PG_BIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap stop_pg EXIT
log "starting PostgreSQL ($PG_BIN) on port $PORT"
"${AS[@]}" "$PG_BIN/initdb" -D "$WORK/data" --auth=trust -U postgres -E UTF8 >/dev/null
"${AS[@]}" "$PG_BIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w \
  -o "-p $PORT -k $WORK -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null

export GPULENS_TEST_PG="postgres://postgres@127.0.0.1:$PORT/postgres"
export GPULENS_TEST_PG_BIN="$PG_BIN"
export GPULENS_REQUIRE_PG=1
export GPULENS_REQUIRE_ALERTMANAGER=1
export GPULENS_REQUIRE_BROWSER=1
export GPULENS_REQUIRE_PROMETHEUS=1
# The agent's full-disk test mounts a small tmpfs, which needs root (as CI runs).
if [ "$(id -u)" = 0 ]; then export GPULENS_REQUIRE_MOUNT=1; fi

log "building the workspace (the fake NVML cdylib and the binaries the end-to-end tests run)"
cargo build --quiet --workspace

log "running the suite"
cargo nextest run --workspace --no-fail-fast "$@"

# The fuzz targets (fuzz/, bounded in time), on a full run only: with a test filter given,
# only the selected tests run.
if [ $# -eq 0 ]; then
  log "fuzzing the decoders of untrusted input (tests/fuzz.sh)"
  bash tests/fuzz.sh
  log "schemathesis against the served OpenAPI description (tests/schemathesis.sh)"
  bash tests/schemathesis.sh
fi
