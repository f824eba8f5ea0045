"""Prints table.md of this folder: the CPU study's GRPO arm with the shaped click reward (this run)
against the click reward alone (2026-11-30-cpu-study-detection-and-answer-places-epyc-2core), over
the same supervised baselines: each set's gain per seed in both runs and the paired difference with
a 95% t interval over the three seeds. Run from this folder: python3 table.py"""
import json
import lzma
import statistics

T975_2 = 4.303  # Student's t, two-sided 95%, 2 degrees of freedom
CLICK_ONLY = "../2026-11-30-cpu-study-detection-and-answer-places-epyc-2core/summary.json.xz"


def by_set(path):
    """Each set's (supervised, RL) accuracy per seed, in points."""
    sets = {}
    for seed in json.load(lzma.open(path))["seeds"]:
        for r in seed["study"]["sets"]:
            sets.setdefault(r["set"], []).append((100 * r["sft"], 100 * r["rl"]))
    return sets


def interval(values):
    mean = statistics.mean(values)
    half = T975_2 * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:+.1f} ({mean - half:+.1f} to {mean + half:+.1f})"


click, shaped = by_set(CLICK_ONLY), by_set("summary.json.xz")
print("| set | baseline (both runs) | GRPO, click reward: gain per seed | GRPO, click + Gaussian: gain per seed "
      "| shaped minus click, per seed | mean (95% t interval) |")
print("|---|---|---|---|---|---|")
for name, rows in shaped.items():
    assert [s for s, _ in rows] == [s for s, _ in click[name]], f"{name}: the baselines differ"
    gains = lambda rs: [r - s for s, r in rs]
    diff = [b - a for a, b in zip(gains(click[name]), gains(rows))]
    print(f"| {name} | {statistics.mean(s for s, _ in rows):.1f}% | "
          f"{', '.join(f'{g:+.1f}' for g in gains(click[name]))} | {', '.join(f'{g:+.1f}' for g in gains(rows))} | "
          f"{', '.join(f'{d:+.1f}' for d in diff)} | {interval(diff)} |")
