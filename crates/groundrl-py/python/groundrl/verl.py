"""verl's custom reward function, backed by a groundrl reward spec.

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`` per
response (reward manager ``naive``), or ``compute_score_batch(data_sources=..., solution_strs=...,
ground_truths=..., extra_infos=...)`` once per batch (reward manager ``batch``), adding the
``custom_reward_function.reward_kwargs`` of the config as keyword arguments. Give the spec there
(``reward_spec: path/to/spec.toml``) or in the environment (``GROUNDRL_REWARD_SPEC``).

``ground_truth`` is the target of the reward input format (``{"boxes": [...], "frame": ...,
"image_size": [w, h]}``), as a dict or its JSON text. The return value is a dict: ``score`` (the
spec's weighted total, which verl trains on) and each component's value (which verl logs).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Dict, List, Optional, Sequence

# Absolute, not relative: verl loads this file by path (custom_reward_function.path) as a module of
# its own, outside the groundrl package.
from groundrl import RewardSpec

__all__ = ["compute_score", "compute_score_batch"]

SPEC_ENV = "GROUNDRL_REWARD_SPEC"


@functools.lru_cache(maxsize=16)
def _load(path: str) -> RewardSpec:
    return RewardSpec.from_toml(os.fspath(path))


def _spec(reward_spec: Optional[str]) -> RewardSpec:
    path = reward_spec or os.environ.get(SPEC_ENV)
    if not path:
        raise ValueError(f"reward_spec: give a spec path in custom_reward_function.reward_kwargs or ${SPEC_ENV}")
    return _load(path)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[Dict[str, Any]] = None,
    reward_spec: Optional[str] = None,
    **kwargs: Any,
) -> Dict[str, float]:
    """One response's score: ``{"score": total, <component>: value, ...}``."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], reward_spec=reward_spec)[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
    reward_spec: Optional[str] = None,
    **kwargs: Any,
) -> List[Dict[str, float]]:
    """A batch's scores, on all cores; one dict per response as :func:`compute_score` returns."""
    spec = _spec(reward_spec)
    num_tokens = None
    if extra_infos is not None and any(isinstance(e, dict) and "num_tokens" in e for e in extra_infos):
        num_tokens = [e.get("num_tokens") if isinstance(e, dict) else None for e in extra_infos]
    scores = spec.score(list(solution_strs), list(ground_truths), num_tokens=num_tokens)
    names = spec.component_names
    return [
        {"score": float(total), **{name: float(scores.components[name][i]) for name in names}}
        for i, total in enumerate(scores.total)
    ]
