#!/usr/bin/env bash
# What a refactor must leave unchanged, on the CPU: a replayed search with the evo binary BIN
# (configs/sdpa_replay.toml on tests/data/landscape_sdpa_fwd_mma_h200.json, 8 generations; a
# second run with --json; a resume), then the output of every read command (runs, elites,
# stats, show, lineage, diff: tables and --json), the report, export-landscape, two refusals,
# `--help` of every command, space and render, and the database, all under OUT.
#   bench/replay_snapshot.sh OLD/evo /tmp/before; bench/replay_snapshot.sh NEW/evo /tmp/after
#   bench/replay_compare.py /tmp/before /tmp/after
# Run both binaries on the same tree: the stored config text is compared too.
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2")
rm -rf "$OUT"; mkdir -p "$OUT"
DB=$OUT/db.sqlite
cd "$(dirname "$0")/.."
run() { local name=$1; shift; "$BIN" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo $? >"$OUT/$name.rc"; }
run search search -c configs/sdpa_replay.toml --evaluator replay:tests/data/landscape_sdpa_fwd_mma_h200.json --db "$DB" --run r --budget 8gen --no-progress
run search_json --json search -c configs/sdpa_replay.toml --evaluator replay:tests/data/landscape_sdpa_fwd_mma_h200.json --db "$OUT/db2.sqlite" --run r --budget 4gen --no-progress
run resume search --resume r --db "$DB" --budget 9gen --no-progress
run runs runs --db "$DB"
run runs_json --json runs --db "$DB"
run elites elites r --db "$DB" --top 20
run elites_json --json elites r --db "$DB" --top 20
run stats stats r --db "$DB"
run stats_json --json stats r --db "$DB"
BEST=$("$BIN" --json elites r --db "$DB" --top 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["id"] if isinstance(d,list) else d["elites"][0]["id"])')
echo "$BEST" >"$OUT/best_id"
run show show "$BEST" --db "$DB"
run show_json --json show "$BEST" --db "$DB"
run show_source show "$BEST" --db "$DB" --source
run show_5 show 5 --db "$DB"
run show_5_json --json show 5 --db "$DB"
run lineage lineage "$BEST" --db "$DB"
run lineage_json --json lineage "$BEST" --db "$DB"
run diff diff 3 "$BEST" --db "$DB"
run diff_json --json diff 3 "$BEST" --db "$DB"
run report report r --db "$DB" --out "$OUT/report.html"
run landscape export-landscape r --db "$DB" --out "$OUT/landscape.json"
run export export r --db "$DB" --out "$OUT/artifact"
run missing elites --db "$OUT/nope.db"
run help --help
for c in search join runs elites show lineage diff stats report baseline export export-landscape verify eval check selftest profile space render compile doctor search-quality; do run help_$c $c --help; done
run space space -c configs/sdpa_replay.toml
run render render -c configs/gemm.toml -g BLOCK_K=32,BLOCK_M=64,BLOCK_N=64,STAGES=2,SWIZZLE=xor,WARPS_M=2,WARPS_N=2
cp "$DB" "$OUT/db.copy"
