"""The package's functions on hand-checked values."""

import json

import numpy as np
import pytest
from conftest import EXAMPLES, REWARD_SPECS

import groundrl

IOU_SPEC = 'model_frame = "pixel"\n\n[components.iou]\nkind = "iou"\nweight = 2.0\n'


def test_parse_reads_boxes_labels_and_the_think_answer_structure():
    out = groundrl.parse('<think>two dogs</think><answer>[{"bbox_2d": [1, 2, 3, 4], "label": "dog"}]</answer>')
    assert out["ok"] is True
    assert out["answer"] == {"kind": "boxes", "boxes": [{"coords": [1.0, 2.0, 3.0, 4.0], "label": "dog"}]}
    assert out["syntax"] == "json"
    assert out["structure"]["think_then_answer"] is True


def test_parse_reads_points_none_and_qwen_box_tokens():
    assert groundrl.parse("(150, 125)")["answer"] == {"kind": "points", "points": [{"coords": [150.0, 125.0], "label": None}]}
    assert groundrl.parse("None")["answer"] == {"kind": "no_objects"}
    qwen = groundrl.parse("<|box_start|>(100,200),(300,400)<|box_end|>")
    assert qwen["answer"]["boxes"][0]["coords"] == [100.0, 200.0, 300.0, 400.0]
    assert qwen["frame_hint"] == "qwen1000"


def test_parse_failures_say_why():
    assert groundrl.parse("") == {"ok": False, "reason": "empty", "detail": "empty completion"}
    assert groundrl.parse("no numbers here")["reason"] == "no_answer"
    with pytest.raises(TypeError, match="text: expected a str"):
        groundrl.parse(None)  # type: ignore[arg-type]


def test_smart_resize_matches_transformers():
    # transformers' Qwen2VLImageProcessor: 1080x1920 -> 1092x1932; tiny images grow to min_pixels.
    assert groundrl.smart_resize(1080, 1920) == (1092, 1932)
    assert groundrl.smart_resize(28, 28) == (56, 56)
    assert groundrl.smart_resize(1000, 1000, max_pixels=256 * 28 * 28) == (448, 448)
    with pytest.raises(ValueError, match="factor"):
        groundrl.smart_resize(100, 100, factor=32)
    with pytest.raises(ValueError, match="aspect ratio"):
        groundrl.smart_resize(10, 5000)


def test_spec_loads_from_text_and_from_a_path():
    spec = groundrl.RewardSpec.from_toml(IOU_SPEC)
    assert spec.component_names == ["iou"] and spec.component_weights == [2.0]
    from_path = groundrl.RewardSpec.from_toml(REWARD_SPECS / "weighted_sum.toml")
    assert from_path.component_names == ["weighted_sum"]
    assert groundrl.RewardSpec.from_toml(str(EXAMPLES / "spec.toml")).component_names[:2] == ["iou", "click"]


def test_spec_errors_name_the_component():
    with pytest.raises(groundrl.SpecError, match="iou"):
        groundrl.RewardSpec.from_toml('[components.iou]\nkind = "iou"\nweight = 1\nbogus = 3\n')
    with pytest.raises(groundrl.SpecError, match="components.x: unknown variant `nope`"):
        groundrl.RewardSpec.from_toml('[components.x]\nkind = "nope"\nweight = 1\n')


def test_score_returns_the_weighted_total_and_each_component():
    spec = groundrl.RewardSpec.from_toml(IOU_SPEC)
    target = {"boxes": [{"bbox": [0, 0, 10, 20]}], "frame": "pixel"}
    scores = spec.score(["<answer>[0, 0, 10, 10]</answer>", "no answer", "[0, 0, 10, 20]"], [target, json.dumps(target), target])
    assert scores.components["iou"].tolist() == [0.5, 0.0, 1.0]
    assert scores.total.tolist() == [1.0, 0.0, 2.0]
    assert scores.parsed.tolist() == [True, False, True]
    assert scores.total.dtype == np.float64


def test_score_matches_the_cli_example_records():
    # examples/reward: the same records `groundrl reward` scores; the wheel gives the same values as
    # the library (score_one) on them, so compare with a second, per-record call of the same spec.
    spec = groundrl.RewardSpec.from_toml(EXAMPLES / "spec.toml")
    records = [json.loads(line) for line in (EXAMPLES / "input.jsonl").read_text().splitlines() if line.strip()]
    batch = spec.score([r["completion"] for r in records], [r["target"] for r in records], num_tokens=[r.get("num_tokens") for r in records])
    for i, r in enumerate(records):
        one = spec.score([r["completion"]], [r["target"]], num_tokens=[r.get("num_tokens")])
        assert one.total[0] == batch.total[i]
    assert np.all(np.isfinite(batch.total))
    assert batch.total.max() > 0.5


