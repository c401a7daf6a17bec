#!/usr/bin/env bash
# Builds what tests/gpu/check.sh carries to a GPU machine: gpulens-agent, the load program and
# the fake NVML (on which the check replays the real driver's costs), release, stripped, into
# tests/gpu/bin/ (ignored by git; name it in the device tool's carry).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p agent -p gpu-load -p fake-nvml
mkdir -p tests/gpu/bin
for b in gpulens-agent gpulens-gpu-load; do
  strip -o "tests/gpu/bin/$b" "target/release/$b"
done
strip -o tests/gpu/bin/libfake_nvml.so target/release/libfake_nvml.so
ls -l tests/gpu/bin
