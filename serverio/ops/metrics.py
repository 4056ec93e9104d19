"""Metrics: the response-time histogram, snapshots, and Prometheus text.

Three steps, each a plain function so that the multi-process supervisor can
reuse them (:mod:`serverio.ops.workers`):

1. :func:`snapshot` copies one server's numbers into a JSON-able dict
   (engine counters, every pool's counters and gauges, every cache's
   counters and sizes, the histogram);
2. :func:`merge` adds snapshots of several worker processes together;
3. :func:`render` writes the Prometheus text exposition format (0.0.4).

Recording costs O(1) per response: one ``bisect`` over a tuple of 12
bounds and two additions (:meth:`Histogram.observe`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from ..concurrency.blocking import Pool, PoolStats
from ..concurrency.flight import SingleFlightCache
from ..fs.filecache import FileCache
from ..observe.collector import GENERATIONS, gc_snapshot, merge_gc
from ..observe.histogram import BUCKETS, Histogram

if TYPE_CHECKING:
    from ..app.server import Server

__all__ = [
    "BUCKETS",
    "Histogram",
    "caches_of",
    "counters_only",
    "family",
    "merge",
    "render",
    "snapshot",
]

Snapshot = dict[str, Any]


# Engine counters whose Prometheus name is not simply serverio_<name>_total.
# Anything added to Stats later is exported generically (no edit needed here).
_TIMEOUTS = {"timeouts_head": "head", "timeouts_keepalive": "keepalive", "timeouts_write": "write"}
_HELP = {
    "accepted": "Sockets accepted (admitted or not).",
    "rejected": "Connections turned away by --max-connections (503).",
    "completed": "Responses written in full.",
    "client_errors": "4xx responses.",
    "server_errors": "5xx responses.",
    "cancelled": "Connections cut by shutdown or abort.",
    "resets": "Peer reset or broken pipe while writing.",
    "truncated": "Responses aborted because the file shrank while being sent.",
    "sendfile_responses": "File bodies sent with os.sendfile.",
    "buffered_responses": "File bodies sent through user space.",
    "bytes_sent": "Bytes written to clients (heads and bodies).",
    "tls_handshake_failures": "TLS handshakes that failed (not TLS, mismatch, peer gone).",
    "h2_connections": "Connections served as HTTP/2 (h2c prior knowledge or ALPN h2).",
    "h2_streams": "Requests received on HTTP/2 streams.",
    "h2_refused_streams": "HTTP/2 streams refused (past the stream limit, or draining).",
    "h2_stream_errors": "HTTP/2 streams reset for a malformed request.",
    "h2_client_resets": "HTTP/2 streams reset by the client.",
    "h2_calm": "HTTP/2 connections ended with ENHANCE_YOUR_CALM (floods, rapid reset).",
    "h2_protocol_errors": "HTTP/2 connections ended with GOAWAY for a protocol error.",
    "auth_failures": "Basic-auth credentials refused (unknown user or wrong password).",
    "writes_files": "Files created or replaced (PUT, each file of an upload form).",
    "writes_deletes": "DELETEs that removed a file.",
    "writes_bytes": "Bytes of committed files (PUT, upload form).",
    "writes_aborted": "PUTs and upload forms that ended before their last commit "
    "(client gone, 413, 400, cancelled).",
    "writes_temps_removed": "Upload temporary files removed (aborted uploads, start-up sweep).",
    "writes_directories": "Directories made (the upload form's new folder).",
}
_POOL_GAUGES = ("running", "queued", "workers", "queue")
# Per-user counters (users of the users files only: the label set is bounded).
_USER_HELP = {
    "requests": "Responses to a signed-in user, by user.",
    "bytes": "Body bytes sent to a signed-in user, by user.",
    "denied": "Requests refused to a signed-in user (403), by user.",
}
_POOL_PEAKS = frozenset({"peak_queued", "peak_running"})

# Cache numbers: every counter of a cache's stats dataclass is exported as
# serverio_cache_<name>_total{cache=...} ("evicted" is spelt "evictions");
# these three are gauges of the cache's current state.
_CACHE_GAUGES = {
    "bytes": ("serverio_cache_bytes", "Bytes a cache holds now (its own accounting)."),
    "entries": ("serverio_cache_entries", "Entries a cache holds now."),
    "capacity": ("serverio_cache_capacity_bytes", "Configured size of a cache (0 = off)."),
}
_CACHE_RENAME = {"evicted": "evictions"}
_CACHE_HELP = {
    "hits": "Lookups answered from a cache.",
    "misses": "Lookups a cache could not answer.",
    "evictions": "Entries dropped to make room (least recently used first).",
    "stored": "Entries put in a cache.",
    "stale": "Entries found changed on revalidation and dropped.",
    "started": "Jobs started to compute a missing value (one per miss storm).",
    "joined": "Misses that waited for a job another request started.",
    "oversized": "Values larger than the whole cache: served, not stored.",
    "saturated": "Jobs refused by a full work pool.",
    "failed": "Jobs that produced nothing (file changed, error).",
    "unavailable": "Misses while no job nursery was running (shutdown).",
}
# What the shutdown summary line shows per cache (serverio.observe.stats).
SUMMARY_CACHE_KEYS = ("hits", "misses", "evictions", "bytes", "entries")


def pools_of(server: Server) -> list[Pool]:
    """Every :class:`Pool` the server owns, found by type rather than by name
    so that a pool added later is exported without touching this module:
    the services' own attributes, then the pools its features brought
    (``services.pools``: the uploads' ``write`` pool, the site's), once each."""
    services = server.services
    found = [v for v in vars(services).values() if isinstance(v, Pool)]
    found += [p for p in services.pools if all(p is not q for q in found)]
    return found


def _cache_numbers(stats: Any, size: int, entries: int, capacity: int) -> dict[str, int]:
    counters = {_CACHE_RENAME.get(k, k): v for k, v in asdict(stats).items()}
    return {**counters, "bytes": size, "entries": entries, "capacity": capacity}


def caches_of(server: Server) -> dict[str, dict[str, int]]:
    """Counters and sizes of every cache the server owns, by cache name.

    The warm-file cache is ``file``; the single-flight caches of the
    content service (compression, digests) are found by type, so that a
    cache added there later is exported without touching this module.
    """
    files: FileCache = server.files
    out = {"file": _cache_numbers(files.stats, files.size, len(files), files.capacity)}
    meta = files.meta
    if meta is not None:  # the files' metadata apart from their bytes
        out["meta"] = _cache_numbers(meta.stats, meta.size, len(meta), meta.capacity_bytes)
    for value in vars(server.content).values():
        if isinstance(value, SingleFlightCache):
            out[value.name] = _cache_numbers(value.stats, value.size, len(value), value.capacity)
    return out


def _tunnels_open(server: Server) -> int:
    """The reverse proxy's tunnels open now (0 without a proxy)."""
    proxy = server.services.proxy
    return proxy.tunnels.open if proxy is not None else 0


