#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo-fuzz, libFuzzer with AddressSanitizer) for a bounded
# time each, starting from the seeds in fuzz/seeds/<target>/. Part of the README's test command
# (tests/run.sh); on its own: `bash tests/fuzz.sh [SECONDS]` (GPULENS_FUZZ_JOBS targets at once;
# default: one a core).
#
# The targets cover the decoders of untrusted input in the `intake` crate and the batch
# validation in `model`: the ingest body and batch, the remote-write body, the series query's
# times and step, and sealed raw-sample blocks as read back from the database. A crash leaves its input in fuzz/artifacts/<target>/ and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${GPULENS_FUZZ_SECONDS:-20}}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi
# cargo-fuzz needs nightly flags (sanitizers); the stable toolchain takes them with this.
export RUSTC_BOOTSTRAP=1
echo "== building the fuzz targets"
cargo fuzz build --release 2>&1 | grep -v '^ *Compiling' || true
# The targets run side by side, one a core (each libFuzzer run is single-threaded): on CI's two
# cores the four take two rounds of SECONDS instead of four.
parallel=${GPULENS_FUZZ_JOBS:-$(nproc)}
failed=$(mktemp -d /tmp/gpulens-fuzz-failed.XXXXXX)
# A target fails the run when anything in it fails (its seeds missing included), not only
# libFuzzer: the caller marks it in $failed whatever the cause.
fuzz_one() {
  local target=$1 corpus
  corpus=$(mktemp -d "/tmp/gpulens-fuzz-$target.XXXXXX") || return 1
  cp fuzz/seeds/"$target"/* "$corpus"/ || return 1
  if ! cargo fuzz run --release "$target" "$corpus" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      >"$corpus.log" 2>&1; then
    tail -n 60 "$corpus.log"
    echo "fuzz target $target failed; its input is in fuzz/artifacts/$target/" >&2
    return 1
  fi
  echo "== $target: $(grep -E '^stat::number_of_executed_units|^Done' "$corpus.log" | tr '\n' ' ')"
  rm -rf "$corpus" "$corpus.log"
}
for target in $(cargo fuzz list); do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  echo "== fuzzing $target for ${seconds}s"
  { fuzz_one "$target" || touch "$failed/$target"; } &
done
wait || true
if [ -n "$(ls -A "$failed")" ]; then
  echo "fuzz targets failed: $(ls "$failed" | tr '\n' ' ')" >&2
  rm -rf "$failed"
  exit 1
fi
rm -rf "$failed"
