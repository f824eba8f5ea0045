"""Grounding accuracy as ScreenSpot, ScreenSpot-Pro and OSWorld-G score it (``groundrl eval grounding``)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Sequence, Union

from . import _groundrl

Records = Union[str, "os.PathLike[str]", Sequence[Union[Dict[str, Any], str]]]


def grounding(
    samples: Records,
    predictions: Records,
    *,
    model_frame: str = "resized",
    detect_frame: bool = False,
    min_pixels: int = 3136,
    max_pixels: int = 12845056,
) -> Dict[str, Any]:
    """Scores each sample's prediction; returns the report as a dict, with ``"text"`` as the CLI prints it.

    ``samples``: groundrl samples (dicts, JSON lines, or the path of a JSONL file); ``predictions``:
    ``{"id": ..., "completion": ...}`` or ``{"id": ..., "point": [x, y]}`` records (same forms).
    Raises :class:`groundrl.RecordError` naming the sample or prediction and the field.
    """
    out = json.loads(
        _groundrl.grounding_json(_records(samples), _records(predictions), model_frame, detect_frame, min_pixels, max_pixels)
    )
    report: Dict[str, Any] = out["report"]
    report["text"] = out["text"]
    return report


def _records(records: Records) -> "list[Any]":
    if isinstance(records, (str, os.PathLike)):
        with open(records, encoding="utf-8") as f:
            return [line for line in f if line.strip()]
    return list(records)