def snapshot(server: Server) -> Snapshot:
    """One process's numbers as a JSON-able dict (see :func:`merge`)."""
    hist: Histogram = server.response_times
    return {
        "stats": server.stats.as_dict(),
        "caches": caches_of(server),
        "pools": {
            p.name: {
                **asdict(p.stats),
                "running": p.running,
                "queued": p.queued,
                "workers": p.workers,
                "queue": p.queue,
            }
            for p in pools_of(server)
        },
        "open_connections": len(server.connections),
        "proxy_tunnels_open": _tunnels_open(server),
        "draining": int(server.draining),
        "abandoned_threads": server.abandoned_threads,
        "histogram": {"counts": list(hist.counts), "sum": hist.sum},
        "users": _users_of(server),
        "gc": gc_snapshot(),
    }


_USER_KEYS = ("requests", "bytes", "denied")


def _users_of(server: Server) -> dict[str, dict[str, int]]:
    """Per user of the users files: responses, their bytes, refusals (the
    access hook's counters; only the names the files hold: bounded)."""
    site = server.env.site  # the exchange's SiteSteps: it names user_counts
    if site is None:
        return {}
    return {
        name: dict(zip(_USER_KEYS, counts, strict=True))
        for name, counts in site.user_counts().items()
    }


def merge(snaps: Iterable[Snapshot]) -> Snapshot:
    """Add snapshots together: counters and gauges sum, peaks take the max."""
    collector: dict[str, Any] | None = None
    out: Snapshot = {
        "stats": {},
        "caches": {},
        "pools": {},
        "open_connections": 0,
        "proxy_tunnels_open": 0,
        "draining": 0,
        "abandoned_threads": 0,
        "histogram": {"counts": [0] * (len(BUCKETS) + 1), "sum": 0.0},
    }
    for s in snaps:
        for k, v in s["stats"].items():
            out["stats"][k] = out["stats"].get(k, 0) + v
        for name, cs in s.get("caches", {}).items():
            dst = out["caches"].setdefault(name, {})
            for k, v in cs.items():
                dst[k] = dst.get(k, 0) + v  # each process has its own caches
        for name, ps in s["pools"].items():
            dst = out["pools"].setdefault(name, {})
            for k, v in ps.items():
                dst[k] = max(dst.get(k, 0), v) if k in _POOL_PEAKS else dst.get(k, 0) + v
        for k in ("open_connections", "draining", "abandoned_threads"):
            out[k] += s[k]
        out["proxy_tunnels_open"] += s.get("proxy_tunnels_open", 0)
        users = out.setdefault("users", {})
        for name, us in s.get("users", {}).items():
            dst = users.setdefault(name, {})
            for k, v in us.items():
                dst[k] = dst.get(k, 0) + v
        counts = out["histogram"]["counts"]
        for i, c in enumerate(s["histogram"]["counts"]):
            counts[i] += c
        out["histogram"]["sum"] += s["histogram"]["sum"]
        collector = merge_gc(collector, s.get("gc"))
    if collector is not None:
        out["gc"] = collector
    return out


