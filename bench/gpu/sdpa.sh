#!/usr/bin/env bash
# Evidence for the SDPA problem and the sdpa_fwd_mma family, on a GPU machine, from the
# repo root with .gpu/ carried. Logs go to $OUT.
#  1. evo selftest: the float32 GPU references (gemm and sdpa) against float64 on the CPU;
#  2. the planted-fault attention suite in one `evo check`;
#  3. a set of genomes covering every value of every knob through every gate, on the
#     default shapes and the edge shapes, non-causal and causal;
#  4. PyTorch SDPA on the same shapes in the same run, and the comparison.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}
mkdir -p "$OUT"
export EVO_CACHE_DIR=/tmp/evo-cache
EVO=.gpu/evo
if [ "${SKIP_SELFTEST:-0}" = 1 ]; then echo "== selftest skipped (SKIP_SELFTEST=1)"; else
  echo "== selftest"; $EVO selftest 2>&1 | tee "$OUT/selftest.txt"; echo "selftest exit ${PIPESTATUS[0]}"; fi
echo "== planted attention suite"
$EVO check tests/planted/sdpa/*.cu --problem sdpa_fwd -c tests/planted/sdpa/check.toml 2>&1 | tee "$OUT/planted_sdpa.txt"
echo "planted exit ${PIPESTATUS[0]}"
for cfg in sdpa sdpa_causal; do
  if [ "$cfg" = sdpa_causal ] && [ "$SECONDS" -gt "${CAUSAL_AFTER_S:-330}" ]; then
    echo "== skipping the causal configuration: ${SECONDS}s used of the call"; break
  fi
  echo "== evo eval --cover, configs/$cfg.toml"
  $EVO space -c configs/$cfg.toml | tail -n 30 > "/tmp/space_$cfg.txt"
  $EVO --json eval -c configs/$cfg.toml --cover > "/tmp/eval_$cfg.json" 2> "/tmp/eval_$cfg.err"
  echo "eval exit $?"; tail -n 5 "/tmp/eval_$cfg.err"
  python3 scripts/torch_sdpa_baseline.py configs/$cfg.toml --out "/tmp/torch_$cfg.json" 2>&1 | tee "/tmp/torch_$cfg.txt"
done
pairs="/tmp/eval_sdpa.json /tmp/torch_sdpa.json"
[ -f /tmp/torch_sdpa_causal.json ] && pairs="$pairs /tmp/eval_sdpa_causal.json /tmp/torch_sdpa_causal.json"
python3 bench/sdpa_table.py $pairs 2>&1 | tee "$OUT/sdpa_table.txt"
cat /tmp/torch_sdpa*.txt > "$OUT/torch.txt"
(cd /tmp && tar czf "$OUT/raw.tgz" eval_sdpa*.json torch_sdpa*.json eval_sdpa*.err space_sdpa*.txt 2>/dev/null)
echo "total ${SECONDS}s"
