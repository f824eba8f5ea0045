"""Generates the synthetic benchmark set, times pycocotools and groundrl on it, prints a table.
Called by scripts/bench/coco.sh."""

import argparse
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

N_IMAGES, N_CATEGORIES, DETS_PER_IMAGE = 5000, 80, 100


def generate(directory, seed=0):
    """COCO-like set: 1-10 ground-truth boxes per image, 100 detections per image (jittered copies of
    the ground truth plus random boxes, random categories)."""
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


def time_pycocotools(gt_path, dt_path):
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_path))
        coco_dt = coco_gt.loadRes(str(dt_path))
        e = COCOeval(coco_gt, coco_dt, "bbox")
        start = time.perf_counter()
        e.evaluate()
        e.accumulate()
        e.summarize()
        elapsed = time.perf_counter() - start
    return elapsed, [float(s) for s in e.stats]


def time_groundrl(binary, gt_path, dt_path):
    start = time.perf_counter()
    out = subprocess.run([binary, "eval", "coco", "--gt", str(gt_path), "--dt", str(dt_path), "--json", "--timing"],
                         capture_output=True, text=True, check=True)
    whole = time.perf_counter() - start
    evaluate = float(re.search(r"evaluate ([0-9.]+) s", out.stderr).group(1))
    keys = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
    stats = json.loads(out.stdout)
    return evaluate, whole, [stats[k] for k in keys]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or tmp
        os.makedirs(directory, exist_ok=True)
        gt_path, dt_path = generate(directory)
        print(f"set: {N_IMAGES} images, {N_CATEGORIES} categories, {N_IMAGES * DETS_PER_IMAGE} detections; "
              f"{os.cpu_count()} CPUs", flush=True)
        ours_eval, ours_whole, ours_stats = min(
            (time_groundrl(args.bin, gt_path, dt_path) for _ in range(3)), key=lambda r: r[0])
        theirs, their_stats = time_pycocotools(gt_path, dt_path)
    same = all(abs(a - b) <= 1e-12 for a, b in zip(ours_stats, their_stats))
    print(f"{'':<44} {'seconds':>9} {'speed-up':>9}")
    print(f"{'pycocotools evaluate+accumulate+summarize':<44} {theirs:>9.3f} {'1.0x':>9}")
    print(f"{'groundrl evaluate (loading excluded)':<44} {ours_eval:>9.3f} {theirs / ours_eval:>8.1f}x")
    print(f"{'groundrl whole command (loading included)':<44} {ours_whole:>9.3f} {theirs / ours_whole:>8.1f}x")
    print(f"stats agree to 1e-12: {same} (AP {ours_stats[0]!r} vs {their_stats[0]!r})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