def counters_only(s: Snapshot) -> Snapshot:
    """The monotonic part of a snapshot (what a retired worker contributes)."""
    return {
        "stats": dict(s["stats"]),
        "caches": {
            n: {k: v for k, v in cs.items() if k not in _CACHE_GAUGES}
            for n, cs in s.get("caches", {}).items()
        },
        "pools": {
            n: {k: v for k, v in ps.items() if k not in _POOL_GAUGES}
            for n, ps in s["pools"].items()
        },
        "open_connections": 0,
        "draining": 0,
        "abandoned_threads": 0,
        "histogram": {"counts": list(s["histogram"]["counts"]), "sum": s["histogram"]["sum"]},
        "users": {n: dict(us) for n, us in s.get("users", {}).items()},
        **(
            {"gc": {k: v for k, v in s["gc"].items() if k != "frozen_objects"}} if "gc" in s else {}
        ),
    }


def _fmt(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, labels: dict[str, str] | None = None) -> None:
        if labels:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {_fmt(value)}")
        else:
            self.lines.append(f"{name} {_fmt(value)}")


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]
) -> list[str]:
    """One metric family as exposition lines (for metrics outside a snapshot)."""
    w = _Writer()
    w.family(name, kind, help_text)
    for labels, value in samples:
        w.sample(name, value, labels)
    return w.lines


