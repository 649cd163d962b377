#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this).
#  1. installs the pinned NVRTC 13.0 + headers + cuobjdump into .cuda/ if absent
#     (CPU-only machines compile every family with it); installs PostgreSQL from
#     Debian's packages and starts a throwaway server on loopback
#     (scripts/install-postgres.sh), exported as EVO_TEST_PG_URL so the store's tests
#     and the multi-host search test run on it too;
#  2. cargo fmt --check, cargo clippy -D warnings;
#  3. the kernel tools' Python checks (bench/), then every test (cargo nextest if installed,
#     else cargo test). Tests that need a GPU print why they skip when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda.sh
EVO_TEST_PG_URL="$(scripts/install-postgres.sh | tail -n1)"
export EVO_TEST_PG_URL
echo "PostgreSQL for the tests: $EVO_TEST_PG_URL"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The kernel tools' CPU checks (bench/): the generated wgmma specializations are current, the
# float64 desk check of the attention tile logic, the A/B and FP8 end-to-end scripts' arguments and tables.
python3 bench/kernel/gen_wgmma.py --check
python3 bench/kernel/desk_check.py --quick
python3 bench/gpu/test_kernel_ab.py
python3 bench/gpu/test_fp8_e2e.py
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

# The report renders: a replayed run, its HTML report, a headless Chromium screenshot
# checked for the charts (EVO_SKIP_SCREENSHOT=1 skips it, e.g. without network for apt).
if [[ ${EVO_SKIP_SCREENSHOT:-0} != 1 ]]; then
  shot=$(mktemp -d)
  cargo run -q --locked -p evo-cli --bin evo -- search -c configs/sdpa_replay.toml \
    --evaluator replay:tests/data/landscape_sdpa_fwd_mma_h200.json \
    --db "$shot/p.db" --run shot --budget 5gen --no-progress >/dev/null
  cargo run -q --locked -p evo-cli --bin evo -- report shot --db "$shot/p.db" --out "$shot/report.html"
  scripts/report_screenshot.sh "$shot/report.html" "$shot/report.png"
  rm -rf "$shot"
fi
