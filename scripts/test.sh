#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this).
#  1. installs the pinned NVRTC 13.0 + headers + cuobjdump into .cuda/ if absent
#     (CPU-only machines compile every family with it); installs PostgreSQL from
#     Debian's packages and starts a throwaway server on loopback
#     (scripts/install-postgres.sh), exported as EVO_TEST_PG_URL so the store's tests
#     and the multi-host search test run on it too;
#  2. cargo fmt --check, cargo clippy -D warnings;
#  3. every test (cargo nextest if installed, else cargo test). Tests that need a GPU
#     print why they skip when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda.sh
EVO_TEST_PG_URL="$(scripts/install-postgres.sh | tail -n1)"
export EVO_TEST_PG_URL
echo "PostgreSQL for the tests: $EVO_TEST_PG_URL"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