def render(s: Snapshot, extra: Iterable[str] = ()) -> str:
    """Prometheus text exposition (version 0.0.4) of a (merged) snapshot.

    ``extra`` lines (already formatted families) are appended; the worker
    supervisor uses it for per-process and restart metrics.
    """
    w = _Writer()
    stats: dict[str, int] = s["stats"]
    w.family("serverio_timeouts_total", "counter", "Deadlines that fired, by kind.")
    for key, kind in _TIMEOUTS.items():
        w.sample("serverio_timeouts_total", stats.get(key, 0), {"kind": kind})
    for key, value in stats.items():
        if key in _TIMEOUTS:
            continue
        name = f"serverio_{key}_total"
        w.family(name, "counter", _HELP.get(key, f"Engine counter {key}."))
        w.sample(name, value)
    pool_fields = [f.name for f in fields(PoolStats)]
    for key in pool_fields:
        peak = key in _POOL_PEAKS
        name = f"serverio_pool_{key}" if peak else f"serverio_pool_{key}_total"
        w.family(name, "gauge" if peak else "counter", f"Blocking pool counter {key}.")
        for pool, ps in sorted(s["pools"].items()):
            w.sample(name, ps.get(key, 0), {"pool": pool})
    gauges = {
        "running": "Threads holding a pool token now (including abandoned ones).",
        "queued": "Callers waiting for a pool thread now.",
        "workers": "Configured threads per pool.",
        "queue": "Configured wait-queue length per pool.",
    }
    for key, help_text in gauges.items():
        name = f"serverio_pool_{key}"
        w.family(name, "gauge", help_text)
        for pool, ps in sorted(s["pools"].items()):
            w.sample(name, ps.get(key, 0), {"pool": pool})
    caches: dict[str, dict[str, int]] = s.get("caches", {})
    keys = list(dict.fromkeys(k for cs in caches.values() for k in cs))
    for key in keys:
        if key in _CACHE_GAUGES:
            name, help_text = _CACHE_GAUGES[key]
            w.family(name, "gauge", help_text)
        else:
            name = f"serverio_cache_{key}_total"
            w.family(name, "counter", _CACHE_HELP.get(key, f"Cache counter {key}."))
        for cache, cs in sorted(caches.items()):
            if key in cs:
                w.sample(name, cs[key], {"cache": cache})
    w.family("serverio_open_connections", "gauge", "Client connections open now.")
    w.sample("serverio_open_connections", s["open_connections"])
    name = "serverio_proxy_tunnels_open"
    w.family(name, "gauge", "Proxied WebSocket/Upgrade tunnels open now.")
    w.sample(name, s.get("proxy_tunnels_open", 0))
    w.family("serverio_draining", "gauge", "1 while a graceful shutdown is draining.")
    w.sample("serverio_draining", s["draining"])
    w.family("serverio_abandoned_threads", "gauge", "Threads left stuck at shutdown.")
    w.sample("serverio_abandoned_threads", s["abandoned_threads"])
    name = "serverio_response_seconds"
    w.family(name, "histogram", "Time from request head to last byte written.")
    cumulative = 0
    counts = s["histogram"]["counts"]
    for bound, c in zip((*BUCKETS, math.inf), counts, strict=True):
        cumulative += c
        w.sample(f"{name}_bucket", cumulative, {"le": _fmt(float(bound))})
    w.sample(f"{name}_sum", float(s["histogram"]["sum"]))
    w.sample(f"{name}_count", cumulative)
    users: dict[str, dict[str, int]] = s.get("users", {})
    for key, text in _USER_HELP.items():
        if not users:
            break
        name = f"serverio_user_{key}_total"
        w.family(name, "counter", text)
        for user, us in sorted(users.items()):
            w.sample(name, us.get(key, 0), {"user": user})
    _render_gc(w, s.get("gc"))
    w.lines.extend(extra)
    return "\n".join(w.lines) + "\n"


# The collector's figures (serverio.observe.collector): per generation.
_GC_FAMILIES = (
    (
        "collections",
        "serverio_gc_collections_total",
        "counter",
        "Cyclic collections, by generation.",
    ),
    (
        "pause_seconds",
        "serverio_gc_pause_seconds_total",
        "counter",
        "Time the process was paused collecting, by generation.",
    ),
    (
        "pause_longest_seconds",
        "serverio_gc_pause_longest_seconds",
        "gauge",
        "Longest single collection since start, by generation.",
    ),
    (
        "collected",
        "serverio_gc_collected_total",
        "counter",
        "Unreachable objects found (cyclic garbage), by generation.",
    ),
    (
        "uncollectable",
        "serverio_gc_uncollectable_total",
        "counter",
        "Unreachable objects that could not be freed, by generation.",
    ),
)


def _render_gc(w: _Writer, collector: dict[str, Any] | None) -> None:
    if not collector:
        return
    for key, name, kind, help_text in _GC_FAMILIES:
        w.family(name, kind, help_text)
        values = collector.get(key, [0] * GENERATIONS)
        for gen, value in enumerate(values):
            w.sample(name, value, {"generation": str(gen)})
    name = "serverio_gc_freezes_total"
    w.family(
        name,
        "counter",
        "gc.freeze() calls: after start-up, cache growth and promotion to the oldest generation.",
    )
    w.sample(name, collector.get("freezes", 0))
    if "frozen_objects" in collector:
        name = "serverio_gc_frozen_objects"
        w.family(name, "gauge", "Objects in the permanent generation (never traversed).")
        w.sample(name, collector["frozen_objects"])
