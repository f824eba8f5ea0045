"""Per-sample cost of rewards through the Python wheel (`groundrl`) against the same rules written in
Python the way VLM-R1 writes them (rewards_python.py: IoU, weighted_sum, per-sample AP through
pycocotools), on the reward benchmark's seeded batch of detection samples (rewards_batch.py).

Each side starts from the same in-memory Python objects (completion strings and target dicts) and
returns one float per sample; parsing is part of every reward. The wheel is timed on all cores and,
in a child process with RAYON_NUM_THREADS=1, on one thread (best of 5 runs each; Python's rules run
once, they take long enough). Every wheel value must equal Python's to 1e-9. Prints one table.

Usage (in the reference environment with the wheel installed, as scripts/python-test.sh installs it):
    python scripts/bench/rewards_wheel.py [N=10000]
"""

import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rewards_batch  # noqa: E402
import rewards_python  # noqa: E402

import groundrl  # noqa: E402

REWARDS = {"iou": rewards_python.iou_reward, "weighted_sum": rewards_python.weighted_sum_reward, "ap": rewards_python.ap_rewards}
SPECS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reward-specs")
REPEATS = 5


def make_batch(n):
    rng = random.Random(7)
    return [rewards_batch.sample(rng, i) for i in range(n)]


def wheel_seconds(batch):
    """{reward: (best seconds over the batch, values)} through the wheel."""
    completions = [s["completion"] for s in batch]
    targets = [s["target"] for s in batch]
    out = {}
    for name in REWARDS:
        spec = groundrl.RewardSpec.from_toml(os.path.join(SPECS, f"{name}.toml"))
        best, values = float("inf"), None
        for _ in range(REPEATS):
            start = time.perf_counter()
            values = spec.score(completions, targets).total
            best = min(best, time.perf_counter() - start)
        out[name] = (best, values.tolist())
    return out


def one_thread_seconds(n):
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    child = subprocess.run([sys.executable, __file__, str(n), "--child"], env=env, check=True, capture_output=True, text=True)
    return json.loads(child.stdout)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    batch = make_batch(n)
    if "--child" in sys.argv:
        print(json.dumps({name: seconds for name, (seconds, _) in wheel_seconds(batch).items()}))
        return
    one = one_thread_seconds(n)
    wheel = wheel_seconds(batch)
    us = 1e6 / n
    print(f"{'reward':<14}{'Python us/sample':>18}{'wheel 1 thread':>16}{'wheel all cores':>17}{'x 1 thread':>12}{'x all':>9}{'max |diff|':>12}")
    for name, rule in REWARDS.items():
        start = time.perf_counter()
        expected = [v[0] if isinstance(v, tuple) else v for v in (rule(s) for s in batch)]
        py_s = time.perf_counter() - start
        all_s, values = wheel[name]
        diff = max(abs(a - b) for a, b in zip(values, expected))
        print(f"{name:<14}{py_s * us:>18.1f}{one[name] * us:>16.2f}{all_s * us:>17.2f}{py_s / one[name]:>11.0f}x{py_s / all_s:>8.0f}x{diff:>12.1e}")
        if diff > 1e-9:
            sys.exit(f"{name}: the wheel and Python disagree by {diff}")
    print(f"({n} detection samples from rewards_batch.py, seed 7; {os.cpu_count()} logical CPUs; "
          f"times per sample over the whole batch, parsing included)")


if __name__ == "__main__":
    main()
