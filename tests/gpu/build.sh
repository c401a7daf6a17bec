#!/usr/bin/env bash
# Builds what tests/gpu/check.sh carries to a GPU machine: gpulens-agent and the load program,
# release, stripped, into tests/gpu/bin/ (ignored by git; name it in the device tool's carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p agent -p gpu-load
mkdir -p tests/gpu/bin
for b in gpulens-agent gpulens-gpu-load; do
  strip -o "tests/gpu/bin/$b" "target/release/$b"
done
ls -l tests/gpu/bin
