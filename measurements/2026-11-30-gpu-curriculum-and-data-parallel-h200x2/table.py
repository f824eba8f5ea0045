"""Prints table.md of this folder: each arm's seeds (held-out accuracy before and after GRPO, the gain
with its paired 95% interval, GRPO steps) and each arm's final accuracy against the plain demo's,
seed by seed, with a 95% t interval over the seeds. Run from this folder: python3 table.py"""
import json
import lzma
import re
import statistics

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}  # Student's t, two-sided 95%


def read(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return f.read()


SEED_LINE = re.compile(r"^seed (\d+): held-out accuracy ([\d.]+)% -> ([\d.]+)% .* gain ([+-][\d.]+) points "
                       r"\(95% interval ([+-][\d.]+) to ([+-][\d.]+)\)", re.M)


def seeds(arm):
    """Each seed's line of the demo's output (the data-parallel demo stopped before its summary: its
    seed 2 ran again in a call of its own), and its GRPO steps from its step records."""
    text = read(f"{arm}-output.txt" + (".xz" if arm == "dp" else ""))
    if arm == "dp":
        text += read("dp-seed-2-output.txt.xz")
    rows = {}
    for m in SEED_LINE.finditer(text):
        seed = int(m[1])
        lines = read(f"{arm}-metrics-seed-{seed}.jsonl.xz").splitlines()
        rows[seed] = {"before": float(m[2]), "after": float(m[3]), "gain": [float(m[i]) for i in (4, 5, 6)],
                      "steps": json.loads(lines[-1])["step"]}
    return rows


def t_interval(values):
    mean = statistics.mean(values)
    half = T975[len(values) - 1] * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:+.1f} ({mean - half:+.1f} to {mean + half:+.1f})"


arms = {"plain": "1 GPU, 200 steps on fresh tasks", "curriculum": "1 GPU, 2 rounds, the second on the ledger's pool",
        "dp": "2 GPUs, data-parallel"}
data = {arm: seeds(arm) for arm in arms}
print("| arm | seed | held-out before | after | gain (95% paired interval) | GRPO steps |")
print("|---|---|---|---|---|---|")
for arm, what in arms.items():
    for s, r in sorted(data[arm].items()):
        g = r["gain"]
        print(f"| {arm} ({what}) | {s} | {r['before']:.1f}% | {r['after']:.1f}% | "
              f"{g[0]:+.1f} ({g[1]:+.1f} to {g[2]:+.1f}) | {r['steps']} |")
print()
print("| arm | mean before | mean after | mean gain (95% t interval) | final accuracy minus plain's, per seed | mean (95% t interval) |")
print("|---|---|---|---|---|---|")
for arm in arms:
    rows = [data[arm][s] for s in sorted(data[arm])]
    gains = [r["gain"][0] for r in rows]
    diff = [data[arm][s]["after"] - data["plain"][s]["after"] for s in sorted(data[arm])]
    print(f"| {arm} | {statistics.mean(r['before'] for r in rows):.1f}% | "
          f"{statistics.mean(r['after'] for r in rows):.1f}% | {t_interval(gains)} | "
          + ("-" if arm == "plain" else ", ".join(f"{d:+.1f}" for d in diff))
          + f" | {'-' if arm == 'plain' else t_interval(diff)} |")
