"""Scores the reward benchmark's batch in plain Python, the way the peers (VLM-R1 and friends) do it.

IoU and weighted_sum are written here from VLM-R1's formulas (greedy matching as its `detection_score`,
label mismatch recording IoU 0); per-sample AP / AP50 use pycocotools' COCOeval on one image, built
in memory per sample with every prediction scored 1.0, as VLM-R1's od_ap does. Parsing is part of
each reward, as in the peers: the last <answer> block, then the ```json fence, then json.loads.

Prints one JSON object: seconds per reward over the whole batch and every value (for cross-checks).
Usage: python rewards_python.py BATCH.jsonl
"""

import contextlib
import io
import json
import re
import sys
import time

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FENCE = re.compile(r"```json\s*(.*?)```", re.DOTALL)


def parse(completion):
    answers = ANSWER.findall(completion)
    text = answers[-1] if answers else completion
    fence = FENCE.search(text)
    try:
        items = json.loads(fence.group(1) if fence else text)
    except (ValueError, AttributeError):
        return None
    return [(item["bbox_2d"], item.get("label", "")) for item in items]


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = w * h if w > 0 and h > 0 else 0.0
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def iou_reward(sample):
    preds = parse(sample["completion"])
    if not preds:
        return 0.0
    return max(iou(preds[0][0], g["bbox"]) for g in sample["target"]["boxes"])


def weighted_sum_reward(sample):
    preds = parse(sample["completion"])
    gt = [(g["bbox"], g["label"]) for g in sample["target"]["boxes"]]
    if preds is None or not preds:
        return 0.0
    pairs = sorted(((iou(p[0], g[0]), gi, pi) for gi, g in enumerate(gt) for pi, p in enumerate(preds)),
                   key=lambda t: -t[0])
    used_g, used_p, ious = set(), set(), []
    for value, gi, pi in pairs:
        if value < 0.5:
            break
        if gi in used_g or pi in used_p:
            continue
        used_g.add(gi)
        used_p.add(pi)
        same = gt[gi][1].lower() == preds[pi][1].lower()
        ious.append(value if same else 0.0)
    position = sum(ious) / len(gt)
    miss = (len(gt) - len(used_g)) / len(gt)
    false_alarm = (len(preds) - len(used_p)) / len(preds)
    completeness = 1.0 - (miss + false_alarm) / 2.0
    return 0.7 * position + 0.3 * completeness


def ap_rewards(sample):
    """(AP, AP50) of one sample with pycocotools, categories numbered by first GT appearance."""
    preds = parse(sample["completion"]) or []
    categories = {}
    for g in sample["target"]["boxes"]:
        categories.setdefault(g["label"], len(categories) + 1)
    images = [{"id": 1}]
    annotations = []
    for i, g in enumerate(sample["target"]["boxes"]):
        x1, y1, x2, y2 = g["bbox"]
        annotations.append({"id": i + 1, "image_id": 1, "category_id": categories[g["label"]],
                            "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                            "iscrowd": 0})
    results = []
    for box, label in preds:
        if label in categories:
            x1, y1, x2, y2 = box
            results.append({"image_id": 1, "category_id": categories[label],
                            "bbox": [x1, y1, x2 - x1, y2 - y1], "score": 1.0})
    if not results:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations,
                      "categories": [{"id": c} for c in categories.values()]}
        gt.createIndex()
        dt = gt.loadRes(results)
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return max(ev.stats[0], 0.0), max(ev.stats[1], 0.0)


def timed(fn, batch):
    start = time.perf_counter()
    values = [fn(s) for s in batch]
    return time.perf_counter() - start, values


def main():
    with open(sys.argv[1]) as f:
        batch = [json.loads(line) for line in f]
    out = {"samples": len(batch)}
    for name, fn in [("iou", iou_reward), ("weighted_sum", weighted_sum_reward), ("ap", ap_rewards)]:
        seconds, values = timed(fn, batch)
        out[name] = {"seconds": seconds, "values": values}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
