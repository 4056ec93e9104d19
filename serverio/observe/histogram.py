"""The response-time histogram: O(1) per response, rendered by the metrics layer.

Recording costs one ``bisect`` over a tuple of 12 bounds and two additions;
:mod:`serverio.ops.metrics` turns the counts into Prometheus buckets.
"""

from __future__ import annotations

import bisect

__all__ = ["BUCKETS", "Histogram"]

# Seconds.  A static file server answers most requests in well under a
# millisecond; the upper buckets are for large bodies and slow clients.
BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    5.0,
    30.0,
)


class Histogram:
    """Cumulative-on-render histogram of durations (non-cumulative counts inside)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last slot is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds
