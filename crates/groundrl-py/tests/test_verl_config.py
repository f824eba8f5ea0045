"""The verl command of docs/python.md against verl's own packaged config and code.

For verl 0.9.1 (the current release), 0.9.0 and 0.8.0: the config is composed with hydra from the
YAML files in verl's wheel, with the command's overrides as bash expands them; the selected reward
function is loaded with verl's `load_extern_object` and `get_custom_reward_fn`, and called by verl's
`NaiveRewardManager.run_single` (the class's source, from the wheel, run over stand-ins for the
tokenizer and the batch: verl itself imports torch and ray, which this environment does not have).

The wheels are downloaded by scripts/python-test.sh into $GROUNDRL_VERL_WHEELS.
"""

import __future__
import ast
import asyncio
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import types
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

import groundrl.verl

VERSIONS = ["0.9.1", "0.9.0", "0.8.0"]
TARGET = {"boxes": [{"bbox": [10, 10, 50, 50], "label": "dog"}], "frame": "pixel"}
RIGHT = '<answer>[{"bbox_2d": [10, 10, 50, 50], "label": "dog"}]</answer>'
WRONG = '<answer>[{"bbox_2d": [200, 200, 250, 250], "label": "dog"}]</answer>'

hydra = pytest.importorskip("hydra", reason="hydra-core is not installed (scripts/python-env.sh installs it)")


@pytest.fixture(scope="module", params=VERSIONS)
def verl(request, tmp_path_factory):
    """verl's wheel of one version, unpacked (config and the few modules used)."""
    folder = os.environ.get("GROUNDRL_VERL_WHEELS")
    wheel = Path(folder or ".", f"verl-{request.param}-py3-none-any.whl")
    if not folder or not wheel.exists():
        pytest.skip(f"verl {request.param}'s wheel is not in $GROUNDRL_VERL_WHEELS ({folder}): "
                    "scripts/python-test.sh downloads it from PyPI")
    out = tmp_path_factory.mktemp(f"verl-{request.param}")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(("verl/trainer/config/", "verl/utils/import_utils.py", "verl/trainer/ppo/reward.py",
                                "verl/experimental/reward_loop/reward_manager/")):
                z.extract(name, out)
    return request.param, out / "verl"


