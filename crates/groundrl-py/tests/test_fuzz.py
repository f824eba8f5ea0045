"""The CLI's fuzz inputs through the bindings: seeded mutations of the same committed examples
(crates/groundrl-core/tests/common/mutate.rs mutates them the same ways) must give a result or a
ValueError / TypeError / KeyError naming what is wrong; a panic (pyo3's PanicException, which is
not an Exception) or a crash of the interpreter fails the test."""

import json
import random

import pytest
from conftest import COCO_FIXTURE, EXAMPLES, GROUNDING_FIXTURES, ROOT

import groundrl
from groundrl import _groundrl
from groundrl import eval as groundrl_eval

BYTES = b"\x00\xff\"{}[],:\\\n=-.9e#'"
TOKENS = [
    "nan", "NaN", "inf", "-inf", "1e309", "-1", "-0", "0", "18446744073709551616", "99999999999999999999999",
    "null", "true", "[]", "{}", '""', '"../../etc/passwd"', '"/dev/zero"', "\ufeff", "\u0000", "\\u0000",
    "\\ud800", "\r\n", "[" * 64, '{"a":' * 8,
]
EXPECTED = (ValueError, TypeError, KeyError)
CASES = 1500


def mutated(rng: random.Random, example: bytes) -> bytes:
    data = bytearray(example)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(data))
        span = min(rng.randint(0, 16), len(data) - at)
        kind = rng.randint(0, 6)
        if kind == 0 and at < len(data):
            data[at] ^= 1 << rng.randint(0, 7)
        elif kind == 1 and at < len(data):
            data[at] = BYTES[rng.randrange(len(BYTES))]
        elif kind == 2:
            del data[at:at + span]
        elif kind == 3:
            data[at:at] = data[at:at + span]
        elif kind == 4:
            data[at:at + min(span, 4)] = rng.choice(TOKENS).encode()
        elif kind == 5:
            del data[at:]
        else:
            start = rng.randint(0, len(data))
            data[at:at] = data[start:start + rng.randint(0, 31)]
    return bytes(data)


def fuzz(seed, examples, check):
    rng = random.Random(seed)
    for case in range(CASES):
        data = mutated(rng, rng.choice(examples))
        try:
            check(data)
        except EXPECTED as e:
            assert str(e), f"case {case}: an exception without a message for {data[:300]!r}"


def json_lines(data: bytes):
    for line in data.split(b"\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


def test_reward_records():
    spec = groundrl.RewardSpec.from_toml(EXAMPLES / "spec.toml")

    def check(data):
        for record in json_lines(data):
            try:
                scores = spec.score([record.get("completion")], [record.get("target")], num_tokens=[record.get("num_tokens")])
            except EXPECTED as e:
                assert "record 0" in str(e), str(e)
                continue
            assert all(v == v for v in scores.total.tolist())

    fuzz(1, [(EXAMPLES / "input.jsonl").read_bytes()], check)


def test_reward_specs():
    examples = [(EXAMPLES / "spec.toml").read_bytes(), (ROOT / "configs/rewards/tool-gated.toml").read_bytes()]
    fuzz(2, examples, lambda data: groundrl.RewardSpec(data.decode("utf-8", "replace")))


def test_completions():
    examples = [json.loads(line)["completion"].encode() for line in (EXAMPLES / "input.jsonl").read_text().splitlines() if line.strip()]

    def check(data):
        out = groundrl.parse(data.decode("utf-8", "replace"))
        assert out["ok"] in (True, False)

    fuzz(3, examples, check)


def test_coco_ground_truth_and_detections():
    gt, dt = (COCO_FIXTURE / "gt.json").read_bytes(), (COCO_FIXTURE / "dt.json").read_bytes()
    evaluated = []

    def evaluate(gt_json, dt_json):
        truth = _groundrl.coco_ground_truth_json(gt_json)
        images = truth.image_ids()
        results = _groundrl.coco_results_json(dt_json, images)
        categories = sorted(set(truth.category_ids()))
        ev = _groundrl.coco_evaluate(truth, results, sorted(images), categories, True, [0.5, 0.75], [1, 100], [[0, 1e10], [0, 1024]])
        ev.accumulate(list(range(len(categories))), [0, 1], [1, 100], list(range(len(images))), [0.0, 0.5, 1.0], (2, len(categories), 2, 2))
        evaluated.append(True)

    fuzz(4, [gt], lambda data: evaluate(data, dt))
    fuzz(5, [dt], lambda data: evaluate(gt, data))
    # Mutations that leave valid input are evaluated, not only refused.
    assert len(evaluated) > 50, len(evaluated)


def test_grounding_samples():
    samples = (GROUNDING_FIXTURES / "screenspot_samples.jsonl").read_bytes()
    predictions = [json.loads(line) for line in (GROUNDING_FIXTURES / "screenspot_predictions.jsonl").read_text().splitlines() if line.strip()]

    def check(data):
        records = list(json_lines(data))
        if records:
            groundrl_eval.grounding(records, predictions)

    fuzz(6, [samples], check)


def deeply_nested(levels):
    value = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2**70, -(2**70), b"bytes", {1: 2}, object(), [[[[]]]], deeply_nested(1_000_000), "\ud800"])
def test_hostile_python_values_in_a_target(value):
    spec = groundrl.RewardSpec.from_toml(EXAMPLES / "spec.toml")
    with pytest.raises(EXPECTED, match="record 0: target"):
        spec.score(["[1, 2, 3, 4]"], [{"boxes": [{"bbox": [0, 0, 1, value]}], "frame": "pixel"}])
