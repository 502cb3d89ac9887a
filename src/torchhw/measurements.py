"""Measurements a notebook hands to the course report.

A notebook calls ``measurements.add("matmul fp32 GFLOP/s", 187.2, unit="GFLOP/s")``. When the
runner executes the course it sets ``TORCHHW_RECORD_FILE`` for each notebook's kernel,
and every recorded value lands in that JSON file, which the report then reads. Outside
the runner the values are only kept in memory (``collected()``), so a reader working
interactively leaves no files behind.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any

ENV_VAR = "TORCHHW_RECORD_FILE"
_values: dict[str, dict[str, Any]] = {}


def _plain(value: Any) -> Any:
    """Turn tensors, numpy scalars and tuples into JSON values; reject what cannot be."""
    if hasattr(value, "tolist"):  # torch.Tensor, numpy arrays and scalars
        value = value.tolist()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    raise TypeError(f"measurements.add() takes numbers, strings, lists and dicts, not {type(value).__name__}")


def add(name: str, value: Any, unit: str = "", note: str = "") -> None:
    """Keep one measurement under ``name``; a second call with the same name replaces it."""
    entry = {"value": _plain(value), "unit": unit, "note": note}
    _values[name] = entry
    path = os.environ.get(ENV_VAR)
    if path:
        target = Path(path)
        data = load(target)
        data[name] = entry
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(target)  # atomic: the report never reads a half-written file


def collected() -> dict[str, dict[str, Any]]:
    """Everything added in this process so far."""
    return dict(_values)


def load(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Read a measurements file; an absent file means nothing was added."""
    path = Path(path)
    if not path.exists():
        return {}
    return json.loads(path.read_text())
