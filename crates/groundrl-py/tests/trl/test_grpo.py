"""TRL's GRPOTrainer with groundrl's reward functions, two steps on the CPU, in the environment of
`scripts/python-env.sh trl` (`GROUNDRL_TRL=1 scripts/python-test.sh` runs this folder there). The
model is a tiny Qwen2 made from a config and a byte-level tokenizer made in code: nothing is
downloaded.

Checked: TRL calls the functions with its own arguments (plain and conversational completions,
`completion_ids`, the dataset's `target` column as `datasets` gives it: a struct column, None for the
keys a row lacks), every value it received equals `RewardSpec.score` on the same completions, TRL
logged the reward under the function's name, and the TRL example of docs/python.md runs as written."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: run this folder with scripts/python-env.sh trl")
trl = pytest.importorskip("trl", reason="trl is not installed: run this folder with scripts/python-env.sh trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

import groundrl  # noqa: E402
from groundrl.trl import reward_functions  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TARGETS = [
    {"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}], "frame": "pixel"},
    {"boxes": [{"bbox": [0, 0, 30, 30]}], "frame": "pixel", "image_size": [640, 480]},
    {"boxes": [], "frame": "pixel", "none": True},
    {"boxes": [{"bbox": [5, 5, 25, 45], "label": "cat"}, {"bbox": [60, 10, 90, 40], "label": "cat"}], "frame": "pixel"},
]


def tiny_model(folder):
    """A 1-layer Qwen2 and a byte-level tokenizer with a chat template, saved to `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    for token in SPECIALS:
        vocab[token] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIALS)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = transformers.Qwen2Config(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def recorded(funcs):
    """The reward functions, each recording what TRL passed and what it returned (same __name__)."""
    calls = []

    def wrap(f):
        def reward(**kwargs):
            values = f(**kwargs)
            calls.append((f.__name__, kwargs, values))
            return values

        reward.__name__ = f.__name__
        return reward

    return [wrap(f) for f in funcs], calls


def completion_texts(completions):
    if isinstance(completions[0], str):
        return list(completions)
    return [c[-1]["content"] for c in completions]


@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "conversational"])
def test_grpo_trainer_two_steps_with_groundrl_rewards(tmp_path, conversational):
    folder = tiny_model(tmp_path / "model")
    prompts = ["Find the dog.", "Find the box.", "Is there a cat?", "Find the cats."]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
    dataset = datasets.Dataset.from_list([{"prompt": p, "target": t} for p, t in zip(prompts, TARGETS)])
    # `datasets` made `target` a struct column: keys a row lacks are None in it.
    assert dataset[0]["target"]["none"] is None and dataset[1]["target"]["boxes"][0]["label"] is None
    funcs, weights = reward_functions("weighted_sum")
    funcs, calls = recorded(funcs)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2,
        max_completion_length=12, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False, seed=0, reward_weights=weights)
    trainer = trl.GRPOTrainer(model=str(folder), reward_funcs=funcs, args=args, train_dataset=dataset)
    trainer.train()

    assert trainer.state.global_step == 2 and calls
    spec = groundrl.RewardSpec.builtin("weighted_sum")
    for name, kwargs, values in calls:
        assert name == "groundrl_weighted_sum"
        assert type(values) is list and all(type(v) is float for v in values)
        completions = kwargs["completions"]
        assert isinstance(completions[0], list) == conversational
        assert len(kwargs["completion_ids"]) == len(completions) == len(kwargs["target"]) == len(values)
        expected = spec.score(completion_texts(completions), list(kwargs["target"])).total.tolist()
        assert values == expected
    logged = [entry for entry in trainer.state.log_history if any("groundrl_weighted_sum" in k for k in entry)]
    assert len(logged) == 2


def test_the_docs_example_runs_in_an_empty_folder(tmp_path):
    text = (ROOT / "docs/python.md").read_text()
    code = re.search(r"```python\n(import torch\nfrom datasets import load_dataset.*?)```", text, re.S).group(1)
    model = re.search(r'model="([^"]+)"', code).group(1)
    tiny_model(tmp_path / model)  # a local folder of that name is what from_pretrained reads first
    import json

    with open(tmp_path / "train.jsonl", "w") as f:
        for i in range(8):
            f.write(json.dumps({"prompt": f"Find the dog {i}.", "target": TARGETS[i % len(TARGETS)]}) + "\n")
    (tmp_path / "example.py").write_text(code)
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                         env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr[-4000:]
