"""Prints the table of a study (scripts/study/run.sh): per variant, each seed's held-out accuracy
before and after GRPO, its gain, and the mean gain over seeds with Student's t 95% interval.

Usage: python3 scripts/study/table.py OUT [--markdown]
Reads OUT/<variant>.s<seed>/summary.json, as `groundrl demo` writes it."""
import json
import math
import pathlib
import statistics
import sys

# Student's t 97.5% quantiles by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def main():
    out = pathlib.Path(sys.argv[1])
    markdown = "--markdown" in sys.argv
    variants = {}
    for path in sorted(out.glob("*.s*/summary.json")):
        name = path.parent.name.rsplit(".s", 1)[0]
        variants.setdefault(name, []).extend(json.loads(path.read_text())["seeds"])
    head = ("variant", "seeds", "held-out tasks", "mean gain (points)", "95% t interval",
            "every gain > 0", "reward curves held", "per seed: before -> after (pass@k before)", "minutes per seed")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    for name, seeds in variants.items():
        seeds.sort(key=lambda s: s["seed"])
        gains = [100 * s["gain"]["value"] for s in seeds]
        mean = statistics.mean(gains)
        if len(gains) > 1:
            half = T975[len(gains) - 1] * statistics.stdev(gains) / math.sqrt(len(gains))
            interval = f"{mean - half:+.1f} to {mean + half:+.1f}"
        else:
            interval = "-"
        held = sum(bool(s["reward_curve"] and s["reward_curve"]["holds"]) for s in seeds)
        cells = []
        for s in seeds:
            pk = s.get("pass_at_k_before")
            pk = f" (pass@{pk[0]} {100 * pk[1]:.1f}%)" if pk else ""
            cells.append(f"{s['seed']}: {100 * s['before']:.1f}% -> {100 * s['after']:.1f}%{pk}")
        minutes = "-".join(f"{m:.1f}" for m in (min(s["minutes"] for s in seeds), max(s["minutes"] for s in seeds)))
        row = (name, str(len(seeds)), str(seeds[0]["test_tasks"]), f"{mean:+.1f}", interval,
               "yes" if min(gains) > 0 else "no", f"{held}/{len(seeds)}", "; ".join(cells), minutes)
        if markdown:
            print("| " + " | ".join(row) + " |")
        else:
            print(f"{row[0]:<22} n={row[1]} gain {row[3]:>6} [{row[4]}] all>0 {row[5]:<3} held {row[6]}  {row[7]}  {row[8]} min")


if __name__ == "__main__":
    main()
