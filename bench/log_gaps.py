"""Where a search's GPU time went, from its log (`RUST_LOG=info evo search ...`, as
bench/gpu/throughput.sh writes it): evaluations (`evaluated job=... elapsed_ms=`),
sanitizer runs (`... seconds=`) and the idle gaps between them, from the first
evaluation's start to the last's end; then every gap over 0.5 s and the jobs per minute.

    python3 bench/log_gaps.py throughput_NAME.txt
"""
import collections
import datetime
import re
import sys

events = []  # (start, end, what)
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"(\S+)Z\s+INFO (.*)", line)
    if not m:
        continue
    end = datetime.datetime.fromisoformat(m.group(1)).timestamp()
    msg = m.group(2)
    if msg.startswith("evaluated job="):
        ms = float(re.search(r"elapsed_ms=([\d.]+)", msg).group(1))
        job = re.search(r"job=(\d+)", msg).group(1)
        events.append((end - ms / 1e3, end, f"job {job}"))
    elif "sanitizer-clean" in msg or "sanitizer gate rejects" in msg:
        s = float(re.search(r"seconds=([\d.]+)", msg).group(1))
        events.append((end - s, end, "sanitizer"))
if not events:
    sys.exit(f"{sys.argv[1]}: no `evaluated job=` lines (was the search run with RUST_LOG=info?)")
events.sort()
wall = events[-1][1] - events[0][0]
jobs = sum(b - a for a, b, w in events if w != "sanitizer")
sanitizer = [b - a for a, b, w in events if w == "sanitizer"]
gaps = [(events[i + 1][0] - events[i][1], i) for i in range(len(events) - 1)]
idle = sum(g for g, _ in gaps if g > 0)
print(f"first evaluation's start to last's end: {wall:.1f} s = evaluations {jobs:.1f} s "
      f"({100 * jobs / wall:.1f}%) + sanitizer {sum(sanitizer):.1f} s ({len(sanitizer)} runs) "
      f"+ idle {idle:.1f} s")
t0 = events[0][0]
for g, i in gaps:
    if g > 0.5:
        print(f"  at {events[i][1] - t0:6.1f} s: idle {g:.2f} s after {events[i][2]}, "
              f"before {events[i + 1][2]}")
per_minute = collections.Counter(int((b - t0) // 60) for _, b, w in events if w != "sanitizer")
print("jobs ended per minute:", ", ".join(f"{m}: {n}" for m, n in sorted(per_minute.items())))
