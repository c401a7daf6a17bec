#!/usr/bin/env bash
# schemathesis (PyPI) against the OpenAPI description a running collector serves: a `gpulens
# demo` on a free port with a day of history, every operation with generated and mutated
# requests, bounded by examples per operation and a wall-clock limit. Part of the README's test
# command (tests/run.sh, after the build); on its own: `bash tests/schemathesis.sh`.
#
# Checks: every schemathesis check except `positive_data_acceptance`. That one expects each
# schema-valid value to be accepted, but several domains are narrower than JSON Schema can say
# (time expressions such as `now-7d`, ISO weeks that exist, entities that gpulens has seen);
# those refusals are the API's documented 400/404 and are asserted by the collector's tests.
# tests/schemathesis.toml adds the listener's refusals (413, 414) to what counts as rejecting
# invalid data.
# POST /api/v1/write takes protobuf, which schemathesis cannot generate; it is covered by the
# remote_write fuzz target and the remote-write tests. GET /api/v1/ingest/stream switches the
# connection to the ingest stream's frames, which schemathesis cannot speak (an HTTP client
# would wait on the 101 for the stream to close); it is covered by the ingest_stream fuzz target
# and the collector's stream tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GPULENS_BIN:-target/debug/gpulens}
VENV=target/schemathesis-venv
SEED=${GPULENS_SCHEMATHESIS_SEED:-20261124}
EXAMPLES=${GPULENS_SCHEMATHESIS_EXAMPLES:-100}

[ -x "$BIN" ] || cargo build --quiet -p collector
if [ ! -x "$VENV/bin/schemathesis" ]; then
  echo "== installing schemathesis (PyPI) into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check 'schemathesis==4.32.5'
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DIR=$(mktemp -d /tmp/gpulens-schemathesis.XXXXXX)
"$BIN" demo --listen "127.0.0.1:$PORT" --data-dir "$DIR/demo" --history 1d >"$DIR/demo.log" 2>&1 &
DEMO=$!
cleanup() { kill "$DEMO" 2>/dev/null || true; wait "$DEMO" 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
for _ in $(seq 1 240); do
  [ -f "$DIR/demo/env" ] && curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$DEMO" 2>/dev/null || { cat "$DIR/demo.log"; echo "the demo collector exited" >&2; exit 1; }
  sleep 0.5
done
[ -f "$DIR/demo/env" ] || { tail -n 30 "$DIR/demo.log"; echo "the demo collector did not come up" >&2; exit 1; }
# shellcheck disable=SC1091
source "$DIR/demo/env"
echo "== schemathesis against http://127.0.0.1:$PORT (seed $SEED, $EXAMPLES examples per operation)"
status=0
timeout 600 "$VENV/bin/schemathesis" --config-file tests/schemathesis.toml \
  run "http://127.0.0.1:$PORT/api/v1/openapi.json" \
  --url "http://127.0.0.1:$PORT" \
  --checks all --exclude-checks positive_data_acceptance \
  --exclude-path /api/v1/write --exclude-path /api/v1/ingest/stream \
  --header "Authorization: Bearer $GPULENS_TOKEN" \
  --max-examples "$EXAMPLES" --seed "$SEED" \
  --no-color >"$DIR/st.log" 2>&1 || status=$?
if [ "$status" != 0 ]; then
  cat "$DIR/st.log"
  echo "schemathesis found failures (exit $status)" >&2
  exit 1
fi
tail -n 25 "$DIR/st.log"
# The collector stayed up through all of it.
curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "the collector stopped answering" >&2; exit 1; }
