"""groundrl for Python: the exact rewards, output parser, smart_resize and metrics of groundrl.

The work runs in Rust (the ``groundrl-score`` crate) with the GIL released; batches use every core.
See docs/python.md in the repository for the API, the verl and TRL adapters, and timings.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _groundrl
from ._groundrl import CocoError, RecordError, SpecError

__all__ = [
    "CocoError",
    "RecordError",
    "RewardSpec",
    "Scores",
    "SpecError",
    "builtin_spec_names",
    "parse",
    "smart_resize",
]

_BUILTIN_SPECS: Dict[str, str] = dict(_groundrl.builtin_specs())


def builtin_spec_names() -> List[str]:
    """Names :meth:`RewardSpec.builtin` takes: ``ap``, ``iou``, ``weighted_sum`` (boxes in pixels),
    and the specs of the repository's ``configs/rewards/`` (``synthetic-click``, ...)."""
    return list(_BUILTIN_SPECS)


def parse(text: str) -> Dict[str, Any]:
    """What the parser reads in one completion.

    Returns ``{"ok": True, "answer": ..., "syntax": ..., "frame_hint": ..., "confidence": ...,
    "structure": ...}``, or ``{"ok": False, "reason": ..., "detail": ...}`` when no answer reads.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    parsed: Dict[str, Any] = json.loads(_groundrl.parse_json(text))
    return parsed


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = 3136,
    max_pixels: int = 12845056,
) -> "tuple[int, int]":
    """Qwen2.5-VL's ``smart_resize``: the resized ``(height, width)`` (multiples of 28 in the budget)."""
    return _groundrl.smart_resize(height, width, factor, min_pixels, max_pixels)


class Scores(NamedTuple):
    """The scores of a batch: ``total[i]`` is ``sum(weight * components[name][i])``."""

    total: np.ndarray
    components: Dict[str, np.ndarray]
    parsed: np.ndarray


class RewardSpec:
    """A reward spec: weighted components, in the TOML format of groundrl's configs/rewards/."""

    def __init__(self, text: str) -> None:
        self._native = _groundrl.NativeRewardSpec(text)
        self.component_names: List[str] = list(self._native.component_names())
        self.component_weights: List[float] = list(self._native.component_weights())

    @classmethod
    def from_toml(cls, source: Union[str, "os.PathLike[str]"]) -> "RewardSpec":
        """Loads a spec from a file path, or from TOML text (a string holding a newline or ``=``)."""
        if isinstance(source, os.PathLike) or ("\n" not in source and "=" not in source):
            with open(source, encoding="utf-8") as f:
                return cls(f.read())
        return cls(source)

    @classmethod
    def builtin(cls, name: str) -> "RewardSpec":
        """A spec shipped with the package, by name (:func:`builtin_spec_names`); works from any folder."""
        if name not in _BUILTIN_SPECS:
            raise SpecError(f"{name!r} is not a built-in spec; built-in: {', '.join(_BUILTIN_SPECS)}")
        return cls(_BUILTIN_SPECS[name])

    @classmethod
    def load(cls, spec: Union["RewardSpec", str, "os.PathLike[str]"]) -> "RewardSpec":
        """A spec as the adapters take it: a :class:`RewardSpec`, a built-in name, a file path, or
        TOML text. A name that is both a built-in and an existing file is the file."""
        if isinstance(spec, RewardSpec):
            return spec
        if isinstance(spec, str) and spec in _BUILTIN_SPECS and not os.path.exists(spec):
            return cls.builtin(spec)
        return cls.from_toml(spec)

    def score(
        self,
        completions: Sequence[str],
        targets: Sequence[Union[Dict[str, Any], str]],
        *,
        num_tokens: Optional[Sequence[Optional[int]]] = None,
        tool_use: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
    ) -> Scores:
        """Scores ``completions[i]`` against ``targets[i]`` on all cores.

        A target is ``{"boxes": [{"bbox": [x1, y1, x2, y2], "label": str}], "frame": "pixel" |
        "normalized" | "qwen1000" | "resized", "image_size": [w, h], "resized_size": [w, h],
        "none": bool}`` (only ``frame`` is required), or its JSON text. Raises
        :class:`RecordError` naming the first bad record and field.
        """
        totals, columns, parsed = self._native.score(
            list(completions), list(targets), _optional_list(num_tokens), _optional_list(tool_use)
        )
        components = {name: np.asarray(col, dtype=np.float64) for name, col in zip(self.component_names, columns)}
        return Scores(np.asarray(totals, dtype=np.float64), components, np.asarray(parsed, dtype=bool))


def _optional_list(values: Optional[Sequence[Any]]) -> Optional["list[Any]"]:
    return None if values is None else list(values)


from . import coco, eval, trl, verl  # noqa: E402  (submodules use the names above)
