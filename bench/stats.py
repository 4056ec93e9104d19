"""Small robust statistics used for summarising trials."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence; 0.0 for an empty one."""
    return float(statistics.median(values)) if values else 0.0


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    if not values:
        return 0.0
    centre = median(values)
    return median([abs(v - centre) for v in values])


def mad_percent(values: Sequence[float]) -> float:
    """MAD as a percentage of the median: the dispersion column of the table."""
    centre = median(values)
    return 100.0 * mad(values) / centre if centre else 0.0


def rotation(names: Sequence[T], rnd: int) -> list[T]:
    """The order of round ``rnd`` (0-based): ``names`` started ``rnd`` places later.

    Every server runs once per round, and over ``len(names)`` rounds each
    one runs in every position once, so a position effect (the first trial
    after a warm-up, a neighbour's leftover load) is spread over all of them.
    """
    if not names:
        return []
    k = rnd % len(names)
    return [*names[k:], *names[:k]]
