"""groundrl.eval.grounding on the ScreenSpot fixture the Rust tests check by hand."""

import json

import pytest
from conftest import GROUNDING_FIXTURES

import groundrl
from groundrl import eval as groundrl_eval

SAMPLES = GROUNDING_FIXTURES / "screenspot_samples.jsonl"
PREDICTIONS = GROUNDING_FIXTURES / "screenspot_predictions.jsonl"


def test_screenspot_fixture_from_files():
    # mobile/0 and mobile/1 and web/0 hit; mobile/2 has no coordinates; web/1 misses; web/2 has no line.
    report = groundrl_eval.grounding(SAMPLES, PREDICTIONS)
    assert report["overall"] == {"n": 6, "correct": 3, "accuracy": 0.5, "parse_failures": 1, "missing": 1}
    assert report["missing_ids"] == ["screenspot/web/2"]
    assert report["iou"]["mean"] == (0.16 + 1.0) / 2
    assert "screenspot/mobile" in report["text"]


def test_records_as_dicts_give_the_same_report():
    samples = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    predictions = [json.loads(line) for line in PREDICTIONS.read_text().splitlines() if line.strip()]
    assert groundrl_eval.grounding(samples, predictions) == groundrl_eval.grounding(SAMPLES, PREDICTIONS)


def test_bad_records_name_the_sample_or_prediction():
    samples = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    broken = [dict(s) for s in samples]
    broken[2]["targets"] = [{"shape": {"type": "box", "coords": [1, 2, "x", 4]}}]
    with pytest.raises(groundrl.RecordError, match=r"sample 2: targets\[0\]\.shape"):
        groundrl_eval.grounding(broken, [])
    with pytest.raises(groundrl.RecordError, match="prediction 1: "):
        groundrl_eval.grounding(samples, [{"id": samples[0]["id"], "completion": "(1, 2)"}, {"id": samples[1]["id"], "point": [1, 2]}])
    with pytest.raises(ValueError, match="model_frame"):
        groundrl_eval.grounding(samples, [], model_frame="inches")
