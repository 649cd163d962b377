#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this).
#  1. installs the pinned NVRTC 13.0 + headers + cuobjdump into .cuda/ if absent
#     (CPU-only machines compile every family with it);
#  2. cargo fmt --check, cargo clippy -D warnings;
#  3. every test (cargo nextest if installed, else cargo test). Tests that need a GPU
#     print why they skip when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
