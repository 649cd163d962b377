"""Summary of a run in a population database, with Python's sqlite3 only (for GPU
machines without evo's CLI tools for it): statuses, generations, best fitness, and the
search state each generation recorded (evaluations per hour, GPU busy fraction).

Usage: python3 bench/run_summary.py population.db RUN
"""
import json, sqlite3, sys

db, run = sys.argv[1], sys.argv[2]
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rid, status, evaluator = c.execute("select id, status, evaluator from runs where name = ?", (run,)).fetchone()
print(f"run {run}: {status}, evaluator {evaluator}")
for s, n in c.execute("select coalesce(status, 'pending'), count(*) from candidates where run_id = ? group by 1 order by 2 desc", (rid,)):
    print(f"  {s:<16} {n}")
print("generation  evaluated  best fitness  evals/hour  GPU busy")
for g, ev, best, state in c.execute("select generation, evaluated, best_fitness, state from generations where run_id = ? order by generation", (rid,)):
    st = json.loads(state)
    print(f"{g:>10} {ev:>10} {best or 0:>13.4f} {st.get('evaluations_per_hour', 0):>11.0f} {100 * st.get('gpu_busy_fraction', 0):>8.0f}%")
row = c.execute("select genome, hash, fitness from candidates where run_id = ? and status in ('evaluated', 'regressed') and fitness is not null order by fitness desc limit 3", (rid,)).fetchall()
for genome, h, f in row:
    print(f"  best {f:.4f}x  {h}  {genome}")
for shape, us in c.execute("select shape, median_us from baselines where run_id = ?", (rid,)):
    print(f"  baseline {us:9.2f} us  {shape}")
if row:
    cid = c.execute("select id from candidates where run_id = ? and hash = ?", (rid, row[0][1])).fetchone()[0]
    for shape, us, tf in c.execute("select shape, median_us, tflops from measurements where candidate_id = ? and median_us is not null", (cid,)):
        print(f"  best  {us:9.2f} us  {tf or 0:7.1f} TFLOP/s  {shape}")