def compose(verl_dir, overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(verl_dir / "trainer/config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def documented_overrides(cwd):
    """The overrides of docs/python.md's verl command, as bash expands them in `cwd`."""
    text = (ROOT / "docs/python.md").read_text()
    block = re.search(r"```bash\n(python -m verl\.trainer\.main_ppo.*?)```", text, re.S).group(1)
    lines = [line for line in block.splitlines() if not line.lstrip().startswith("#")]
    command = "\n".join(lines).replace("python -m verl.trainer.main_ppo", "printf '%s\\n'", 1)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    out = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def registered_managers(verl_dir):
    names = set()
    for path in (verl_dir / "experimental/reward_loop/reward_manager").glob("*.py"):
        names |= set(re.findall(r'@register(?:_manager)?\("([^"]+)"\)', path.read_text()))
    return names


def load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verl_functions(verl_dir, path, names, namespace):
    """Top-level functions or classes `names` of one verl file, executed from its source."""
    source = (verl_dir / path).read_text()
    tree = ast.parse(source)
    keep = [node for node in tree.body if getattr(node, "name", None) in names]
    # The file's `from __future__ import annotations` (not among the nodes kept) still applies.
    flags = __future__.annotations.compiler_flag if "from __future__ import annotations" in source else 0
    code = compile(ast.Module(body=keep, type_ignores=[]), str(verl_dir / path), "exec", flags=flags, dont_inherit=True)
    exec(code, namespace)
    return [namespace[n] for n in names]


def verl_reward_fn(verl_dir, config):
    """verl's `get_custom_reward_fn(config)`, with verl's `load_extern_object`."""
    import_utils = load_file("verl.utils.import_utils", verl_dir / "utils/import_utils.py")
    package = {name: types.ModuleType(name) for name in ("verl", "verl.utils")}
    saved = {name: sys.modules.get(name) for name in [*package, "verl.utils.import_utils"]}
    sys.modules.update(package)
    sys.modules["verl.utils.import_utils"] = import_utils
    try:
        namespace = {"partial": partial, "inspect": inspect, "__name__": "verl_reward"}
        (get_custom_reward_fn,) = verl_functions(
            verl_dir, "trainer/ppo/reward.py", ["_call_with_kwargs", "_call_with_kwargs_async", "get_custom_reward_fn"],
            namespace)[-1:]
        return get_custom_reward_fn(config)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class Tokenizer:
    """Stands in for the tokenizer: token ids are the text's UTF-8 bytes."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(int(i) for i in ids).decode()


class Item:
    def __init__(self, response, ground_truth, extra_info):
        ids = np.array(list(response.encode()))
        prompt = np.ones(5, dtype=np.int64)
        self.batch = {"responses": np.concatenate([ids, np.zeros(3, dtype=np.int64)]),
                      "attention_mask": np.concatenate([prompt, np.ones(len(ids), dtype=np.int64), np.zeros(3, dtype=np.int64)])}
        self.non_tensor_batch = {"data_source": "coco", "reward_model": {"ground_truth": ground_truth},
                                 "extra_info": extra_info}


class Batch:
    """Stands in for verl's DataProto: slicing gives a Batch, an index an Item."""

    def __init__(self, items):
        self.items = items

    def __getitem__(self, key):
        return Batch(self.items[key]) if isinstance(key, slice) else self.items[key]


def naive_manager(verl_dir, compute_score):
    """verl's NaiveRewardManager class, from its source, over a stand-in base class."""

    class RewardManagerBase:
        def __init__(self, config, tokenizer, compute_score):
            self.config, self.tokenizer, self.compute_score = config, tokenizer, compute_score
            self.loop = asyncio.get_event_loop()

    namespace = {"inspect": inspect, "DataProto": Batch, "RewardManagerBase": RewardManagerBase,
                 "register": lambda name: (lambda cls: cls), "default_compute_score": None}
    (cls,) = verl_functions(verl_dir, "experimental/reward_loop/reward_manager/naive.py", ["NaiveRewardManager"],
                            namespace)
    return cls


def test_the_documented_command_selects_groundrl_and_verl_calls_it(verl, tmp_path):
    version, verl_dir = verl
    config = compose(verl_dir, documented_overrides(tmp_path))
    chosen = config.reward.custom_reward_function
    assert Path(chosen.path).resolve() == Path(groundrl.verl.__file__).resolve()
    assert chosen.name == "compute_score" and chosen.reward_kwargs.reward_spec == "weighted_sum"
    managers = registered_managers(verl_dir)
    assert config.reward.reward_manager.name == "naive" and "naive" in managers and "batch" not in managers
    fn = verl_reward_fn(verl_dir, config)
    assert fn is not None and fn.func.__name__ == "_call_with_kwargs" and fn.args[0].__name__ == "compute_score"
    assert Path(inspect.getfile(fn.args[0])).resolve() == Path(groundrl.verl.__file__).resolve()

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        manager = naive_manager(verl_dir, fn)(config, Tokenizer(), fn)
        # Ground truth as JSON text and as a dict with numpy arrays (a Parquet column's form).
        parquet_like = {"boxes": np.array([{"bbox": np.array([10, 10, 50, 50]), "label": "dog"}], dtype=object),
                        "frame": "pixel", "none": None}
        outs = [loop.run_until_complete(manager.run_single(Batch([Item(text, truth, {"index": i})])))
                for i, (text, truth) in enumerate([(RIGHT, json.dumps(TARGET)), (WRONG, parquet_like)])]
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    assert [o["reward_score"] for o in outs] == [1.0, 0.0]
    assert outs[0]["reward_extra_info"] == {"score": 1.0, "weighted_sum": 1.0}


def test_the_former_command_is_ignored_by_verl_0_9(verl, tmp_path):
    # What docs/python.md said before: top-level custom_reward_function and the `batch` manager.
    version, verl_dir = verl
    assert "batch" not in registered_managers(verl_dir)
    if version == "0.8.0":
        return  # 0.8.0's main_ppo moves the top-level keys under `reward` itself (still no `batch`)
    legacy = [f"custom_reward_function.path={groundrl.verl.__file__}", "custom_reward_function.name=compute_score_batch",
              "reward_model.reward_manager=batch"]
    config = compose(verl_dir, legacy)
    assert config.reward.custom_reward_function.path is None
    assert config.reward.reward_manager.name == "naive"
