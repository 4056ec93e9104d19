"""Fitting ``--max-connections`` to the open-file limit (RLIMIT_NOFILE).

Each connection costs a socket descriptor, and one more while a file is
streamed to it; an HTTP/2 connection streams up to ``--h2-max-open-files``
files at once (its streams past that wait for a descriptor, whatever the
client does: ``serverio.net.h2conn``), so with HTTP/2 on a connection may
hold ``1 + h2_max_open_files``.  With the common soft limit of 1024 and the default of 1024
connections, the process ran out of descriptors before the connection limit
was reached: ``accept()`` failed with EMFILE and clients waited in the
backlog instead of getting their 503.  So at start-up, like nginx's
``worker_rlimit_nofile`` and the Go runtime, the soft limit is raised toward
the hard limit (unprivileged: a process may raise its soft limit up to its
hard limit); if even that cannot hold one descriptor per connection plus a
reserve, the effective connection limit is lowered and the CLI says so once.
When the hard limit holds the connections but not HTTP/2's extra bodies,
``h2_max_open_files`` is lowered to what fits (at least 1), also said once.

``resource`` is POSIX only; elsewhere (Windows) nothing is changed.
"""

from __future__ import annotations

from types import ModuleType

from ..config import Config, parse_listen

resource: ModuleType | None
try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = ["FD_RESERVE", "fd_reserve", "fit_fd_limit", "per_connection"]

#: Descriptors the process needs besides its connections: standard streams,
#: the event loop's epoll/kqueue and wake-up pipes, listeners, the root
#: directory, log files, the spare descriptor kept for 503s at EMFILE, the
#: admin listener and its few connections, and the one descriptor an inline
#: resolution (``--fs-workers 0``) may open on the event loop before an
#: HTTP/2 stream at its cap closes it again.
FD_RESERVE = 32


def _serves_http2(cfg: Config) -> bool:
    if cfg.h2.http2:
        return True
    return any(
        parse_listen(s, "--listen")[2] == "h2"
        for s in (*cfg.listeners.listen, *cfg.listeners.listen_tls)
    )


def per_connection(cfg: Config) -> int:
    """Descriptors one connection may hold: its socket and the bodies it
    streams (one over HTTP/1.1; ``h2_max_open_files`` over HTTP/2)."""
    return 1 + (max(1, cfg.h2.h2_max_open_files) if _serves_http2(cfg) else 1)


def fd_reserve(cfg: Config) -> int:
    """Descriptors kept out of the connection budget: :data:`FD_RESERVE`
    plus two per pool thread (an open file or directory, and a duplicate a
    cache job owns), plus, with ``--watch``, one socket per event stream
    (``--watch-max-streams``: streams are admitted apart from
    ``--max-connections``), plus, for the reverse proxy, the upstream
    sockets each upstream may hold: ``--proxy-max-inflight`` in use and
    ``--proxy-keepalive`` idle (a request waiting in ``--proxy-queue``
    holds none: its client socket is a connection's), and the tunnels'
    (``--proxy-max-tunnels``, every upstream together, apart from those)."""
    streams = cfg.live.watch_max_streams if cfg.live.watch else 0
    proxy = cfg.proxy
    upstreams = len(proxy.routes) + (proxy.fallback is not None)
    sockets = upstreams * (proxy.proxy_max_inflight + proxy.proxy_keepalive)
    if upstreams:
        sockets += proxy.proxy_max_tunnels
    return FD_RESERVE + 2 * (cfg.pools.fs_workers + cfg.pools.work_workers) + streams + sockets


def fit_fd_limit(cfg: Config) -> tuple[Config, str | None]:
    """Raise the soft open-file limit for ``cfg``; lower its connection limit
    if even the hard limit is too low.

    Wanted: :func:`per_connection` descriptors per connection (socket and
    files) plus the reserve; when only fewer fit, ``h2_max_open_files``
    becomes what fits (at least 1).  Needed: one per connection plus the
    reserve; below that, ``max_connections`` becomes what fits.  Returns
    the (possibly changed) config and a one-line note for stderr, or None
    when nothing was lowered.
    """
    if resource is None:  # pragma: no cover - Windows
        return cfg, None
    infinity = resource.RLIM_INFINITY
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no such limit here
        return cfg, None
    reserve = fd_reserve(cfg)
    want = per_connection(cfg) * cfg.conn.max_connections + reserve
    if soft != infinity and soft < want:
        target = want if hard == infinity else min(want, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (OSError, ValueError):
                # macOS refuses a soft limit above kern.maxfilesperproc even
                # when the hard limit is "unlimited": keep what we have.
                pass
            else:
                soft = target
    if soft == infinity or want <= soft:
        return cfg, None
    if cfg.conn.max_connections + reserve <= soft:
        if not _serves_http2(cfg) or cfg.h2.h2_max_open_files <= 1:
            return cfg, None
        # The connections fit, HTTP/2's extra bodies do not all: fewer per
        # connection, so the descriptor budget holds for any client.
        # (< h2_max_open_files, since want > soft)
        files = max(1, (soft - reserve) // cfg.conn.max_connections - 1)
        note = (
            f"serverio: note: --h2-max-open-files lowered from {cfg.h2.h2_max_open_files} to "
            f"{files}: the open-file limit is {soft} for {cfg.conn.max_connections} connections; "
            f"raise it with ulimit -n or systemd's LimitNOFILE="
        )
        return cfg.evolve(h2_max_open_files=files), note
    fit = max(1, soft - reserve)
    note = (
        f"serverio: note: --max-connections lowered from {cfg.conn.max_connections} to {fit}: "
        f"the open-file limit is {soft} (hard {'unlimited' if hard == infinity else hard}) "
        f"and {reserve} descriptors are kept in reserve; raise it with ulimit -n "
        f"or systemd's LimitNOFILE="
    )
    return cfg.evolve(max_connections=fit), note
