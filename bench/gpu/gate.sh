#!/usr/bin/env bash
# Issue 16's GPU evidence: the stricter correctness gate on a GPU machine.
# Runs from the repo root with `.gpu/` (bench/gpu/bundle.sh) carried; logs go to $OUT.
#   bash bench/gpu/gate.sh STEP...   steps, in the order given:
#   selftest    evo selftest (references vs float64 on varied calls, timing, fault isolation)
#   planted     evo check on every planted suite (verdicts as expected, sanitizer cost);
#               PLANTED_SUITES="sdpa_fp8_e2e ..." runs only those
#   tests       the GPU test binaries of .gpu/tests.tar.zst
#   mma         evo eval --pairwise of configs/sdpa.toml (sdpa_fwd_mma)
#   wgmma       evo eval --pairwise of configs/sdpa_wgmma.toml (sdpa_fwd_wgmma)
#   throughput  BUDGET=4m: a configs/sdpa.toml search with $OLD_EVO (default .gpu-old/evo; before,
#               with its own templates from $OLD_TEMPLATES when set) and .gpu/evo (after), one
#               after the other, both with the evolution strategy (what is compared is the
#               evaluator), evaluations per hour of each and the sanitizer runs of the new one;
#               WHICH="new" runs only the new one
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=${EVO:-.gpu/evo}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/nvidia-smi.txt" 2>&1
step() { echo; echo "== $1 ($(date +%T))"; }

for s in "$@"; do
  case "$s" in
  selftest)
    step selftest
    $EVO selftest 2>&1 | tee "$OUT/selftest.txt" | tail -n 40
    echo "selftest exit: ${PIPESTATUS[0]}" ;;
  planted)
    for suite in ${PLANTED_SUITES:-sdpa sdpa_fp8 sdpa_fp8_e2e gemm fp8_quantize}; do
      problem=$suite
      case $suite in sdpa) problem=sdpa_fwd ;; sdpa_fp8) problem=sdpa_fwd_fp8 ;; sdpa_fp8_e2e) problem=sdpa_fwd_fp8_e2e ;; esac
      step "planted $suite"
      start=$(date +%s)
      $EVO check tests/planted/$suite/*.cu --problem $problem -c tests/planted/$suite/check.toml \
        --json > "$OUT/planted_$suite.json" 2> "$OUT/planted_$suite.err"
      rc=$?
      python3 - "$OUT/planted_$suite.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
for r in rows:
    v = r["verdict"]
    san = r.get("sanitizer")
    cost = f' sanitizer {san["seconds"]:.1f}s' if san else ''
    mark = {True: "ok", False: "MISMATCH", None: ""}[r.get("matched")]
    print(f'{r["file"].split("/")[-1]:38} expected {str(r.get("expected")):16} got {v["status"]:16} {mark:9}{cost} | {v["detail"][:150]}')
PY
      echo "planted $suite exit: $rc ($(( $(date +%s) - start )) s)"
    done ;;
  tests)
    step "GPU tests"
    .gpu/cargo-nextest nextest run --archive-file .gpu/tests.tar.zst --workspace-remap . \
      --run-ignored all --no-fail-fast --no-capture > "$OUT/tests.txt" 2>&1
    echo "tests exit: $?"; grep -E "PASS|FAIL|SKIP|skipping|Summary" "$OUT/tests.txt" | tail -n 40 ;;
  mma|wgmma)
    cfg=configs/sdpa.toml; [ "$s" = wgmma ] && cfg=configs/sdpa_wgmma.toml
    step "evo eval --pairwise $cfg"
    start=$(date +%s)
    $EVO eval -c $cfg --pairwise > "$OUT/eval_$s.txt" 2>&1
    echo "eval $s exit: $? ($(( $(date +%s) - start )) s)"; tail -n 30 "$OUT/eval_$s.txt" ;;
  throughput)
    budget=${BUDGET:-4m}
    cp configs/sdpa.toml /tmp/throughput.toml
    grep -q '^\[search\]' /tmp/throughput.toml || printf '\n[search]\nstrategy = "evolution"\n' >> /tmp/throughput.toml
    for which in ${WHICH:-old new}; do
      bin=$EVO; [ $which = old ] && bin=${OLD_EVO:-.gpu-old/evo}
      templates=(); [ $which = old ] && [ -n "${OLD_TEMPLATES:-}" ] && templates=(--templates "$OLD_TEMPLATES")
      step "throughput: $which evo, $budget search of configs/sdpa.toml"
      rm -rf /tmp/tp_$which; mkdir -p /tmp/tp_$which
      RUST_LOG=info $bin "${templates[@]}" search -c /tmp/throughput.toml --db /tmp/tp_$which/p.db --run tp --budget $budget --no-progress \
        > "$OUT/throughput_$which.txt" 2>&1
      echo "exit $?"; grep -iE "evaluations|per hour|/hour|busy" "$OUT/throughput_$which.txt" | tail -n 5
      $bin stats tp --db /tmp/tp_$which/p.db > "$OUT/throughput_${which}_stats.txt" 2>&1
      grep -iE "per hour|evaluat|busy|incorrect|status" "$OUT/throughput_${which}_stats.txt" | head -n 12
      grep -h "evaluated job" /tmp/tp_$which/evo-logs/*.log 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-420 | tail -n 8
      # The sanitizer gate on each new best (the new evo only): verdicts and seconds.
      python3 - /tmp/tp_$which/p.db <<'PY' | tee -a "$OUT/throughput_${which}_stats.txt"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
try:
    rows = db.execute("select c.genome, c.status, p.metrics from profiles p join candidates c on c.id = p.candidate_id where p.tool = 'sanitizer'").fetchall()
except sqlite3.Error as e:
    rows = []
print(f"sanitizer runs (new bests): {len(rows)}")
for genome, status, metrics in rows:
    m = json.loads(metrics)
    secs = sum(r.get("seconds", 0) for r in m.get("reports", []))
    print(f"  {m['verdict']:8} {secs:5.1f} s  status {status}  {genome}")
PY
    done ;;
  *) echo "unknown step $s"; exit 2 ;;
  esac
done
