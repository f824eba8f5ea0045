"""Generates random COCO cases, evaluates each with pycocotools and with `groundrl eval coco --json`,
and compares the 12 stats. Called by scripts/parity/coco.sh."""

import argparse
import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

KEYS = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
TOLERANCE = 1e-12


def random_box(rng):
    """A box whose size spans the area ranges: tiny (< 32^2), medium, large, huge."""
    side = rng.choice([lambda: rng.uniform(0.5, 20), lambda: rng.uniform(25, 90), lambda: rng.uniform(90, 1500)])
    w, h = side(), side()
    if rng.random() < 0.3:  # integer boxes make exact IoU ties and exact area bounds likely
        w, h = float(max(1, round(w))), float(max(1, round(h)))
        return [float(rng.randrange(0, 600)), float(rng.randrange(0, 600)), w, h]
    return [rng.uniform(0, 600), rng.uniform(0, 600), w, h]


def jitter(rng, box, amount):
    x, y, w, h = box
    return [x + rng.gauss(0, amount * w), y + rng.gauss(0, amount * h),
            max(0.0, w * (1 + rng.gauss(0, amount))), max(0.0, h * (1 + rng.gauss(0, amount)))]


def make_case(rng, index):
    """One random ground truth and results list."""
    big = index % 10 == 9
    n_images = rng.randint(30, 80) if big else rng.randint(1, 25)
    n_categories = rng.randint(1, 7)
    image_ids = rng.sample(range(1, 10_000), n_images)
    category_ids = rng.sample(range(1, 100), n_categories)
    # Some categories get no ground truth, some no detections.
    gt_categories = [c for c in category_ids if rng.random() < 0.85] or category_ids[:1]
    dt_categories = [c for c in category_ids if rng.random() < 0.85] or category_ids[:1]
    crowd_rate = rng.choice([0.0, 0.1, 0.3])
    score_decimals = rng.choice([1, 2, None])  # few decimals: many tied scores
    annotations, detections = [], []
    for image_id in image_ids:
        kind = rng.random()
        n_gt = 0 if kind < 0.15 else rng.randint(1, 8)
        n_dt = 0 if kind < 0.1 or (0.15 <= kind < 0.2) else rng.randint(1, 12)
        if big and rng.random() < 0.3:
            n_dt = rng.randint(101, 180)  # beyond maxDets=100
        gts = []
        for _ in range(n_gt):
            box = random_box(rng)
            area = box[2] * box[3] * (rng.uniform(0.4, 1.0) if rng.random() < 0.3 else 1.0)
            gts.append(box)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": rng.choice(gt_categories), "bbox": box, "area": area,
                                "iscrowd": int(rng.random() < crowd_rate)})
        for _ in range(n_dt):
            if gts and rng.random() < 0.6:
                box = jitter(rng, rng.choice(gts), rng.choice([0.0, 0.02, 0.1, 0.3]))
            else:
                box = random_box(rng)
            if rng.random() < 0.02:
                box[2] = 0.0  # a zero-width detection
            score = rng.random()
            if score_decimals is not None:
                score = round(score, score_decimals)
            detections.append({"image_id": image_id, "category_id": rng.choice(dt_categories),
                               "bbox": box, "score": score})
    if index % 7 == 3 and annotations:
        annotations[0]["id"] = 0  # pycocotools reads a match to annotation id 0 as no match
    rng.shuffle(annotations)
    if not detections:  # pycocotools cannot load an empty results list
        detections.append({"image_id": image_ids[0], "category_id": category_ids[0],
                           "bbox": [1.0, 1.0, 5.0, 5.0], "score": 0.5})
    gt = {"images": [{"id": i} for i in image_ids],
          "categories": [{"id": c, "name": f"c{c}"} for c in category_ids],
          "annotations": annotations}
    return gt, detections


def pycocotools_stats(gt_path, dt_path):
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(str(gt_path))
        coco_dt = coco_gt.loadRes(str(dt_path))
        e = COCOeval(coco_gt, coco_dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return [float(s) for s in e.stats]


def groundrl_stats(binary, gt_path, dt_path):
    out = subprocess.run([binary, "eval", "coco", "--gt", str(gt_path), "--dt", str(dt_path), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {out.stderr.strip()}")
    stats = json.loads(out.stdout)
    return [stats[k] for k in KEYS]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--seed", type=int, default=20251121)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    passed = failed = identical = compared = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.cases):
            gt, dt = make_case(rng, index)
            gt_path, dt_path = Path(tmp, f"gt{index}.json"), Path(tmp, f"dt{index}.json")
            gt_path.write_text(json.dumps(gt))
            dt_path.write_text(json.dumps(dt))
            expected = pycocotools_stats(gt_path, dt_path)
            try:
                ours = groundrl_stats(args.bin, gt_path, dt_path)
            except RuntimeError as err:
                print(f"case {index}: groundrl failed: {err}")
                failed += 1
                continue
            bad = [(k, o, e) for k, o, e in zip(KEYS, ours, expected) if not abs(o - e) <= TOLERANCE]
            for key, o, e in bad:
                print(f"case {index} (seed {args.seed}): {key}: groundrl {o!r}, pycocotools {e!r}")
            identical += sum(o == e for o, e in zip(ours, expected))
            compared += len(KEYS)
            failed += bool(bad)
            passed += not bad
    print(f"bit-identical stats: {identical} of {compared}")
    print(f"coco parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
