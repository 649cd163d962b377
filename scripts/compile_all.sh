#!/usr/bin/env bash
# Compiles every valid genome of a config's family to CUBIN (NVRTC only, no GPU) and
# prints the summary line: compiled, failed, with spills, NVRTC time range.
#   scripts/compile_all.sh configs/sdpa.toml [--arch sm_80]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda.sh
cargo build --release -q -p evo-cli
exec target/release/evo compile --all -c "$@"
