#!/usr/bin/env bash
# Issue 20: where the sanitizer gate's seconds go. One sdpa_fwd_mma variant on its
# sanitizer shape: the plain `evo run-once` (compile cache cold, then warm), each
# compute-sanitizer tool alone, the three at once (what the gate runs per
# specialization), and twelve at once (three tools x four specializations).
# From the repo root with .gpu/ carried; logs under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
EVO=${EVO:-$PWD/.gpu/evo}
export EVO_CACHE_DIR=/tmp/evo-sancache; rm -rf "$EVO_CACHE_DIR"
G=${GENOME:-BLOCK_M=64,BLOCK_N=64,EPILOGUE=direct,NUM_WARPS=4,PRODUCER_WARPS=2,Q_IN_REGS=true,STAGES=3,SWIZZLE=xor,WARP_SPEC=on}
S=${SHAPE:-BATCH=1,HEADS=2,SEQ_Q=77,SEQ_KV=130,HEAD_DIM=64,DTYPE=f16,CAUSAL=false}
log=$OUT/sanitizer_cost.txt
"$EVO" --templates templates profile -c configs/sdpa.toml -g "$G" --shape "$S" --tools memcheck > "$log" 2>&1
src=$(ls -t /tmp/evo-profile-*.cu | head -n1); plan=${src%.cu}.plan.json
shape=$(grep -o 'on [^ ]*' "$log" | head -n1 | cut -c4-)
run=("$EVO" run-once --problem sdpa_fwd --source "$src" --shape "$shape" --plan "$plan")
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f s", b - a }'; }
t() { local s=$EPOCHREALTIME; "$@" > /dev/null 2>&1; local rc=$?; echo "$(since "$s") rc=$rc"; }
{
  echo "variant $src on $shape"
  rm -rf "$EVO_CACHE_DIR"
  echo "run-once, cache cold: $(t "${run[@]}")"
  echo "run-once, cache warm: $(t "${run[@]}")"
  echo "run-once, warm again: $(t "${run[@]}")"
  for tool in memcheck racecheck synccheck; do
    echo "$tool alone: $(t compute-sanitizer --tool $tool "${run[@]}")"
  done
  s=$EPOCHREALTIME
  for tool in memcheck racecheck synccheck; do compute-sanitizer --tool $tool "${run[@]}" > /dev/null 2>&1 & done; wait
  echo "three at once: $(since "$s")"
  s=$EPOCHREALTIME
  for i in 1 2 3 4; do for tool in memcheck racecheck synccheck; do compute-sanitizer --tool $tool "${run[@]}" > /dev/null 2>&1 & done; done; wait
  echo "twelve at once: $(since "$s")"
  echo "memcheck, lazy loading off: $(CUDA_MODULE_LOADING=EAGER t compute-sanitizer --tool memcheck "${run[@]}")"
  echo "cuda context alone (python): $(t python3 -c 'import ctypes; c=ctypes.CDLL("libcuda.so.1"); c.cuInit(0); d=ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d),0); x=ctypes.c_void_p(); c.cuCtxCreate_v2(ctypes.byref(x),0,d)')"
} >> "$log" 2>&1
cat "$log"
