#!/usr/bin/env bash
# Split-KV (issue 8) on a GPU machine, about 3 minutes: the covering set of each split-KV family
# (every value of every knob, KV_SPLITS 2/4/8 included) through every gate on its config's shapes
# (few heads x short query sequences x long KV: where one CTA per (query block, head) leaves most
# SMs idle) plus the edge shapes, timed non-causal, then causal correctness only; and the unsplit
# family's covering set on the same shapes, timed, for the comparison.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
export EVO_CACHE_DIR=$PWD/.evo-cache
EVO=$PWD/.gpu/evo
for fam in wgmma mma; do
  cfg=configs/sdpa_${fam}_splitkv.toml
  echo "== evo eval --cover $cfg (timed)"
  timeout 150 $EVO eval -c $cfg --cover 2>&1 | tee "$OUT/eval_${fam}_splitkv.txt"; echo "exit ${PIPESTATUS[0]}"
  sed 's/^CAUSAL = false/CAUSAL = true/' $cfg > /tmp/${fam}_splitkv_causal.toml
  echo "== evo eval --cover --no-timing, causal"
  timeout 100 $EVO eval -c /tmp/${fam}_splitkv_causal.toml --templates templates --cover --no-timing 2>&1 | tee "$OUT/eval_${fam}_splitkv_causal.txt"; echo "exit ${PIPESTATUS[0]}"
  sed "s/^family = \"sdpa_fwd_${fam}_splitkv\"/family = \"sdpa_fwd_${fam}\"/" $cfg > /tmp/${fam}_unsplit.toml
  echo "== the unsplit family on the same shapes (timed)"
  timeout 100 $EVO eval -c /tmp/${fam}_unsplit.toml --templates templates --cover 2>&1 | tee "$OUT/eval_${fam}_unsplit.txt"; echo "exit ${PIPESTATUS[0]}"
done
echo "total ${SECONDS}s"
