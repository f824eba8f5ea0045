"""Times COCO bbox evaluation tools on one synthetic COCO-sized set, in one run, and prints tables.
Called by scripts/bench/coco.sh, which builds groundrl's timing binary, the wheel and the environment.

For each Python tool with pycocotools' API, one timed run is the whole user sequence: `COCO(gt_path)`,
`loadRes(results)`, `COCOeval(gt, dt, "bbox")`, `evaluate()`, `accumulate()`, `summarize()`, with the
results given four ways: the results file's path, a list of dicts, an Nx7 array
(`[image_id, x, y, w, h, score, category_id]`), and the path again with `params.imgIds` narrowed to the
first half of the images (2,500). The list and the array are built before the clock starts (a fresh list each run,
since pycocotools adds fields to the caller's dicts). Inside the same run, evaluate + accumulate +
summarize is timed on its own: that is the "evaluation alone" table.

The fast tools run in alternating rounds (every tool and variant once per round), so that load from
other processes falls on all of them alike; the tables show the best round and the median. pycocotools
runs once per variant (about a minute and a half each on the full set). Each run's 12 stats are compared
with pycocotools' bit for bit, and so are `eval["precision"]`, `eval["recall"]` and `eval["scores"]`
where the tool exposes them. A tool that raises on a variant is listed with the exception's type.

groundrl's Rust library (`evaluate` on records already in memory, through groundrl-score's bench
binary) and the `groundrl eval coco` command (process start and JSON loading included) are timed too.
"""

import argparse
import contextlib
import gc
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
VARIANTS = ["path", "list", "array", "subset"]
VARIANT_TITLES = {"path": "path", "list": "list", "array": "Nx7 array", "subset": "path, half the images"}


