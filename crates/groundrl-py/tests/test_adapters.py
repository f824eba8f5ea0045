"""The verl and TRL adapters, called with the arguments and types those trainers pass."""

import json

import numpy as np
import pytest
from conftest import REWARD_SPECS

from groundrl import RecordError, RewardSpec
from groundrl import trl as groundrl_trl
from groundrl import verl as groundrl_verl

SPEC = str(REWARD_SPECS / "weighted_sum.toml")
TARGET = {"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}], "frame": "pixel"}
RIGHT = '<think>a dog</think><answer>```json\n[{"bbox_2d": [10, 10, 50, 50], "label": "dog"}]\n```</answer>'
WRONG = '<answer>[{"bbox_2d": [200, 200, 250, 250], "label": "dog"}]</answer>'


def test_verl_naive_reward_manager_call():
    # verl's NaiveRewardManager: compute_score(data_source=, solution_str=, ground_truth=, extra_info=),
    # with custom_reward_function.reward_kwargs added as keywords; ground_truth comes from the
    # parquet's reward_model.ground_truth (here its JSON text, as datasets often store it).
    out = groundrl_verl.compute_score(
        data_source="coco_detection", solution_str=RIGHT, ground_truth=json.dumps(TARGET),
        extra_info={"split": "train", "index": 3}, reward_spec=SPEC,
    )
    assert out == {"score": 1.0, "weighted_sum": 1.0}
    wrong = groundrl_verl.compute_score("coco_detection", WRONG, TARGET, None, reward_spec=SPEC)
    assert wrong["score"] == 0.0


def test_verl_batch_reward_manager_call_with_numpy_ground_truth():
    # verl's BatchRewardManager passes lists; ground truths read from Parquet arrive as numpy objects.
    target = {"boxes": np.array([{"bbox": np.array([10, 10, 50, 50]), "label": "dog"}], dtype=object), "frame": "pixel"}
    out = groundrl_verl.compute_score_batch(
        data_sources=["a", "b"], solution_strs=[RIGHT, WRONG], ground_truths=[target, target],
        extra_infos=[{"index": 0}, {"index": 1}], reward_spec=SPEC,
    )
    assert [o["score"] for o in out] == [1.0, 0.0]


def test_verl_spec_from_the_environment(monkeypatch):
    monkeypatch.setenv("GROUNDRL_REWARD_SPEC", SPEC)
    assert groundrl_verl.compute_score("d", RIGHT, TARGET)["score"] == 1.0
    monkeypatch.delenv("GROUNDRL_REWARD_SPEC")
    with pytest.raises(ValueError, match="reward_spec"):
        groundrl_verl.compute_score("d", RIGHT, TARGET)


def test_trl_standard_completions_with_dataset_columns():
    reward = groundrl_trl.reward_function(SPEC)
    assert reward.__name__ == "groundrl_reward"
    # GRPOTrainer: reward_func(prompts=, completions=, completion_ids=, **columns, trainer_state=)
    values = reward(
        prompts=["Find the dog.", "Find the dog."], completions=[RIGHT, WRONG],
        completion_ids=[[1, 2, 3], [4, 5]], target=[TARGET, json.dumps(TARGET)],
        image_size=[[640, 480], [640, 480]], trainer_state=object(),
    )
    assert values == [1.0, 0.0]
    assert all(type(v) is float for v in values)


def test_trl_conversational_completions():
    reward = groundrl_trl.reward_function(RewardSpec.from_toml(SPEC))
    prompts = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Find the dog."}]}]] * 3
    completions = [
        [{"role": "assistant", "content": RIGHT}],
        [{"role": "assistant", "content": [{"type": "text", "text": RIGHT}]}],
        [{"role": "assistant", "content": WRONG}],
    ]
    assert reward(prompts=prompts, completions=completions, completion_ids=[[1]] * 3, target=[TARGET] * 3) == [1.0, 1.0, 0.0]


def test_trl_per_component_functions_and_weights():
    spec_text = 'model_frame = "pixel"\n\n[components.iou]\nkind = "iou"\nweight = 0.5\n\n[components.detection]\nkind = "weighted_sum"\nweight = 2.0\n'
    funcs, weights = groundrl_trl.reward_functions(RewardSpec(spec_text))
    assert [f.__name__ for f in funcs] == ["groundrl_iou", "groundrl_detection"] and weights == [0.5, 2.0]
    half = '<answer>[{"bbox_2d": [10, 10, 50, 30], "label": "dog"}]</answer>'
    values = [f(prompts=["p"], completions=[half], target=[TARGET]) for f in funcs]
    assert values[0] == [0.5]


def test_trl_errors_name_the_column_and_record():
    reward = groundrl_trl.reward_function(SPEC)
    with pytest.raises(KeyError, match="target: the dataset has no such column"):
        reward(prompts=["p"], completions=[RIGHT], solution=[TARGET])
    with pytest.raises(RecordError, match="record 1: completion"):
        reward(prompts=["p", "p"], completions=[RIGHT, 7], target=[TARGET, TARGET])
    with pytest.raises(ValueError, match="component"):
        groundrl_trl.reward_function(SPEC, component="nope")


def test_verl_loads_the_module_by_path_as_it_does():
    # verl's get_custom_reward_fn: spec_from_file_location("custom_module", path), exec_module, then
    # wraps the function so that custom_reward_function.reward_kwargs are added to every call.
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_module", groundrl_verl.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw_fn = getattr(module, "compute_score")
    reward_kwargs = {"reward_spec": SPEC}

    def wrapped_fn(*args, **kwargs):
        return raw_fn(*args, **kwargs, **reward_kwargs)

    out = wrapped_fn(data_source="coco", solution_str=RIGHT, ground_truth=TARGET, extra_info={"index": 0})
    assert out["score"] == 1.0


def test_verl_reads_the_ground_truth_of_groundrl_parquet_files():
    # `groundrl data convert --output x.parquet` writes reward_model.ground_truth in this layout.
    truth = json.dumps({"task": "detection", "frame": "pixel", "none": False, "image_sizes": [[640, 480]],
                        "targets": [{"shape": {"type": "box", "coords": [10, 10, 50, 50]}, "label": "dog"}]})
    out = groundrl_verl.compute_score_batch(["coco"], [RIGHT], [truth], [None], reward_spec=SPEC)
    assert out == [{"score": 1.0, "weighted_sum": 1.0}]
