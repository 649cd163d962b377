#!/usr/bin/env python3
"""replay_compare.py A B: every output of bench/replay_snapshot.sh in A against B, byte for
byte after masking only what differs between two runs of one binary: timestamps, durations,
rates and host ids (MASKS), the report's wall-time chart, the database's time columns
(DB_MASK_COLS), and the output folder's path. Exit 1 when anything else differs."""
import os, re, sqlite3, sys, difflib

MASKS = [
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?", "<TIME>"),                 # timestamps
    (r'"(eval_ms|wall_hours|evaluations_per_hour|last_invocation_evaluations_per_hour|evaluation_hours|db_ms|elapsed_s|seconds)": [0-9.e+-]+', r'"\1": <N>'),
    (r"\d+ evaluations here in [0-9.]+ min \(\d+/hour\)", lambda m: re.sub(r"in [0-9.]+ min \(\d+/hour\)", "in <N> min (<N>/hour)", m.group(0))),
    (r"database: [0-9.]+ ms per evaluation \([0-9.]+ s in all", "database: <N> ms per evaluation (<N> s in all"),
    (r"[a-z0-9.-]+:\d+:[0-9a-f]{4}\b", "<HOST>"),                              # host ids (hostname:pid:random)
    (r'"(evaluations_per_hour|wall_s)":[0-9.e+-]+', r'"\1":<N>'),                 # rates inside stored JSON
    (r'<figure id="chart-fitness-time">.*?</figure>', '<figure id="chart-fitness-time">(masked: wall-clock axis)</figure>'),
    (r"<td>\d+ over the run, \d+ in the last invocation</td>", "<td><N> over the run, <N> in the last invocation</td>"),
    (r"evaluations per hour: \d+ over the run \([0-9.]+ h from the first proposal to the last result\), \d+ in the last invocation",
     "evaluations per hour: <N> over the run (<N> h from the first proposal to the last result), <N> in the last invocation"),
]

def norm_text(s, root):
    s = s.replace(root, "<OUT>")
    for pat, rep in MASKS:
        s = re.sub(pat, rep, s, flags=re.S)
    return s

# database columns that hold times or durations (masked by value) — everything else compared
DB_MASK_COLS = {"eval_ms", "started_at", "finished_at", "created_at", "evaluated_at", "lease_until",
                "heartbeat_at", "db_ms", "wall_ms", "busy_ms", "last_seen", "pid", "claimed_at",
                "registered_at", "updated_at", "gpu_busy", "busy", "heartbeat_ms", "installed_on", "execution_time"}

def dump_db(path, root):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = []
    for (t,) in con.execute("select name from sqlite_master where type='table' order by name"):
        if t.startswith("_sqlx"):
            continue
        cur = con.execute(f"select * from {t} order by rowid")
        cols = [d[0] for d in cur.description]
        out.append(f"## {t} {cols}")
        for row in cur:
            vals = ["<M>" if c in DB_MASK_COLS and v is not None else v for c, v in zip(cols, row)]
            out.append(norm_text(repr(vals), root))
    return "\n".join(out)

def main(a, b):
    a, b = os.path.abspath(a), os.path.abspath(b)
    bad = 0
    names = sorted(set(os.listdir(a)) | set(os.listdir(b)))
    for n in names:
        pa, pb = os.path.join(a, n), os.path.join(b, n)
        if os.path.isdir(pa) or os.path.isdir(pb) or n.endswith(("-wal", "-shm")):
            continue
        if not (os.path.exists(pa) and os.path.exists(pb)):
            print(f"ONLY ONE SIDE: {n}"); bad += 1; continue
        if n.endswith((".sqlite", ".copy")):
            ta, tb = dump_db(pa, a), dump_db(pb, b)
        else:
            ta = norm_text(open(pa, encoding="utf-8", errors="replace").read(), a)
            tb = norm_text(open(pb, encoding="utf-8", errors="replace").read(), b)
        if ta != tb:
            bad += 1
            print(f"DIFFERS: {n}")
            for l in list(difflib.unified_diff(ta.splitlines(), tb.splitlines(), lineterm="", n=1))[:20]:
                print("   ", l[:200])
    log_a = os.path.join(a, "evo-logs/r.log"); log_b = os.path.join(b, "evo-logs/r.log")
    la = [norm_text(l, a) for l in open(log_a)]; lb = [norm_text(l, b) for l in open(log_b)]
    if la != lb:
        bad += 1; print("DIFFERS: evo-logs/r.log")
    print(f"{len(names)} entries compared, {bad} differ")
    return bad

if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1], sys.argv[2]) else 0)
