"""verl's custom reward function, backed by a groundrl reward spec.

verl (0.8, 0.9.0 and 0.9.1: ``reward.custom_reward_function`` in its config) loads this file by path
and its ``naive`` reward manager calls ``compute_score(data_source=..., solution_str=...,
ground_truth=..., extra_info=...)`` once per response, adding
``reward.custom_reward_function.reward_kwargs`` as keyword arguments. Give the spec there
(``reward_spec``: a built-in name such as ``weighted_sum``, or a spec file's path) or in the
environment (``GROUNDRL_REWARD_SPEC``). ``compute_score_batch`` scores a whole batch at once, for
verl releases that still have the ``batch`` reward manager (0.7 and earlier) and for callers of
their own.

``ground_truth`` is the target of the reward input format (``{"boxes": [...], "frame": ...,
"image_size": [w, h]}``), or groundrl's Parquet ground truth, as a dict or its JSON text. The return
value is a dict: ``score`` (the spec's weighted total, which verl trains on) and each component's
value (which verl logs).
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
def _load(spec: str) -> RewardSpec:
    return RewardSpec.load(os.fspath(spec))


def _spec(reward_spec: Optional[str]) -> RewardSpec:
    spec = reward_spec or os.environ.get(SPEC_ENV)
    if not spec:
        raise ValueError(
            f"reward_spec: give a built-in spec name or a spec path in "
            f"reward.custom_reward_function.reward_kwargs, or ${SPEC_ENV}"
        )
    return _load(spec)


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
