"""Times COCO bbox evaluation tools on one synthetic COCO-sized set, in one run, and prints one table.
Called by scripts/bench/coco.sh, which builds groundrl's timing binary and the Python environment.

Every time is evaluate + accumulate + summarize with loading excluded (JSON reading, building the index
and the evaluator object happen before the clock starts). The fast tools run in alternating rounds (one
run of each per round), so that load from other processes on a shared machine falls on all of them
alike; the table shows the best and the median round. pycocotools runs once (it takes about a minute).
Each tool's 12 stats are compared with pycocotools' bit for bit, and so are the precision and recall
arrays (`eval["precision"]`, `eval["recall"]`) where the tool exposes them.
"""

import argparse
import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_IMAGES, N_CATEGORIES, DETS_PER_IMAGE = 5000, 80, 100


def generate(directory, seed=0):
    """COCO-like set: 1-10 ground-truth boxes per image (1% crowd), 100 detections per image (jittered
    copies of the ground truth plus random boxes, random categories), scores rounded to 3 decimals so
    that ties occur."""
    rng = random.Random(seed)
    annotations, detections = [], []
    for image_id in range(1, N_IMAGES + 1):
        gts = []
        for _ in range(rng.randint(1, 10)):
            w, h = rng.uniform(4, 400), rng.uniform(4, 400)
            box = [rng.uniform(0, 600), rng.uniform(0, 400), w, h]
            category = rng.randint(1, N_CATEGORIES)
            gts.append((box, category))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "bbox": box, "area": w * h, "iscrowd": int(rng.random() < 0.01)})
        for _ in range(DETS_PER_IMAGE):
            if rng.random() < 0.3:
                (x, y, w, h), category = rng.choice(gts)
                box = [x + rng.gauss(0, 0.05 * w), y + rng.gauss(0, 0.05 * h), w * rng.uniform(0.8, 1.2),
                       h * rng.uniform(0.8, 1.2)]
            else:
                box = [rng.uniform(0, 600), rng.uniform(0, 400), rng.uniform(4, 300), rng.uniform(4, 300)]
                category = rng.randint(1, N_CATEGORIES)
            detections.append({"image_id": image_id, "category_id": category, "bbox": box,
                               "score": round(rng.random(), 3)})
    gt = {"images": [{"id": i} for i in range(1, N_IMAGES + 1)],
          "categories": [{"id": c, "name": f"c{c}"} for c in range(1, N_CATEGORIES + 1)],
          "annotations": annotations}
    gt_path, dt_path = Path(directory, "gt.json"), Path(directory, "dt.json")
    gt_path.write_text(json.dumps(gt))
    dt_path.write_text(json.dumps(detections))
    return gt_path, dt_path


@contextlib.contextmanager
def quiet():
    """Silences stdout at the file-descriptor level: some tools print their summary from native code."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


class Result:
    """One timed run: seconds, the 12 stats, and the precision/recall arrays if the tool exposes them."""

    def __init__(self, seconds, stats, arrays=None):
        self.seconds, self.stats, self.arrays = seconds, [float(s) for s in stats], arrays


class PycocotoolsLike:
    """A tool with pycocotools' API: `COCO(path)`, `loadRes(path)`, `COCOeval(gt, dt, "bbox")`."""

    def __init__(self, label, distribution, module, coco="COCO", cocoeval="COCOeval", eval_module=None):
        self.label, self.distribution = label, distribution
        self.module_name, self.eval_module_name = module, eval_module or module
        self.coco_name, self.eval_name = coco, cocoeval
        self.loaded = None

    def version(self):
        return importlib.metadata.version(self.distribution)

    def load(self, gt_path, dt_path):
        coco = getattr(importlib.import_module(self.module_name), self.coco_name)
        cocoeval = getattr(importlib.import_module(self.eval_module_name), self.eval_name)
        with quiet():
            gt = coco(str(gt_path))
            dt = gt.loadRes(str(dt_path))
        self.loaded = (cocoeval, gt, dt)

    def run(self):
        cocoeval, gt, dt = self.loaded
        with quiet():
            e = cocoeval(gt, dt, "bbox")
            start = time.perf_counter()
            e.evaluate()
            e.accumulate()
            e.summarize()
            seconds = time.perf_counter() - start
        return Result(seconds, e.stats, arrays_of(e))


def arrays_of(evaluator):
    """`eval["precision"]` and `eval["recall"]` as numpy arrays, or None if the tool has no such dict."""
    try:
        return np.asarray(evaluator.eval["precision"]), np.asarray(evaluator.eval["recall"])
    except (AttributeError, KeyError, TypeError):
        return None


class GroundrlBinary:
    """A groundrl binary, labelled with the commit it was built from."""

    def __init__(self, binary, commit):
        self.binary, self.commit = binary, commit

    def version(self):
        return self.commit


class GroundrlLibrary(GroundrlBinary):
    """groundrl's library `evaluate` (checks, grouping, matching, accumulation, summary), timed inside a
    Rust binary: one process per round, its first and only call timed (thread pool start included)."""

    label = "groundrl library (Rust)"

    def load(self, gt_path, dt_path):
        self.env = dict(os.environ, COCO_BENCH_GT=str(gt_path), COCO_BENCH_DT=str(dt_path), COCO_BENCH_RUNS="1")

    def run(self):
        out = subprocess.run([self.binary], env=self.env, capture_output=True, text=True, check=True)
        line = json.loads(out.stdout.strip().splitlines()[-1])
        return Result(line["seconds"][0], line["stats"])


