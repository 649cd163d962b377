#!/usr/bin/env bash
# Throughput of one run shared through PostgreSQL: 1, 2, 4 and 8 evo processes (one
# `evo search` that creates the run + N-1 `evo join`) on the replay evaluator, which
# answers instantly, so what is measured is the cost of sharing: claims, results,
# generation advances and polling. Prints, per N, evaluations per second (genomes of the
# run / span from its first proposal to its last result) and database time per
# evaluation (time the hosts spent in database calls / results they recorded).
#
#   bench/bench_pg.sh                       # starts PostgreSQL with install-postgres.sh
#   EVO_BENCH_PG_URL=postgres://... bench/bench_pg.sh
#   EVO_BENCH_WORKERS="1 2 4 8" EVO_BENCH_GENERATIONS=10 EVO_BENCH_POPULATION=64
#   EVO_BENCH_DELAY_MS=50     each replayed evaluation takes 50 ms (a stand-in for a GPU
#                             evaluation: shows how throughput scales with hosts)
#
# Runs from the repository root; uses target/release/evo if built, else target/debug/evo
# (EVO_BIN overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
URL="${EVO_BENCH_PG_URL:-$(scripts/install-postgres.sh | tail -n1)}"
WORKERS="${EVO_BENCH_WORKERS:-1 2 4 8}"
GENS="${EVO_BENCH_GENERATIONS:-10}"
POP="${EVO_BENCH_POPULATION:-64}"
DELAY="${EVO_BENCH_DELAY_MS:-0}"
BIN="${EVO_BIN:-}"
if [ -z "$BIN" ]; then
  if [ -x target/release/evo ]; then BIN=target/release/evo; else BIN=target/debug/evo; fi
fi
[ -x "$BIN" ] || { echo "no evo binary: cargo build -p evo-cli [--release]" >&2; exit 1; }
PSQL=(psql "$URL" -tAq -v ON_ERROR_STOP=1)
command -v psql >/dev/null || PSQL=("$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)/psql" "$URL" -tAq -v ON_ERROR_STOP=1)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The replay config with a larger population (so 8 hosts have work in every
# generation) and its baseline path made absolute.
sed -e "s#^population = .*#population = $POP#" \
    -e "s#import:\.\./#import:$PWD/#" configs/sdpa_replay.toml > "$WORK/bench.toml"
LAND="replay:$PWD/tests/data/landscape_sdpa_fwd_mma_h200.json"

echo "evo $("$BIN" --version 2>/dev/null | awk '{print $2}') ($BIN), $(nproc) CPU cores, PostgreSQL $("${PSQL[@]}" -c 'SHOW server_version')"
echo "population $POP, $GENS generations per run, replay evaluator, ${DELAY} ms per evaluation"
printf '%8s %10s %10s %14s %16s %12s\n' workers genomes span_s evals_per_s db_ms_per_eval advances
for n in $WORKERS; do
  run="bench-$n-$$-$(date +%s)"
  export EVO_REPLAY_DELAY_MS="$DELAY"
  "$BIN" search -c "$WORK/bench.toml" --run "$run" --db "$URL" --evaluator "$LAND" \
    --budget "${GENS}gen" --seed 1 --no-progress >"$WORK/$run-0.log" 2>&1 &
  pids=($!)
  # Joiners start once the run exists.
  for _ in $(seq 1 200); do
    [ "$("${PSQL[@]}" -c "SELECT count(*) FROM runs WHERE name = '$run'")" = 1 ] && break
    sleep 0.05
  done
  for i in $(seq 1 $((n - 1))); do
    "$BIN" join "$run" --db "$URL" --no-progress >"$WORK/$run-$i.log" 2>&1 &
    pids+=($!)
  done
  fail=0
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  if [ $fail = 1 ]; then cat "$WORK/$run"-*.log >&2; exit 1; fi
  "${PSQL[@]}" -F ' ' -c "
    WITH c AS (SELECT count(*) AS n, min(created_at) AS t0, max(evaluated_at) AS t1
               FROM candidates WHERE run_id = (SELECT id FROM runs WHERE name = '$run')),
         h AS (SELECT sum(db_ms) AS db, sum(evaluated) AS ev,
                      sum(CAST(stats::json->>'advanced' AS INTEGER)) AS adv
               FROM hosts WHERE run_id = (SELECT id FROM runs WHERE name = '$run'))
    SELECT c.n,
           EXTRACT(EPOCH FROM (CAST(c.t1 AS TIMESTAMPTZ) - CAST(c.t0 AS TIMESTAMPTZ))),
           h.db / GREATEST(h.ev, 1), h.adv FROM c, h" |
    while read -r genomes span db adv; do
      printf '%8s %10s %10.2f %14.1f %16.2f %12s\n' "$n" "$genomes" "$span" \
        "$(awk -v g="$genomes" -v s="$span" 'BEGIN { print g / s }')" "$db" "$adv"
    done
done