def test_bad_records_raise_naming_record_and_field():
    spec = groundrl.RewardSpec.from_toml(IOU_SPEC)
    good = {"boxes": [{"bbox": [0, 0, 1, 1]}], "frame": "pixel"}
    with pytest.raises(groundrl.RecordError, match=r"record 1: target\.boxes\[0\]\.bbox\[2\]: NaN is not a finite number"):
        spec.score(["a", "b"], [good, {"boxes": [{"bbox": [0, 0, float("nan"), 1]}], "frame": "pixel"}])
    with pytest.raises(groundrl.RecordError, match="record 0: target"):
        spec.score(["a"], [{"boxes": [], "frame": "parsecs"}])
    with pytest.raises(groundrl.RecordError, match="record 2: target: not JSON"):
        spec.score(["a", "b", "c"], [good, good, "{"])
    with pytest.raises(TypeError, match="record 1: completion: expected a str"):
        spec.score(["a", 3], [good, good])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="targets: 1 entries for 2 completions"):
        spec.score(["a", "b"], [good])
    with pytest.raises(groundrl.RecordError, match=r"record 0: target\.boxes\[0\]: a value of type object has no JSON form"):
        spec.score(["a"], [{"boxes": [object()], "frame": "pixel"}])
    assert issubclass(groundrl.RecordError, ValueError)


def test_numpy_targets_are_read_as_lists():
    spec = groundrl.RewardSpec.from_toml(IOU_SPEC)
    target = {"boxes": np.array([{"bbox": np.array([0.0, 0.0, 10.0, 10.0])}], dtype=object), "frame": "pixel"}
    assert spec.score(["[0, 0, 10, 10]"], [target]).total.tolist() == [2.0]


def test_builtin_specs_load_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = groundrl.builtin_spec_names()
    assert {"ap", "iou", "weighted_sum", "synthetic-click"} <= set(names)
    for name in names:
        assert groundrl.RewardSpec.builtin(name).component_names
    spec = groundrl.RewardSpec.builtin("weighted_sum")
    assert spec.component_names == ["weighted_sum"] and spec.component_weights == [1.0]
    assert groundrl.RewardSpec.load("iou").component_names == ["iou"]
    with pytest.raises(groundrl.SpecError, match="'nope' is not a built-in spec; built-in: ap, iou"):
        groundrl.RewardSpec.builtin("nope")
    # The file shipped in the repository and the built-in are the same spec.
    from_file = groundrl.RewardSpec.from_toml(REWARD_SPECS / "weighted_sum.toml")
    answer = '<answer>[{"bbox_2d": [12, 10, 50, 48], "label": "dog"}]</answer>'
    target = {"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}], "frame": "pixel"}
    assert spec.score([answer], [target]).total.tolist() == from_file.score([answer], [target]).total.tolist()


ANSWER = '<answer>[{"bbox_2d": [10, 10, 50, 50], "label": "dog"}, {"bbox_2d": [60, 60, 90, 90]}]</answer>'


def test_null_target_fields_read_as_absent():
    # A `datasets` or Parquet struct column gives every row every key: None where a row had none.
    spec = groundrl.RewardSpec.builtin("weighted_sum")
    absent = [{"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}, {"bbox": [60, 60, 90, 90]}], "frame": "pixel"},
              {"boxes": [], "frame": "pixel", "none": True}]
    filled = [{"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}, {"bbox": [60, 60, 90, 90], "label": None}],
               "frame": "pixel", "none": None, "image_size": None, "resized_size": None},
              {"boxes": [], "frame": "pixel", "none": True, "image_size": None, "resized_size": None}]
    completions = [ANSWER, "None"]
    expected = spec.score(completions, absent)
    got = spec.score(completions, filled)
    assert got.total.tolist() == expected.total.tolist() and got.parsed.tolist() == expected.parsed.tolist()
    assert 0.0 < got.total[0] <= 1.0 and got.total[1] == 1.0


@pytest.mark.parametrize("target, message", [
    ({"boxes": [{"bbox": [10, 10, 50], "label": "dog"}], "frame": "pixel"},
     r"^record 1: target\.boxes\[0\]\.bbox: invalid length 3, expected an array of length 4$"),
    ({"boxes": [{"bbox": [10, 10, 50, 50], "label": 5}], "frame": "pixel"},
     r"^record 1: target\.boxes\[0\]\.label: invalid type: integer `5`, expected a string$"),
    ({"boxes": [], "frame": "pixels"}, r"^record 1: target\.frame: unknown variant `pixels`"),
    ({"boxes": [{"bbox": [10, 10, 50, 50]}], "frame": "pixel", "colour": "red"},
     r"^record 1: target\.colour: unknown field `colour`, expected one of `boxes`"),
])
def test_target_errors_name_the_field_inside_the_target(target, message):
    spec = groundrl.RewardSpec.builtin("weighted_sum")
    good = {"boxes": [], "frame": "pixel"}
    with pytest.raises(groundrl.RecordError, match=message):
        spec.score([ANSWER, ANSWER], [good, target])
