"""The wheel's rewards equal the same rules written in Python (scripts/bench/rewards_python.py, the
VLM-R1 way: IoU, weighted_sum, and per-sample AP through pycocotools) on a seeded batch."""

import random
import sys
import threading
import time

import pytest
from conftest import REWARD_SPECS

import groundrl

N = 400


@pytest.fixture(scope="module")
def batch():
    import rewards_batch  # scripts/bench: the batch generator the benchmark uses

    rng = random.Random(7)
    return [rewards_batch.sample(rng, i) for i in range(N)]


@pytest.mark.parametrize("reward", ["iou", "weighted_sum", "ap"])
def test_equal_to_python(batch, reward):
    import rewards_python

    rule = {"iou": rewards_python.iou_reward, "weighted_sum": rewards_python.weighted_sum_reward,
            "ap": rewards_python.ap_rewards}[reward]
    spec = groundrl.RewardSpec.from_toml(REWARD_SPECS / f"{reward}.toml")
    ours = spec.score([s["completion"] for s in batch], [s["target"] for s in batch]).total
    expected = [v[0] if isinstance(v, (list, tuple)) else v for v in (rule(s) for s in batch)]
    assert max(abs(a - b) for a, b in zip(ours.tolist(), expected)) <= 1e-9


def ticks_during(call):
    """How often another Python thread ran during `call`. The switch interval is raised to 10 s so that
    the thread runs only when the caller gives the GIL up by itself; it yields after each tick."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(10)
    ticks, done = [], threading.Event()

    def spin():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0)

    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        time.sleep(0.02)
        start = time.perf_counter()
        call()
        end = time.perf_counter()
    finally:
        done.set()
        spinner.join()
        sys.setswitchinterval(old)
    return sum(start < t < end for t in ticks)


def test_scoring_releases_the_gil(batch):
    spec = groundrl.RewardSpec.from_toml(REWARD_SPECS / "ap.toml")
    completions, targets = [s["completion"] for s in batch] * 10, [s["target"] for s in batch] * 10
    assert ticks_during(lambda: sum(range(3 * 10**7))) < 5  # C code that keeps the GIL: the control
    assert ticks_during(lambda: spec._native.score(completions, targets)) > 50
