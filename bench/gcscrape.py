"""The collector's figures of a serverio under load, from its ``/metrics``.

serverio exports its cyclic garbage collector's collections and pauses
(``serverio_gc_*``, per generation); the many-files workloads start it with
an admin listener and the runner scrapes these after the trials, so the
artifact and the table say how many collections ran and the longest pause
beside the p99 they may explain.
"""

from __future__ import annotations

import http.client
import re

__all__ = ["gc_line", "parse_gc", "scrape_gc"]

_SAMPLE = re.compile(
    r'^serverio_gc_(?P<name>[a-z_]+)(?:\{generation="(?P<gen>\d)"\})? (?P<value>[-+.\deE]+|\+Inf)$'
)


def parse_gc(text: str) -> dict[str, float]:
    """``serverio_gc_*`` samples of a Prometheus exposition: ``name`` for an
    unlabelled one, ``name_gN`` for generation N; plus the sums over
    generations ``collections``, ``pause_seconds`` and the overall
    ``pause_longest_seconds``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        key = m["name"] if m["gen"] is None else f"{m['name']}_g{m['gen']}"
        out[key] = float(m["value"])
    for total, family, pick in (
        ("collections", "collections_total", sum),
        ("pause_seconds", "pause_seconds_total", sum),
        ("pause_longest_seconds", "pause_longest_seconds", max),
    ):
        values = [v for k, v in out.items() if k.startswith(family + "_g")]
        if values:
            out[total] = pick(values)
    return out


def scrape_gc(port: int, timeout_s: float = 5.0) -> dict[str, float]:
    """:func:`parse_gc` of ``GET /metrics`` on the admin port (empty if it
    fails or the serverio has no collector metrics: an older commit)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            return {}
        return parse_gc(body.decode("utf-8", "replace"))
    except (OSError, http.client.HTTPException):
        return {}
    finally:
        conn.close()


def gc_line(gc: dict[str, float]) -> str:
    """The figures in one line: collections per generation, total and longest pause."""
    if "collections" not in gc:
        return ""
    per_gen = "/".join(f"{gc.get(f'collections_total_g{g}', 0):,.0f}" for g in range(3))
    return (
        f"{gc['collections']:,.0f} collections (gen 0/1/2: {per_gen}), "
        f"{gc.get('pause_seconds', 0) * 1000:,.1f} ms paused, "
        f"longest {gc.get('pause_longest_seconds', 0) * 1000:,.2f} ms "
        f"(gen 2 longest {gc.get('pause_longest_seconds_g2', 0) * 1000:,.2f} ms), "
        f"{gc.get('frozen_objects', 0):,.0f} objects frozen"
    )
