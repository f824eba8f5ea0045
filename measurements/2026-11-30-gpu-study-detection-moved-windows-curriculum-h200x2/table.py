"""Prints table.md of this folder:
1. the study over both of its GPU runs (this one and 2026-11-30-gpu-study-rate-drops-h200x2, the same
   command but for the detection set, new here): each set's gain per seed in each run, and the mean
   over the six seeds with a 95% t interval;
2. the study with the window anywhere (`--window anywhere`), each set's mean over its three seeds;
3. the curriculum (two rounds of 100 GRPO steps) against the plain demo (200 steps), seed by seed.
Run from this folder: python3 table.py"""
import json
import lzma
import re
import statistics

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student's t, two-sided 95%
EARLIER = "../2026-11-30-gpu-study-rate-drops-h200x2/study-summary.json.xz"


def read(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return f.read()


def t_interval(values):
    mean = statistics.mean(values)
    half = T975[len(values) - 1] * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:+.1f} ({mean - half:+.1f} to {mean + half:+.1f})"


def by_set(summary_path):
    """Each set's (supervised, RL, gain) per seed, in points."""
    sets = {}
    for seed in json.loads(read(summary_path))["seeds"]:
        for r in seed["study"]["sets"]:
            sets.setdefault(r["set"], []).append((100 * r["sft"], 100 * r["rl"], 100 * r["gain"]["value"]))
    return sets


def study_tables():
    earlier, now = by_set(EARLIER), by_set("study-summary.json.xz")
    print("| set | earlier run: gain per seed | this run: gain per seed | mean over the seeds (95% t interval) "
          "| every seed above 0 |")
    print("|---|---|---|---|---|")
    for name, rows in now.items():
        gains = [g for _, _, g in earlier.get(name, [])] + [g for _, _, g in rows]
        per = lambda rs: ", ".join(f"{g:+.1f}" for _, _, g in rs) or "-"
        print(f"| {name} | {per(earlier.get(name, []))} | {per(rows)} | {t_interval(gains)} "
              f"| {'yes' if all(g > 0 for g in gains) else 'no'} |")
    print()
    moved = by_set("moved-summary.json.xz")
    print("| set, window anywhere | supervised | RL | gain per seed | mean (95% t interval) |")
    print("|---|---|---|---|---|")
    for name, rows in moved.items():
        print(f"| {name} | {statistics.mean(s for s, _, _ in rows):.1f}% | {statistics.mean(r for _, r, _ in rows):.1f}% "
              f"| {', '.join(f'{g:+.1f}' for _, _, g in rows)} | {t_interval([g for _, _, g in rows])} |")


SEED_LINE = re.compile(r"^seed (\d+): held-out accuracy ([\d.]+)% -> ([\d.]+)% .* gain ([+-][\d.]+) points "
                       r"\(95% interval ([+-][\d.]+) to ([+-][\d.]+)\)", re.M)


def seeds(arm):
    """Each seed's line of the demo's output and its GRPO steps from its step records."""
    rows = {}
    for m in SEED_LINE.finditer(read(f"{arm}-output.txt")):
        seed = int(m[1])
        lines = read(f"{arm}-metrics-seed-{seed}.jsonl.xz").splitlines()
        rows[seed] = {"before": float(m[2]), "after": float(m[3]), "gain": [float(m[i]) for i in (4, 5, 6)],
                      "steps": json.loads(lines[-1])["step"]}
    return rows


def curriculum_table():
    data = {arm: seeds(arm) for arm in ("plain", "curriculum")}
    print("| arm | seed | held-out before | after | gain (95% paired interval) | GRPO steps |")
    print("|---|---|---|---|---|---|")
    for arm, rows in data.items():
        for s, r in sorted(rows.items()):
            g = r["gain"]
            print(f"| {arm} | {s} | {r['before']:.1f}% | {r['after']:.1f}% | {g[0]:+.1f} ({g[1]:+.1f} to {g[2]:+.1f}) "
                  f"| {r['steps']} |")
    print()
    print("| arm | mean before | mean after | mean gain (95% t interval) | final accuracy minus plain's, per seed "
          "| mean (95% t interval) |")
    print("|---|---|---|---|---|---|")
    for arm, rows in data.items():
        ordered = [rows[s] for s in sorted(rows)]
        diff = [rows[s]["after"] - data["plain"][s]["after"] for s in sorted(rows)]
        print(f"| {arm} | {statistics.mean(r['before'] for r in ordered):.1f}% | "
              f"{statistics.mean(r['after'] for r in ordered):.1f}% | {t_interval([r['gain'][0] for r in ordered])} | "
              + ("-" if arm == "plain" else ", ".join(f"{d:+.1f}" for d in diff))
              + f" | {'-' if arm == 'plain' else t_interval(diff)} |")


study_tables()
print()
curriculum_table()
