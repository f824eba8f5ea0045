"""Writes the reward benchmark's batch: N detection samples in `groundrl reward`'s input format.

Each sample has 1-8 ground-truth boxes (pixel frame, labels from a small vocabulary) and a completion
in the form Qwen2.5-VL detection prompts ask for: a think block, then a ```json fence with a list of
{"bbox_2d": [...], "label": ...} items whose boxes are jittered, dropped, duplicated or invented, so
that matching, label mismatches and false alarms all occur. Seeded: the same N and seed give the same
file.

Usage: python rewards_batch.py N SEED OUT.jsonl
"""

import json
import random
import sys

LABELS = ["person", "car", "dog", "chair", "button", "icon", "menu", "checkbox"]


def random_box(rng, width, height):
    w = rng.uniform(8, width / 3)
    h = rng.uniform(8, height / 3)
    x = rng.uniform(0, width - w)
    y = rng.uniform(0, height - h)
    return [round(x, 1), round(y, 1), round(x + w, 1), round(y + h, 1)]


def jitter(rng, box, scale):
    return [max(0.0, round(v + rng.gauss(0, scale), 1)) for v in box]


def sample(rng, index):
    width, height = rng.choice([(1280, 720), (1920, 1080), (640, 480)])
    gt = [{"bbox": random_box(rng, width, height), "label": rng.choice(LABELS)}
          for _ in range(rng.randint(1, 8))]
    preds = []
    for g in gt:
        roll = rng.random()
        if roll < 0.15:
            continue  # missed
        label = g["label"] if rng.random() < 0.85 else rng.choice(LABELS)
        preds.append({"bbox_2d": jitter(rng, g["bbox"], 6.0), "label": label})
        if roll > 0.9:
            preds.append({"bbox_2d": jitter(rng, g["bbox"], 12.0), "label": label})  # duplicate
    for _ in range(rng.randint(0, 2)):
        preds.append({"bbox_2d": random_box(rng, width, height), "label": rng.choice(LABELS)})
    completion = ("<think>I look for each requested object.</think><answer>```json\n"
                  + json.dumps(preds) + "\n```</answer>")
    return {
        "id": index,
        "completion": completion,
        "target": {"boxes": gt, "frame": "pixel", "image_size": [width, height]},
        "num_tokens": 20 + 18 * len(preds),
    }


def main():
    n, seed, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    with open(out, "w") as f:
        for i in range(n):
            f.write(json.dumps(sample(rng, i)) + "\n")


if __name__ == "__main__":
    main()