class GroundrlCommand(GroundrlBinary):
    """`groundrl eval coco --json` as a whole: process start and JSON loading included."""

    label = "groundrl eval coco (whole command)"

    def load(self, gt_path, dt_path):
        self.argv = [self.binary, "eval", "coco", "--gt", str(gt_path), "--dt", str(dt_path), "--json"]

    def run(self):
        start = time.perf_counter()
        out = subprocess.run(self.argv, capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
        stats = json.loads(out.stdout)
        keys = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
        return Result(seconds, [stats[k] for k in keys])


def importable(module):
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def load_average():
    return os.getloadavg()[0]


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def row_checks(result, reference):
    stats = "yes" if result.stats == reference.stats else "NO"
    if result.arrays is None or reference.arrays is None:
        arrays = "n/a"
    else:
        same = all(np.array_equal(a, b) for a, b in zip(result.arrays, reference.arrays))
        arrays = "yes" if same else "NO"
    return stats, arrays


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib-bin", required=True, help="groundrl-score's coco bench binary")
    parser.add_argument("--cli-bin", help="the groundrl binary (optional)")
    parser.add_argument("--commit", default="working tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir")
    args = parser.parse_args()

    reference = PycocotoolsLike("pycocotools", "pycocotools", "pycocotools.coco", eval_module="pycocotools.cocoeval")
    fast = [
        PycocotoolsLike("faster-coco-eval", "faster-coco-eval", "faster_coco_eval", cocoeval="COCOeval_faster"),
        PycocotoolsLike("hotcoco", "hotcoco", "hotcoco"),
        PycocotoolsLike("ultrafast-pycocotools", "ultrafast-pycocotools", "ultrafast_pycocotools"),
        GroundrlLibrary(args.lib_bin, args.commit),
    ]
    missing = []
    if importable("groundrl.coco"):
        fast.append(PycocotoolsLike("groundrl wheel (groundrl.coco)", "groundrl", "groundrl.coco"))
    else:
        missing.append("groundrl wheel (groundrl.coco): not installed")
    if args.cli_bin:
        fast.append(GroundrlCommand(args.cli_bin, args.commit))
    else:
        missing.append("groundrl eval coco (whole command): not built")

    loads = [load_average()]
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or tmp
        os.makedirs(directory, exist_ok=True)
        gt_path, dt_path = generate(directory)
        print(f"set: {N_IMAGES} images, {N_CATEGORIES} categories, {N_IMAGES * DETS_PER_IMAGE} detections")
        print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}")
        runs = {tool.label: [] for tool in fast}
        for tool in fast:
            tool.load(gt_path, dt_path)
        for round_ in range(args.rounds):
            for tool in fast:
                runs[tool.label].append(tool.run())
            loads.append(load_average())
            print(f"round {round_ + 1}/{args.rounds} done, load {loads[-1]:.2f}", flush=True)
        fast_sets = [(t, runs[t.label]) for t in fast]
        reference.load(gt_path, dt_path)
        ref = reference.run()
        loads.append(load_average())

    print()
    print(f"{'tool':<36} {'version':<10} {'best s':>8} {'median s':>9} {'x faster':>9} "
          f"{'12 stats =':>10} {'pr/rc =':>8}")
    print(f"{reference.label:<36} {reference.version():<10} {ref.seconds:>8.3f} {ref.seconds:>9.3f} "
          f"{'1.0':>9} {'(ref)':>10} {'(ref)':>8}")
    all_same = True
    for tool, results in fast_sets:
        times = [r.seconds for r in results]
        best, median = min(times), statistics.median(times)
        checks = [row_checks(r, ref) for r in results]
        stats = "yes" if all(c[0] == "yes" for c in checks) else "NO"
        arrays = checks[0][1] if all(c[1] == checks[0][1] for c in checks) else "NO"
        # A peer's difference is reported in the table; only groundrl's fails the run.
        if tool.label.startswith("groundrl"):
            all_same &= stats == "yes" and arrays != "NO"
        print(f"{tool.label:<36} {tool.version():<10} {best:>8.3f} {median:>9.3f} "
              f"{ref.seconds / best:>9.1f} {stats:>10} {arrays:>8}")
    for line in missing:
        print(line)
    for tool, results in fast_sets:
        gap = max(abs(a - b) for r in results for a, b in zip(r.stats, ref.stats))
        if gap > 0:
            print(f"{tool.label}: largest difference from pycocotools' stats {gap:.3g}")
    print()
    print(f"fast tools: best and median of {args.rounds} alternating rounds; pycocotools: one run")
    print(f"load average (1 min) before, after each round, after pycocotools: "
          f"{', '.join(f'{x:.2f}' for x in loads)}")
    if max(loads) > 0.5:
        print(f"the machine was NOT idle: other processes ran during the benchmark (load up to "
              f"{max(loads):.2f} on {os.cpu_count()} CPUs); times are under that load")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