def generate(directory, n_images=N_IMAGES, seed=0):
    """COCO-like set: 1-10 ground-truth boxes per image (1% crowd), 100 detections per image (jittered
    copies of the ground truth plus random boxes, random categories), scores rounded to 3 decimals so
    that ties occur."""
    rng = random.Random(seed)
    annotations, detections = [], []
    for image_id in range(1, n_images + 1):
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
    gt = {"images": [{"id": i} for i in range(1, n_images + 1)],
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
    """One timed run: the whole sequence and the evaluation alone (seconds), the 12 stats, and the
    eval arrays the tool exposes; or the exception it raised."""

    def __init__(self, whole=None, evaluation=None, stats=None, arrays=None, error=None):
        self.whole, self.evaluation, self.error = whole, evaluation, error
        self.stats = None if stats is None else [float(s) for s in stats]
        self.arrays = arrays or {}


class Inputs:
    """The set's files, and the results as a list of dicts and as an Nx7 array."""

    def __init__(self, gt_path, dt_path):
        self.gt_path, self.dt_path = gt_path, dt_path
        self.text = Path(dt_path).read_text()
        records = json.loads(self.text)
        self.array = np.array([[r["image_id"], *r["bbox"], r["score"], r["category_id"]] for r in records])
        self.image_ids = sorted({r["image_id"] for r in records})

    def results(self, variant):
        """What loadRes gets; made before the clock starts."""
        if variant == "list":
            return json.loads(self.text)
        if variant == "array":
            return self.array.copy()
        return str(self.dt_path)


class PycocotoolsLike:
    """A tool with pycocotools' API: `COCO(path)`, `loadRes(...)`, `COCOeval(gt, dt, "bbox")`."""

    def __init__(self, label, distribution, module, coco="COCO", cocoeval="COCOeval", eval_module=None):
        self.label, self.distribution = label, distribution
        self.module_name, self.eval_module_name = module, eval_module or module
        self.coco_name, self.eval_name = coco, cocoeval

    def version(self):
        return importlib.metadata.version(self.distribution)

    def prepare(self):
        self.coco = getattr(importlib.import_module(self.module_name), self.coco_name)
        self.cocoeval = getattr(importlib.import_module(self.eval_module_name), self.eval_name)

    def run(self, inputs, variant):
        results = inputs.results(variant)
        gc.collect()
        try:
            with quiet():
                start = time.perf_counter()
                gt = self.coco(str(inputs.gt_path))
                dt = gt.loadRes(results)
                e = self.cocoeval(gt, dt, "bbox")
                if variant == "subset":
                    e.params.imgIds = inputs.image_ids[: len(inputs.image_ids) // 2]
                evaluation_start = time.perf_counter()
                e.evaluate()
                e.accumulate()
                e.summarize()
                end = time.perf_counter()
        except Exception as error:  # a peer that cannot take this input: reported, not fatal
            return Result(error=f"{type(error).__name__}")
        return Result(end - start, end - evaluation_start, e.stats, arrays_of(e))


def arrays_of(evaluator):
    """`eval["precision"]`, `["recall"]`, `["scores"]` as numpy arrays, those the tool has."""
    out = {}
    for key in ("precision", "recall", "scores"):
        try:
            out[key] = np.asarray(evaluator.eval[key])
        except (AttributeError, KeyError, TypeError):
            pass
    return out


class GroundrlBinary:
    """A groundrl binary, labelled with the commit it was built from."""

    def __init__(self, binary, commit):
        self.binary, self.commit = binary, commit

    def version(self):
        return self.commit

    def prepare(self):
        pass


class GroundrlLibrary(GroundrlBinary):
    """groundrl-score's `evaluate` (checks, grouping, matching, accumulation, summary) on records
    already loaded, timed inside a Rust binary: one process per round, its first call timed."""

    label = "groundrl-score library (Rust)"
    variants = ["path"]

    def run(self, inputs, variant):
        env = dict(os.environ, COCO_BENCH_GT=str(inputs.gt_path), COCO_BENCH_DT=str(inputs.dt_path),
                   COCO_BENCH_RUNS="1")
        out = subprocess.run([self.binary], env=env, capture_output=True, text=True, check=True)
        line = json.loads(out.stdout.strip().splitlines()[-1])
        return Result(None, line["seconds"][0], line["stats"])


class GroundrlCommand(GroundrlBinary):
    """`groundrl eval coco --json` as a whole: process start and JSON loading included."""

    label = "groundrl eval coco (command)"
    variants = ["path"]

    def run(self, inputs, variant):
        argv = [self.binary, "eval", "coco", "--gt", str(inputs.gt_path), "--dt", str(inputs.dt_path), "--json"]
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
        stats = json.loads(out.stdout)
        keys = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
        return Result(seconds, None, [stats[k] for k in keys])


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


def check(result, reference):
    """(stats equal, arrays equal) against pycocotools: "yes", "NO", or "n/a" for arrays not exposed."""
    if result.error or reference.error:
        return "-", "-"
    stats = "yes" if result.stats == reference.stats else "NO"
    shared = [k for k in result.arrays if k in reference.arrays]
    if not shared:
        return stats, "n/a"
    same = all(result.arrays[k].shape == reference.arrays[k].shape and np.array_equal(result.arrays[k], reference.arrays[k])
               for k in shared)
    return stats, ("yes" if same else "NO") + f" ({'/'.join(shared)})"


def cell(results, key):
    """`best (median)` of the runs' `key` seconds, or why there is none."""
    if not results:
        return "not run"
    errors = {r.error for r in results if r.error}
    if errors:
        return "fails: " + ", ".join(sorted(errors))
    times = [getattr(r, key) for r in results]
    if any(t is None for t in times):
        return "n/a"
    best, median = min(times), statistics.median(times)
    return f"{best:.3f}" if len(times) == 1 else f"{best:.3f} ({median:.3f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib-bin", help="groundrl-score's coco bench binary (optional)")
    parser.add_argument("--cli-bin", help="the groundrl binary (optional)")
    parser.add_argument("--commit", default="working tree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir")
    parser.add_argument("--images", type=int, default=N_IMAGES, help="a smaller set, for a quick try")
    parser.add_argument("--reference-variants", default=",".join(VARIANTS),
                        help="the variants pycocotools runs (each takes minutes); the others are checked "
                             "against its `path` run, which evaluates the same detections")
    args = parser.parse_args()

    reference = PycocotoolsLike("pycocotools", "pycocotools", "pycocotools.coco", eval_module="pycocotools.cocoeval")
    fast = [
        PycocotoolsLike("faster-coco-eval", "faster-coco-eval", "faster_coco_eval", cocoeval="COCOeval_faster"),
        PycocotoolsLike("hotcoco", "hotcoco", "hotcoco"),
        PycocotoolsLike("ultrafast-pycocotools", "ultrafast-pycocotools", "ultrafast_pycocotools"),
    ]
    missing = []
    for tool in list(fast):
        if not importable(tool.module_name):
            fast.remove(tool)
            missing.append(f"{tool.label}: not installed")
    if importable("groundrl.coco"):
        fast.append(PycocotoolsLike("groundrl wheel (groundrl.coco)", "groundrl", "groundrl.coco"))
    else:
        missing.append("groundrl wheel (groundrl.coco): not installed")
    if args.lib_bin:
        fast.append(GroundrlLibrary(args.lib_bin, args.commit))
    else:
        missing.append("groundrl-score library (Rust): not built")
    if args.cli_bin:
        fast.append(GroundrlCommand(args.cli_bin, args.commit))
    else:
        missing.append("groundrl eval coco (command): not built")

    loads = [load_average()]
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or tmp
        os.makedirs(directory, exist_ok=True)
        inputs = Inputs(*generate(directory, args.images))
        print(f"set: {args.images} images, {N_CATEGORIES} categories, {args.images * DETS_PER_IMAGE} detections; "
              f"the subset: the first {args.images // 2} images")
        print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}, "
              f"numpy {np.__version__}")
        reference.prepare()
        ref, ref_runs = {}, {v: [] for v in VARIANTS}
        for variant in args.reference_variants.split(","):
            ref[variant] = reference.run(inputs, variant)
            ref_runs[variant].append(ref[variant])
            loads.append(load_average())
            print(f"pycocotools {variant} done, load {loads[-1]:.2f}", flush=True)
        for variant in VARIANTS:
            ref.setdefault(variant, ref["path"])
        runs = {(tool.label, v): [] for tool in fast for v in VARIANTS}
        for tool in fast:
            tool.prepare()
        for round_ in range(args.rounds):
            for tool in fast:
                for variant in getattr(tool, "variants", VARIANTS):
                    result = tool.run(inputs, variant)
                    result.check = check(result, ref[variant])
                    result.arrays = {}  # compared; not kept
                    runs[(tool.label, variant)].append(result)
            loads.append(load_average())
            print(f"round {round_ + 1}/{args.rounds} done, load {loads[-1]:.2f}", flush=True)

    tools = [(reference, ref_runs)] + [
        (t, {v: runs[(t.label, v)] for v in VARIANTS}) for t in fast]
    width = 32
    print()
    print("Whole user sequence: COCO(gt) + loadRes(results) + COCOeval + evaluate + accumulate + summarize,")
    print("seconds, best (median) of the rounds; pycocotools one run")
    print(f"{'tool':<{width}} {'version':<9} " + " ".join(f"{VARIANT_TITLES[v]:>22}" for v in VARIANTS))
    for tool, by_variant in tools:
        print(f"{tool.label:<{width}} {tool.version():<9} "
              + " ".join(f"{cell(by_variant[v], 'whole'):>22}" for v in VARIANTS))
    print()
    print("Evaluation alone: evaluate + accumulate + summarize (inside the same runs), seconds")
    print(f"{'tool':<{width}} {'version':<9} " + " ".join(f"{VARIANT_TITLES[v]:>22}" for v in ("path", "subset")))
    for tool, by_variant in tools:
        print(f"{tool.label:<{width}} {tool.version():<9} "
              + " ".join(f"{cell(by_variant[v], 'evaluation'):>22}" for v in ("path", "subset")))
    print()
    print("Against pycocotools 2.0.11: 12 stats bit for bit; eval arrays np.array_equal (those exposed)")
    unrun = [VARIANT_TITLES[v] for v in VARIANTS if not ref_runs[v]]
    if unrun:
        print(f"(pycocotools was not run on: {', '.join(unrun)}; those rows are checked against its path run)")
    all_same = True
    for tool, by_variant in tools[1:]:
        for v in VARIANTS:
            results = by_variant[v]
            if not results:
                continue
            checks = {r.check for r in results}
            stats = "yes" if all(c[0] == "yes" for c in checks) else "/".join(sorted({c[0] for c in checks}))
            arrays = "/".join(sorted({c[1] for c in checks}))
            if tool.label.startswith("groundrl"):
                all_same &= stats == "yes" and "NO" not in arrays
            print(f"{tool.label:<{width}} {VARIANT_TITLES[v]:<22} stats {stats:<4} arrays {arrays}")
            gaps = [max(abs(a - b) for a, b in zip(r.stats, ref[v].stats)) for r in results
                    if r.stats is not None and ref[v].stats is not None]
            if gaps and max(gaps) > 0:
                print(f"{'':<{width}} largest difference from pycocotools' stats {max(gaps):.3g}")
    for line in missing:
        print(line)
    print()
    print(f"fast tools: {args.rounds} alternating rounds; pycocotools: one run per variant")
    print(f"load average (1 min) before, after each pycocotools run and each round: "
          f"{', '.join(f'{x:.2f}' for x in loads)}")
    if max(loads) > 0.5:
        print(f"the machine was NOT idle: other processes ran during the benchmark (load up to "
              f"{max(loads):.2f} on {os.cpu_count()} CPUs); times are under that load")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
