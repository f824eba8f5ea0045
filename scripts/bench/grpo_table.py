"""The table of scripts/bench/grpo-side-by-side.sh: groundrl's and TRL's GRPO steps, means over steps
2 and later (step 1 warms up), and TRL's time over groundrl's.

groundrl's rows are the run's metrics.jsonl (`time/step`, `time/rollout`, `time/update`,
`peak_memory_bytes`: device memory in use at the step's end, the caching allocator's reservation
plus the CUDA context); TRL's are the JSON lines of scripts/bench/grpo_trl.py, whose
`device_in_use_gib` is the same measure. A missing or empty file gives a row that says so.

Usage: python scripts/bench/grpo_table.py --groundrl same-rule=A.jsonl --groundrl varying=B.jsonl \
    --trl trl.jsonl
"""

import argparse
import json
from pathlib import Path

FIRST_STEP = 2
COLUMNS = ["step", "rollout", "update", "data", "in_use", "allocated", "equal_groups"]


def in_gib(count):
    """Bytes in GiB; `None` where the run recorded none (a CPU run)."""
    return None if count is None else count / 2**30


def groundrl_rows(path):
    rows = []
    for line in open(path):
        record = json.loads(line)
        train = record["train"]
        rows.append({"step_no": record["step"], "step": train["time/step"], "rollout": train["time/rollout"],
                     "update": train["time/update"], "in_use": in_gib(train.get("peak_memory_bytes")),
                     "equal_groups": record["rollout"]["zero_variance_group_share"]})
    return rows


def trl_rows(path, mode):
    rows = []
    for line in open(path):
        record = json.loads(line)
        if record.get("mode") != mode:
            continue
        rows.append({"step_no": record["step"], "step": record["time_step_s"], "rollout": record["time_rollout_s"],
                     "update": record["time_update_s"], "data": record["time_data_s"],
                     "in_use": record.get("device_in_use_gib"), "allocated": record.get("peak_allocated_gib"),
                     "equal_groups": record["zero_variance_group_share"]})
    return rows


def means(rows):
    """Means of each column over the steps from FIRST_STEP on, and those steps' numbers."""
    kept = [r for r in rows if r["step_no"] >= FIRST_STEP]
    result = {}
    for column in COLUMNS:
        values = [r[column] for r in kept if r.get(column) is not None]
        result[column] = sum(values) / len(values) if values else None
    return result, [r["step_no"] for r in kept]


def cell(value, digits=2):
    return "" if value is None else f"{value:.{digits}f}"


def ratio(trl, ours):
    return "" if trl is None or not ours else f"{trl / ours:.1f}x"


def table(groundrl, trl_path):
    lines = ["| framework | reward | steps | step (s) | rollout (s) | update (s) | data loading (s) | "
             "device memory in use (GiB) | peak allocated (GiB) | groups with equal rewards |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = ["| reward | TRL / groundrl: step | rollout | update |", "|---|---|---|---|"]
    for mode, path in groundrl.items():
        ours, ours_steps = means(groundrl_rows(path)) if Path(path).is_file() else ({}, [])
        theirs, their_steps = means(trl_rows(trl_path, mode)) if Path(trl_path).is_file() else ({}, [])
        for name, m, kept in [("groundrl", ours, ours_steps), ("TRL", theirs, their_steps)]:
            if not kept:
                lines.append(f"| {name} | {mode} | none measured | | | | | | | |")
                continue
            lines.append(f"| {name} | {mode} | {min(kept)}-{max(kept)} | {cell(m['step'])} | "
                         f"{cell(m['rollout'])} | {cell(m['update'])} | {cell(m['data'])} | {cell(m['in_use'], 1)} | "
                         f"{cell(m['allocated'], 1)} | {cell(m['equal_groups'])} |")
        ratios.append(f"| {mode} | {ratio(theirs.get('step'), ours.get('step'))} | "
                      f"{ratio(theirs.get('rollout'), ours.get('rollout'))} | "
                      f"{ratio(theirs.get('update'), ours.get('update'))} |")
    return "\n".join(lines + [""] + ratios)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groundrl", action="append", required=True, metavar="MODE=METRICS_JSONL")
    ap.add_argument("--trl", required=True, help="scripts/bench/grpo_trl.py's JSON lines")
    args = ap.parse_args()
    groundrl = {}
    for item in args.groundrl:
        mode, sep, path = item.partition("=")
        if not sep:
            ap.error(f"--groundrl {item!r}: expected MODE=PATH")
        groundrl[mode] = path
    print(table(groundrl, args.trl))


if __name__ == "__main__":
    main()
