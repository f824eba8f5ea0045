"""TRL reward functions (``GRPOTrainer(reward_funcs=...)``) backed by a groundrl reward spec.

TRL calls each reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns)``:
``completions`` are strings, or (conversational datasets) lists of message dicts whose last
assistant message is the answer; every other dataset column arrives as a keyword list with one entry
per completion, and TRL adds more keywords (``trainer_state``, ...) that are accepted and ignored.
The target column (``target`` unless told otherwise) holds the reward input's target, as a dict or
its JSON text. TRL names a reward in its logs by the function's ``__name__``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import RecordError, RewardSpec

__all__ = ["reward_function", "reward_functions"]

RewardFunc = Callable[..., List[float]]


def reward_function(
    spec: Union[RewardSpec, str, "os.PathLike[str]"],
    *,
    column: str = "target",
    component: Optional[str] = None,
) -> RewardFunc:
    """The spec's weighted total (or one component's unweighted value) as a TRL reward function.
    ``spec``: a :class:`RewardSpec`, a built-in name (``"weighted_sum"``), a file path or TOML text."""
    spec = RewardSpec.load(spec)
    if component is not None and component not in spec.component_names:
        raise ValueError(f"component: {component!r} is not in the spec ({', '.join(spec.component_names)})")

    def reward(prompts: Optional[Sequence[Any]] = None, completions: Sequence[Any] = (), **kwargs: Any) -> List[float]:
        if column not in kwargs:
            raise KeyError(f"{column}: the dataset has no such column (columns given: {', '.join(sorted(kwargs))})")
        texts = [_completion_text(i, c) for i, c in enumerate(completions)]
        num_tokens = None
        if "completion_ids" in kwargs and kwargs["completion_ids"] is not None:
            num_tokens = [len(ids) for ids in kwargs["completion_ids"]]
        scores = spec.score(texts, list(kwargs[column]), num_tokens=num_tokens)
        values = scores.total if component is None else scores.components[component]
        return [float(v) for v in values]

    reward.__name__ = f"groundrl_{component}" if component else "groundrl_reward"
    reward.__qualname__ = reward.__name__
    return reward


def reward_functions(spec: Union[RewardSpec, str, "os.PathLike[str]"], *, column: str = "target") -> "tuple[List[RewardFunc], List[float]]":
    """One function per component and the spec's weights, for ``GRPOConfig(reward_weights=...)``:
    TRL then logs each component and trains on the same weighted total."""
    spec = RewardSpec.load(spec)
    funcs = [reward_function(spec, column=column, component=name) for name in spec.component_names]
    return funcs, list(spec.component_weights)


def _completion_text(index: int, completion: Any) -> str:
    """A completion's text: the string itself, or the last assistant message's text content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                return _content_text(index, message.get("content"))
    raise RecordError(f"record {index}: completion: expected a string or a list of messages with an assistant message")


def _content_text(index: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: List[Dict[str, Any]] = [p for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(str(p.get("text", "")) for p in parts)
    raise RecordError(f"record {index}: completion: content: expected a string or a list of parts, got {type(content).__name__}")
