#!/usr/bin/env bash
# Issue 20's evidence: evaluations per hour of a search with every gate, and where the time
# went (`evo stats`' stage table). From the repo root with .gpu/ carried; logs under $OUT.
#   bash bench/gpu/throughput.sh CONFIG BUDGET [NAME]
# The search uses the evolution strategy (appended when the config names none), so runs of
# different evaluators compare the evaluator, not the strategy.
set -uo pipefail
cfg=$1; budget=$2; name=${3:-$(basename "$cfg" .toml)}
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"
EVO=${EVO:-.gpu/evo}
dir=/tmp/tp_$name; rm -rf "$dir"; mkdir -p "$dir"
# A compile cache of its own: on a machine kept warm, a shared one held the cubins of the
# previous run's genomes (the strategy proposes many of them again) and hid compile time.
export EVO_CACHE_DIR=$dir/cache
cp "$cfg" "$dir/config.toml"
# A baseline imported from a file beside the config becomes PyTorch measured at the start
# (what that file holds, measured here).
sed -i 's/^baseline = "import:.*"/baseline = "torch"/' "$dir/config.toml"
grep -q '^\[search\]' "$dir/config.toml" || printf '\n[search]\nstrategy = "evolution"\n' >> "$dir/config.toml"
echo "== $name: $budget search of $cfg ($(date +%T))"
(cd "$dir" && RUST_LOG=info "$OLDPWD/$EVO" --templates "$OLDPWD/templates" search -c config.toml --db p.db --run tp --budget "$budget" --no-progress) \
  > "$OUT/throughput_$name.txt" 2>&1
echo "exit $?"; grep -iE "evaluations here|busy" "$OUT/throughput_$name.txt" | tail -n 3
"$EVO" stats tp --db "$dir/p.db" > "$OUT/throughput_${name}_stats.txt" 2>&1
grep -E "regressed|per hour|busy" "$OUT/throughput_${name}_stats.txt" | cut -c1-200 | head -n 8
sed -n '/stage (last/,/compile runs/p' "$OUT/throughput_${name}_stats.txt"
cp "$dir/p.db" "$OUT/throughput_$name.db"
