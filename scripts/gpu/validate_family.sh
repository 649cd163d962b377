set -uo pipefail
OUT=${OUT:-/tmp/evo-out}; mkdir -p "$OUT"; export EVO_CACHE_DIR=/tmp/evo-cache
for cfg in sdpa sdpa_causal; do
  .gpu/evo --json eval -c configs/$cfg.toml --cover --no-timing > /tmp/v_$cfg.json 2>/tmp/v_$cfg.err; echo "$cfg cover exit $?"
  .gpu/evo --json eval -c configs/$cfg.toml --random 6 --seed 11 --no-timing > /tmp/r_$cfg.json 2>/tmp/r_$cfg.err; echo "$cfg random exit $?"
done
python3 - <<'PY' | tee "$OUT/validate.txt"
import json
for f in ["v_sdpa","r_sdpa","v_sdpa_causal","r_sdpa_causal"]:
    d = json.load(open(f"/tmp/{f}.json"))
    worst = 0
    for g in d:
        for v in g["verdicts"]:
            for s in (v.get("result") or {}).get("shapes", []):
                worst = max(worst, max(t["stats"]["rel_l2"] for t in s["trials"]))
    print(f, [ (g["hash"], [v["status"] for v in g["verdicts"]]) for g in d ], "worst rel L2", worst)
PY
