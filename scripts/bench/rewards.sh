#!/usr/bin/env bash
# Rewards per second, groundrl against the same batch scored in Python the way the peers do it.
#
# 1. writes a seeded batch of 10,000 detection samples (rewards_batch.py);
# 2. scores it in plain Python (IoU, weighted_sum) and with pycocotools (per-sample AP), timing each
#    over the whole batch (rewards_python.py, in the reference environment of scripts/python-env.sh);
# 3. scores it with `groundrl reward` and checks that every value equals Python's (to 1e-9);
# 4. times groundrl's score_batch with criterion (benches/rewards.rs), on all cores and on one thread;
# 5. prints a table with the ratios.
# Usage: scripts/bench/rewards.sh [N=10000]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
n=${1:-10000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
specs=$PWD/scripts/bench/reward-specs

py=$(scripts/python-env.sh)
python3 scripts/bench/rewards_batch.py "$n" 7 "$work/batch.jsonl"
echo "rewards bench: scoring $n samples in Python (pycocotools AP takes a while)" >&2
"$py" scripts/bench/rewards_python.py "$work/batch.jsonl" > "$work/python.json"

cargo build --quiet --release -p groundrl
for r in iou weighted_sum ap; do
  target/release/groundrl reward --spec "$specs/$r.toml" --input "$work/batch.jsonl" \
    --output "$work/rust-$r.jsonl" 2>/dev/null
done

GROUNDRL_REWARD_BATCH=$work/batch.jsonl GROUNDRL_REWARD_SPECS=$specs \
  cargo bench --quiet -p groundrl-score --bench rewards -- --noplot >&2

python3 - "$work" "$n" <<'PY'
import json, sys, pathlib
work, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
python = json.loads((work / "python.json").read_text())
crit = pathlib.Path("target/criterion/rewards")
def seconds(name):
    est = json.loads((crit / name / "new" / "estimates.json").read_text())
    return est["mean"]["point_estimate"] / 1e9
print(f"{'reward':<14}{'python s':>10}{'groundrl 1 thread s':>21}{'groundrl all cores s':>22}{'ratio 1 thread':>16}{'ratio all':>11}{'max |diff|':>12}")
for r in ["iou", "weighted_sum", "ap"]:
    py_values = [v[0] if isinstance(v, list) else v for v in python[r]["values"]]
    rust_values = [json.loads(l)["rewards"][r] for l in (work / f"rust-{r}.jsonl").read_text().splitlines()]
    assert len(rust_values) == len(py_values), (r, len(rust_values), len(py_values))
    diff = max(abs(a - b) for a, b in zip(py_values, rust_values))
    py_s, one, alln = python[r]["seconds"], seconds(f"{r}_one_thread"), seconds(f"{r}_all_cores")
    print(f"{r:<14}{py_s:>10.3f}{one:>21.4f}{alln:>22.4f}{py_s / one:>15.1f}x{py_s / alln:>10.1f}x{diff:>12.1e}")
    if diff > 1e-9:
        sys.exit(f"{r}: groundrl and Python disagree by {diff}")
print(f"({n} samples; times are for the whole batch, completion parsing included, file loading excluded)")
PY
