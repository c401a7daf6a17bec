#!/usr/bin/env bash
# The real-GPU check: gpulens-agent against nvidia-smi on a machine with an NVIDIA driver.
# Usage: tests/gpu/check.sh OUT_DIR   (report.json, report.txt and raw.tar.gz land there)
#
# Needs no Rust toolchain: the binaries come from tests/gpu/bin/ (made here by
# tests/gpu/build.sh and carried over), or from GPU_CHECK_AGENT / GPU_CHECK_LOAD. Read-only
# towards the GPU: it never changes MIG mode, clocks or persistence. Takes about 2 minutes
# (GPU_CHECK_FOOTPRINT_SECONDS=60 of it measure the agent's own CPU and memory).
# Exit status: 0 all agreed, 1 something differed or failed (the report says what), 64 usage.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 64
fi
mkdir -p "$1" || exit 64
out=$(cd "$1" && pwd)
export GPU_CHECK_AGENT=${GPU_CHECK_AGENT:-$here/bin/gpulens-agent}
export GPU_CHECK_LOAD=${GPU_CHECK_LOAD:-$here/bin/gpulens-gpu-load}
for b in "$GPU_CHECK_AGENT" "$GPU_CHECK_LOAD"; do
  if [ ! -x "$b" ]; then
    echo "$b is missing: run tests/gpu/build.sh where Rust is, and carry tests/gpu/bin" >&2
    exit 64
  fi
done
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "python3 is needed (standard library only)" >&2; exit 64; }
exec "$py" "$here/check.py" "$out"
