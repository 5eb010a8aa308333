"""Input checks shared across modules: integer and real arguments (fusers, views, forecast,
ensembles) and the header of a table file (ingest, the truth file); the integer type of
indices into a given number of items; whether a path lies on a read-only file system."""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np


def index_dtype(size: int) -> type:
    """The integer dtype for indices into ``size`` items: int32 below 2³¹, else int64."""
    return np.int32 if size < 2**31 else np.int64


def check_integer(name: str, value, low: int = 1) -> int:
    """``value`` as an int: TypeError naming ``name`` unless an integer (a bool, a float such as
    2.0 or a string refused), ValueError if below ``low``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r}.")
    if value < low:
        raise ValueError(f"{name} must be an integer ≥ {low}; got {value!r}.")
    return int(value)


def check_real(
    name: str, value, *, low: float = 0.0, low_inclusive: bool = False, high: float | None = None
) -> float:
    """A fuser's real-valued parameter: TypeError unless a real number (bool refused), ValueError
    unless finite, above ``low`` (or equal, with ``low_inclusive``) and below ``high``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r}.")
    above = value >= low if low_inclusive else value > low
    if not (np.isfinite(value) and above and (high is None or value < high)):
        bound = f"{'≥' if low_inclusive else '>'} {low:g}"
        if high is not None:
            bound += f" and < {high:g}"
        raise ValueError(f"{name} must be finite and {bound}; got {value!r}.")
    return float(value)


def check_k_range(k_range, name: str = "k_range") -> tuple[int, int]:
    """``k_range`` as ``(k_min, k_max)``, integers with 1 ≤ k_min ≤ k_max; ValueError naming
    ``name`` otherwise (TypeError for a non-integer bound)."""
    try:
        k_min, k_max = k_range
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (k_min, k_max); got {k_range!r}.") from None
    check_integer(name, k_min, 1)
    check_integer(name, k_max, 1)
    if k_min > k_max:
        raise ValueError(f"{name} must satisfy k_min ≤ k_max; got {k_range}.")
    return int(k_min), int(k_max)


def header_columns(names: list[str], required) -> tuple[list[str], list[str]]:
    """The ``required`` column names missing from a header's ``names``, and those it names more
    than once (which of the two is meant cannot be told), each in ``required``'s order."""
    missing = [c for c in required if c not in names]
    repeated = [c for c in required if names.count(c) > 1]
    return missing, repeated


def on_read_only_mount(path: Path) -> bool:
    """Whether ``path`` (an existing file or folder) lies on a file system mounted read-only
    (``statvfs``'s ST_RDONLY): no user or permission change can write there. False where it
    cannot be told (no statvfs, or the path is gone)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        return False
