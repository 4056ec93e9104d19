"""Every policy knob, in one narrow policy object per concern.

A :class:`Config` holds the policies (:class:`ListenPolicy`,
:class:`ConnectionPolicy`, :class:`FilesPolicy` ...) and the derived root
fields; each is immutable and validated once, at start-up (each policy
validates itself, :meth:`Config.validate` adds the rules between them).  The
hot path reads attributes and never re-parses anything; code that needs one
concern takes that policy, not the whole Config.  Each setting is one field
of one policy (:data:`FIELD_GROUP`); serverio.ops.options declares its flag,
TOML key and help.  Defaults are justified in docs/cli.md.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

__all__ = [
    "ACCESS_LOG_FORMATS",
    "ACTIVE_MODES",
    "ETAG_MODES",
    "FIELD_GROUP",
    "LOG_LEVELS",
    "ON_DUPLICATE",
    "POLICIES",
    "Config",
    "ConnectionPolicy",
    "ContentPolicy",
    "FilesPolicy",
    "H2Policy",
    "ListenPolicy",
    "LogPolicy",
    "Policy",
    "PoolPolicy",
    "ProxyPolicy",
    "ProxyRoute",
    "SitePolicy",
    "TlsPolicy",
    "UploadPolicy",
    "WatchPolicy",
    "field_path",
    "listener_http2",
    "normal_route",
    "parse_host_port",
    "parse_listen",
    "parse_networks",
    "parse_proxy_spec",
    "parse_upstream",
    "proxy_route",
    "wants_site_rules",
]

ACCESS_LOG_FORMATS = ("off", "common", "combined", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
ETAG_MODES = ("auto", "content")  # the rule of each: serverio.http.core.EtagPolicy
# --on-duplicate (serverio.fs.names.OnDuplicate's values).
ON_DUPLICATE = ("error", "rename", "overwrite")
# --upload-active and [[writable]] active: how an active file (HTML, SVG,
# XML, JavaScript) under a writable path is served (serverio.http.active).
ACTIVE_MODES = ("sandbox", "attachment", "inline")

# Sizes beyond these are refused as "absurd": they are certainly typos and
# would let one knob exhaust the process (threads, memory, fds).
_MAX_WORKERS = 1024
_MAX_QUEUE = 65536
_MAX_LISTING_ENTRIES = 1_000_000
_MiB = 1024 * 1024
_MAX_PROCESSES = 256  # --workers: processes, each with its own pools and fds
_MAX_H2_STREAMS = 10_000  # concurrent streams per HTTP/2 connection
_MAX_TRUSTED_PROXIES = 256  # --trusted-proxies networks (each request checks them all)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``--trusted-proxies`` values -> networks (host bits allowed:
    ``10.0.0.1/8`` is ``10.0.0.0/8``; a bare address is one host).
    Raises ValueError naming the bad value."""
    out: list[IPNetwork] = []
    for c in cidrs:
        try:
            out.append(ipaddress.ip_network(c.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{c!r} is not an IP address or network (CIDR)") from None
    if len(out) > _MAX_TRUSTED_PROXIES:
        raise ValueError(f"at most {_MAX_TRUSTED_PROXIES} networks")
    return tuple(out)


def _seconds_ok(v: object, lo_open: bool = True, hi: float | None = None) -> bool:
    """A finite number of seconds: > 0 (``lo_open``) or >= 0, and <= ``hi``."""
    if not (isinstance(v, int | float) and math.isfinite(v)):
        return False
    if hi is not None and v > hi:
        return False
    return v > 0 if lo_open else v >= 0


def _check_ints(policy: object, minimums: tuple[tuple[str, int], ...]) -> None:
    for name, lo in minimums:
        v = getattr(policy, name)
        if not isinstance(v, int) or v < lo:
            raise ConfigError(f"--{_opt(name)} must be an integer >= {lo}, got {v!r}")


def _check_seconds(policy: object, names: tuple[str, ...]) -> None:
    for name in names:
        v = getattr(policy, name)
        if not _seconds_ok(v):
            raise ConfigError(f"--{_opt(name)} must be a positive number of seconds, got {v!r}")


# ---------------------------------------------------------------- policies
#
# One frozen dataclass per concern, named after who consumes it (the table
# in docs/architecture.md "Configuration").  Field names are unique across
# the policies: the declarations of serverio.ops.options name a field, and
# FIELD_GROUP says which policy holds it.


@dataclass(frozen=True, slots=True)
class ListenPolicy:
    """Where the server listens and how many processes (serverio.net.server, ops)."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # processes, each with its own SO_REUSEPORT listener
    fds: tuple[int, ...] = ()  # inherited listening sockets (--fd); replaces host/port
    # --listen / --listen-tls HOST:PORT (repeatable); replace host/port.
    listen: tuple[str, ...] = ()
    listen_tls: tuple[str, ...] = ()
    admin_bind: str | None = None  # HOST:PORT of /metrics and /healthz; off by default

    def validate(self) -> ListenPolicy:
        """Check the addresses and process counts (ConfigError naming the option)."""
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be between 0 and 65535, got {self.port}")
        if not isinstance(self.workers, int) or not 1 <= self.workers <= _MAX_PROCESSES:
            raise ConfigError(f"--workers must be from 1 to {_MAX_PROCESSES}, got {self.workers!r}")
        for fd in self.fds:
            if not isinstance(fd, int) or fd < 0:
                raise ConfigError(f"--fd must be a non-negative file descriptor, got {fd!r}")
        if self.fds and self.workers > 1:
            # One inherited socket shared by N processes is exactly the unbalanced
            # set-up --workers exists to avoid (see docs/deployment.md).
            raise ConfigError("--workers > 1 cannot serve inherited sockets (--fd / LISTEN_FDS)")
        public = [(self.host, self.port)]
        if self.listen or self.listen_tls:
            if self.fds:
                raise ConfigError("--listen/--listen-tls cannot be combined with --fd / LISTEN_FDS")
            public = [parse_listen(a, "--listen")[:2] for a in self.listen]
            public += [parse_listen(a, "--listen-tls")[:2] for a in self.listen_tls]
            if self.workers > 1 and any(p == 0 for _, p in public):
                raise ConfigError(
                    "--workers > 1 needs fixed ports in --listen/--listen-tls (not 0)"
                )
            seen = [a for a in public if a[1] != 0]
            if len(set(seen)) != len(seen):
                raise ConfigError("--listen/--listen-tls: the same address is given twice")
        if self.admin_bind is not None:
            host, port = parse_host_port(self.admin_bind, "--admin-bind")
            if (
                port != 0
                and not self.fds
                and any(port == p and _same_host(host, h) for h, p in public)
            ):
                raise ConfigError("--admin-bind must not be the public address (use another port)")
        return self


@dataclass(frozen=True, slots=True)
class ConnectionPolicy:
    """Limits and deadlines of every connection (serverio.net: both transports)."""

    max_connections: int = 1024
    head_timeout: float = 10.0
    keepalive_timeout: float = 5.0
    write_timeout: float = 30.0
    max_requests: int = 1000
    shutdown_timeout: float = 10.0
    # Lame-duck period on SIGTERM: /healthz says 503 and every response
    # closes its connection, but the listeners keep accepting this long.
    shutdown_delay: float = 0.0
    max_head_size: int = 16384
    max_target_size: int = 8192
    # Request bodies (serverio.net.reqbody.BodyPolicy; docs/features.md
    # "Request bodies"): content bytes accepted (RFC 9110 §15.5.14: 413
    # past it), seconds one read of it may wait, seconds the whole of it.
    max_body_size: int = _MiB
    body_timeout: float = 30.0
    body_total_timeout: float = 300.0

    def validate(self) -> ConnectionPolicy:
        """Check the limits and deadlines (ConfigError naming the option)."""
        d = self.shutdown_delay
        if not _seconds_ok(d, lo_open=False, hi=3600):
            raise ConfigError(f"--shutdown-delay must be between 0 and 3600 seconds, got {d!r}")
        _check_seconds(
            self,
            (
                "head_timeout",
                "keepalive_timeout",
                "write_timeout",
                "shutdown_timeout",
                "body_timeout",
                "body_total_timeout",
            ),
        )
        _check_ints(
            self,
            (
                ("max_connections", 1),
                ("max_requests", 1),
                ("max_head_size", 256),
                ("max_target_size", 16),
                ("max_body_size", 0),
            ),
        )
        if self.max_target_size > self.max_head_size:
            raise ConfigError("--max-head-size must be at least the maximum target size (8192)")
        return self


@dataclass(frozen=True, slots=True)
class H2Policy:
    """HTTP/2 (serverio.net.h2conn; docs/features.md "HTTP/2")."""

    http2: bool = True
    h2_max_streams: int = 100  # SETTINGS_MAX_CONCURRENT_STREAMS; REFUSED_STREAM past it
    # Per connection and second: stream resets by the client (rapid reset,
    # CVE-2023-44487) and control frames that deliver no request (PING,
    # SETTINGS, PRIORITY, empty DATA, WINDOW_UPDATEs no DATA earned); past
    # either, GOAWAY ENHANCE_YOUR_CALM.
    h2_max_resets: int = 200
    h2_max_control: int = 200
    # Body descriptors (files streamed from disk, over --small-file-size) one
    # HTTP/2 connection holds at once; a stream past it waits for one.  Part
    # of the open-file arithmetic (serverio.ops.fdlimit): 1 + this per
    # connection.
    h2_max_open_files: int = 4

    def validate(self) -> H2Policy:
        """Check the stream and flood budgets (ConfigError naming the option)."""
        _check_ints(
            self,
            (
                ("h2_max_streams", 1),
                ("h2_max_resets", 1),
                ("h2_max_control", 1),
                ("h2_max_open_files", 1),
            ),
        )
        if self.h2_max_streams > _MAX_H2_STREAMS:
            raise ConfigError(
                f"--h2-max-streams {self.h2_max_streams} is absurd (max {_MAX_H2_STREAMS})"
            )
        if self.h2_max_open_files > _MAX_H2_STREAMS:
            raise ConfigError(
                f"--h2-max-open-files {self.h2_max_open_files} is absurd (max {_MAX_H2_STREAMS})"
            )
        return self


@dataclass(frozen=True, slots=True)
class FilesPolicy:
    """Which files are served and how (serverio.fs, the file decisions of http.core)."""

    index: tuple[str, ...] = ("index.html", "index.htm")  # as http.server
    hidden: bool = False
    follow_symlinks: bool = False
    cache_control: str | None = None
    small_file_size: int = 65536
    sendfile: bool = True
    # Warm-file cache (serverio.fs.filecache): bytes of small files kept in
    # memory; 0 = off.  In pooled mode an entry is trusted without a stat
    # for fs_cache_valid seconds after its last revalidation.
    file_cache_size: int = 16 * _MiB
    fs_cache_valid: float = 1.0
    max_ranges: int = 16
    # ETag rule (docs/features.md "Validators"): "auto" or "content".
    etag: str = "auto"
    # --mount ROUTE=DIR / [[mount]] (docs/features.md "Mounts and a route
    # prefix"): (route, directory); validate() normalises the routes
    # ("/docs/" is "/docs").  --route-prefix: the whole site under it.
    mounts: tuple[tuple[str, str], ...] = ()
    route_prefix: str | None = None

    def validate(self) -> FilesPolicy:
        """Check the file options (ConfigError naming the option)."""
        if self.etag not in ETAG_MODES:
            raise ConfigError(f"--etag must be one of {', '.join(ETAG_MODES)}, got {self.etag!r}")
        _check_ints(self, (("small_file_size", 0), ("max_ranges", 1), ("file_cache_size", 0)))
        v = self.fs_cache_valid
        if not _seconds_ok(v, lo_open=False, hi=3600):
            raise ConfigError(f"--fs-cache-valid must be between 0 and 3600 seconds, got {v!r}")
        for name in self.index:
            if not name or "/" in name or name in (".", "..") or "\x00" in name:
                raise ConfigError(f"--index {name!r} must be a plain file name")
        if self.cache_control is not None and not _is_field_value(self.cache_control):
            raise ConfigError("--cache-control must be a printable ASCII header value")
        prefix = None
        if self.route_prefix is not None:
            prefix = normal_route(self.route_prefix, "--route-prefix") or None
        seen: set[str] = set()
        mounts = []
        for route, directory in self.mounts:
            norm = normal_route(route, "--mount")
            if not norm:
                raise ConfigError("--mount: route '/' is the served directory itself (-d DIR)")
            if norm in seen:
                raise ConfigError(f"--mount: route {norm!r} is given twice")
            if not os.path.isdir(directory):
                raise ConfigError(
                    f"--mount {norm}: directory {directory!r} does not exist or is not a directory"
                )
            seen.add(norm)
            mounts.append((norm, directory))
        return dataclasses.replace(self, mounts=tuple(mounts), route_prefix=prefix)


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """The blocking-work pools (serverio.concurrency; 0 workers = inline on the event loop)."""

    fs_workers: int = 0
    fs_queue: int = 0
    work_workers: int = 2
    work_queue: int = 64

    def validate(self) -> PoolPolicy:
        """Check the pool sizes (ConfigError naming the option)."""
        _check_ints(
            self, (("fs_workers", 0), ("fs_queue", 0), ("work_workers", 0), ("work_queue", 0))
        )
        for pool in ("fs", "work"):
            workers = getattr(self, f"{pool}_workers")
            queue = getattr(self, f"{pool}_queue")
            if workers > _MAX_WORKERS:
                raise ConfigError(f"--{pool}-workers {workers} is absurd (max {_MAX_WORKERS})")
            if queue > _MAX_QUEUE:
                raise ConfigError(f"--{pool}-queue {queue} is absurd (max {_MAX_QUEUE})")
            if workers == 0 and queue > 0:
                raise ConfigError(f"--{pool}-queue needs --{pool}-workers > 0 (0 workers = inline)")
        return self


@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """Content features (docs/features.md, "Content options" in docs/cli.md)."""

    listing: bool = True
    listing_max_entries: int = 10_000
    listing_cache_size: int = 8 * _MiB  # rendered listings shared by identical requests
    download: tuple[str, ...] = ()
    spa: str | None = None  # None = off; else a file path relative to the root
    precompressed: bool = True
    compress_max_size: int = 8 * _MiB  # 0 = no on-the-fly compression
    compress_cache_size: int = 64 * _MiB
    digest: bool = False
    # --archives: ?archive=zip|tar.gz on a listed directory (serverio.archive).
    archives: bool = False
    archive_max_entries: int = 100_000
    archive_max_bytes: int = 16 * 1024 * _MiB

    def validate(self) -> ContentPolicy:
        """Check the content options (ConfigError naming the option)."""
        _check_ints(
            self,
            (
                ("listing_max_entries", 1),
                ("listing_cache_size", 0),
                ("compress_max_size", 0),
                ("compress_cache_size", 0),
                ("archive_max_entries", 1),
                ("archive_max_bytes", 1),
            ),
        )
        if self.listing_max_entries > _MAX_LISTING_ENTRIES:
            raise ConfigError(
                f"--listing-max-entries {self.listing_max_entries} is absurd "
                f"(max {_MAX_LISTING_ENTRIES})"
            )
        for glob in self.download:
            if not glob or "\x00" in glob or glob.startswith("/"):
                raise ConfigError(f"--download {glob!r} must be a non-empty relative glob")
        if self.spa is not None and not _is_relative_path(self.spa):
            raise ConfigError(
                f"--spa-file {self.spa!r} must be a file path below the root "
                "(no leading '/', no '.' or '..' segments, no hidden segments)"
            )
        return self


_MAX_HSTS = 2**31 - 1  # delta-seconds (RFC 6797 §6.1.1); caches cap at this


@dataclass(frozen=True, slots=True)
class TlsPolicy:
    """Certificates and HSTS (serverio.net.tls, the TLS fields of the pure layer)."""

    certfile: str | None = None
    keyfile: str | None = None
    keyfile_password_env: str | None = None  # the NAME of a variable, never the password
    keyfile_password_file: str | None = None  # --tls-password-file: a file holding it
    # --hsts SECONDS: Strict-Transport-Security on TLS responses (RFC 6797);
    # None = off.  --hsts-include-subdomains adds includeSubDomains.
    hsts: int | None = None
    hsts_include_subdomains: bool = False
    # --dev-tls: a local CA and leaf made in dev_tls_dir (serverio.ops.devtls);
    # the CLI then fills certfile/keyfile with the leaf.
    dev_tls: bool = False
    dev_tls_dir: str | None = None

    def validate(self) -> TlsPolicy:
        """Check the files and their combinations (ConfigError naming the option)."""
        if self.dev_tls and self.certfile is not None:
            raise ConfigError("--dev-tls makes its own certificate: drop --certfile/--keyfile")
        if self.dev_tls_dir is not None and not self.dev_tls:
            raise ConfigError("--dev-tls-dir needs --dev-tls")
        if self.keyfile is not None and self.certfile is None:
            raise ConfigError("--keyfile needs --certfile")
        if self.keyfile_password_env is not None:
            if self.certfile is None:
                raise ConfigError("--keyfile-password-env needs --certfile")
            if self.keyfile_password_env not in os.environ:
                raise ConfigError(
                    f"--keyfile-password-env: variable {self.keyfile_password_env!r} is not set"
                )
        if self.keyfile_password_file is not None:
            if self.certfile is None:
                raise ConfigError("--tls-password-file needs --certfile")
            if self.keyfile_password_env is not None:
                raise ConfigError(
                    "--tls-password-file and --keyfile-password-env exclude each other"
                )
        for name in ("certfile", "keyfile", "keyfile_password_file"):
            path = getattr(self, name)
            if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
                opt = "tls-password-file" if name == "keyfile_password_file" else name
                raise ConfigError(f"--{opt} {path!r} is not a readable file")
        self._validate_hsts()
        return self

    def _validate_hsts(self) -> None:
        if self.hsts is None:
            if self.hsts_include_subdomains:
                raise ConfigError("--hsts-include-subdomains needs --hsts SECONDS")
            return
        if not isinstance(self.hsts, int) or not 0 <= self.hsts <= _MAX_HSTS:
            raise ConfigError(f"--hsts must be seconds from 0 to {_MAX_HSTS}, got {self.hsts!r}")
        if self.certfile is None and not self.dev_tls:
            # Sent on TLS responses only (RFC 6797 §7.2): without TLS it would
            # never go out.  Behind a TLS-terminating proxy, set it there.
            raise ConfigError("--hsts needs --certfile (it is only sent over TLS)")


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """The access and error logs (serverio.observe)."""

    access_log: str = "common"
    quiet: bool = False
    access_log_file: str | None = None  # reopened on SIGHUP; stderr when unset
    log_level: str = "info"
    verbose: bool = False  # -v: every counter at exit, not only the summary line

    def validate(self) -> LogPolicy:
        """Check the formats and the log file's directory (ConfigError naming the option)."""
        if self.access_log not in ACCESS_LOG_FORMATS:
            raise ConfigError(
                f"--access-log must be one of {', '.join(ACCESS_LOG_FORMATS)}, "
                f"got {self.access_log!r}"
            )
        if self.access_log_file is not None:
            parent = os.path.dirname(os.path.abspath(self.access_log_file))
            if not os.path.isdir(parent):
                raise ConfigError(f"--access-log-file: directory {parent!r} does not exist")
        if self.log_level not in LOG_LEVELS:
            levels = ", ".join(LOG_LEVELS)
            raise ConfigError(f"--log-level must be one of {levels}, got {self.log_level!r}")
        return self


_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True, slots=True)
class WatchPolicy:
    """Development mode (docs/features.md "Live reload"): watch the root and
    reload browsers over Server-Sent Events under the reserved prefix."""

    watch: bool = False
    watch_prefix: str = "/.serverio"
    watch_poll: bool = False  # force the polling watcher (network filesystems)
    # Event streams open at once (serverio.concurrency.broadcast.StreamSlots):
    # their own budget, outside --max-connections; past it, 503.
    watch_max_streams: int = 32
    open_browser: bool = False  # --open: the first URL in a browser once listening
    qr: bool = False  # --qr: a QR code of the first LAN URL (serverio.ops.qr)

    def validate(self, root: str) -> WatchPolicy:
        """Check the prefix against the served ``root`` (ConfigError naming the option)."""
        _check_ints(self, (("watch_max_streams", 1),))
        if not self.watch:
            return self
        # One dot segment: routed before the hidden-path rule, and the watcher
        # never reports changes under it (dot paths reload nothing).
        name = self.watch_prefix[2:]
        if (
            not self.watch_prefix.startswith("/.")
            or not name
            or not set(name) <= _PREFIX_CHARS
            or name.strip(".") == ""
        ):
            raise ConfigError(
                f"--watch-prefix must be one hidden path segment such as /.serverio, "
                f"got {self.watch_prefix!r}"
            )
        # A real file at a reserved path would be silently shadowed: refuse.
        for leaf in ("events", "livereload.js"):
            if os.path.lexists(os.path.join(root, self.watch_prefix[1:], leaf)):
                raise ConfigError(
                    f"--watch: {self.watch_prefix}/{leaf} is reserved for live reload, "
                    "but the served directory has a file there"
                )
        return self


HeaderRule = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]
# A [[writable]] table: (path glob, allowed methods) or (..., active mode).
WritableTable = tuple[str, tuple[str, ...]] | tuple[str, tuple[str, ...], str]
# An [[access]] table: (path glob, ((principal, (right, ...)), ...)).
AccessTable = tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]


@dataclass(frozen=True, slots=True)
class SitePolicy:
    """Site rules (serverio.site.rules; docs/features.md "Site rules"): the raw
    specifications, compiled once by serverio.site.service.load_site."""

    headers: tuple[str, ...] = ()  # --header "Name: value"
    cors: bool = False
    cors_origins: tuple[str, ...] = ()
    # --cors-writes: with --upload, the listed origins may also write
    # (preflights answer PUT, DELETE, POST on writable paths; the upload
    # form's CSRF rule accepts them).
    cors_writes: bool = False
    # [[headers]]: (path glob, ((name, value), ...), (removed name, ...))
    header_rules: tuple[HeaderRule, ...] = ()
    redirects: tuple[tuple[str, str, int], ...] = ()  # [[redirects]]: (from, to, status)
    rewrites: tuple[tuple[str, str], ...] = ()  # [[rewrites]]: (from, to)
    clean_urls: bool = False
    trailing_slash: str = "keep"
    error_pages: tuple[tuple[str, str], ...] = ()  # [errors]: ("404" | "5xx", page)
    auth: tuple[tuple[str, str], ...] = ()  # [[auth]]: (path glob, users file)
    # [[writable]]: (path glob, allowed methods "put" / "delete"[, active]);
    # with --upload, empty means the whole root is writable.  ``active``
    # (one of ACTIVE_MODES, "" or left out: --upload-active) is how active
    # files under it are served (serverio.http.active).
    writable: tuple[WritableTable, ...] = ()
    # [[access]]: (path glob, ((principal, (right, ...)), ...)) per table;
    # --allow: its one-line rules (serverio.site.rights.allow_spec);
    # [[group]]: (name, (member, ...)).  With any, --auth-file / --auth
    # name the users the rules give rights to (docs/reference/access.md).
    access: tuple[AccessTable, ...] = ()
    allow: tuple[str, ...] = ()
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    auth_file: str | None = None  # --auth-file: the whole site
    # --auth USER:PASS: users-file lines (USER:HASH, hashed when parsed) for
    # the whole site, beside --auth-file's; off loopback only with TLS or
    # --allow-plain-auth (_check_plain_auth).
    auth_users: tuple[str, ...] = ()
    allow_plain_auth: bool = False
    # --secret-file: the key that signs session cookies, share links and
    # resumable-upload URLs (serverio.secret; None: a per-user one).
    secret_file: str | None = None
    # --trusted-proxies: peers whose Forwarded / X-Forwarded-For name the
    # client (serverio.http.forwarded); empty: trust no one.
    trusted_proxies: tuple[str, ...] = ()
    # --allowed-hosts: the Host names served besides the expected ones
    # (serverio.http.hosts): "name", ".name" (it and below), "*.name"
    # (below only), "*" (no check at all).
    allowed_hosts: tuple[str, ...] = ()
    rules_source: str = ""  # the file the tables came from (for messages)
    # Derived by validate() from trusted_proxies.
    proxy_networks: tuple[IPNetwork, ...] = field(default=(), compare=False)
    # Derived by Config.validate(): is the Host of every request checked
    # (serverio.http.hosts)?  With writes or the proxy on, or --allowed-hosts
    # given; never with --allowed-hosts '*'.
    check_hosts: bool = field(default=False, compare=False)

    @property
    def path_rules(self) -> bool:
        """Are there rules per path on who may have what (``[[auth]]``,
        ``[[access]]``, ``--allow``)?  Then a symlink inside the root is
        resolved, and its target's rules decided too."""
        return bool(self.auth or self.access or self.allow)

    def validate(self, writes_or_proxy: bool = False) -> SitePolicy:
        """Parse the trusted proxies and the allowed hosts; a copy with
        proxy_networks and check_hosts filled in.  ``writes_or_proxy``:
        --upload, --webdav or a proxy route is on (the Host check's default)."""
        try:
            networks = parse_networks(self.trusted_proxies)
        except ValueError as exc:
            raise ConfigError(f"--trusted-proxies: {exc}") from None
        names = self.allowed_hosts
        for name in names:
            if name != "*" and _ALLOWED_HOST.fullmatch(name) is None:
                raise ConfigError(
                    f"--allowed-hosts: {name!r} is not a host name (NAME, .NAME or *.NAME; "
                    "no scheme, port or path), nor '*'"
                )
        check = (writes_or_proxy or bool(names)) and "*" not in names
        return dataclasses.replace(self, proxy_networks=networks, check_hosts=check)


# One --allowed-hosts value: a DNS name (letters, digits, '-', '_', dots;
# RFC 1123 §2.1 loosely, '_' as some LAN names have it) with an optional
# leading "." or "*." (a domain and its subdomains / its subdomains only),
# an IPv4 address, or an IPv6 one in brackets.
_ALLOWED_HOST = re.compile(r"(?:\*?\.)?[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True, slots=True)
class UploadPolicy:
    """Writes: PUT and DELETE (serverio.upload; docs/features.md "Uploads")."""

    upload: bool = False  # --upload: PUT and DELETE enabled (off: read-only)
    max_upload_size: int = 1024 * _MiB  # 413 past it (declared or streamed)
    max_uploads: int = 16  # writes in flight; 503 past it
    # --max-uploads-per-client: writes one client may have in flight (503
    # past it); 0: half of max_uploads, at least 1 (serverio.upload.slots).
    max_uploads_per_client: int = 0
    # --min-upload-rate: bytes per second an upload's body must keep up once
    # the client was waited for RATE_GRACE seconds (408 below it); 0: off.
    min_upload_rate: int = 1024
    min_free_space: int = 64 * _MiB  # 507 when a write would leave less free
    # --on-duplicate: a form upload's file whose name is taken is refused
    # (409), renamed "a (1).txt", or overwrites it (serverio.upload.form).
    on_duplicate: str = "error"
    # --upload-active: an active file (HTML, SVG, XML, JavaScript) under a
    # writable path is served with CSP sandbox, as an attachment, or inline
    # (serverio.http.active; a [[writable]] table's ``active`` overrides).
    upload_active: str = "sandbox"
    # Serve writes on a non-loopback address without an auth rule over them.
    allow_anonymous_writes: bool = False
    # --no-fsync: a PUT's or form upload's file is renamed into place without
    # fsync of the file or its directory (still atomic; not durable across a
    # power loss or kernel crash).  COPY, MOVE, MKCOL and PROPPATCH still sync.
    no_fsync: bool = False
    # --webdav: WebDAV class 1 and 2 on the whole root (serverio.dav; it implies
    # --upload: PUT and DELETE are its methods too).
    webdav: bool = False
    # --webdav-prefix: WebDAV only at and under this route ("/dav"; it
    # implies --webdav); None: the whole root.  validate() normalises it.
    webdav_prefix: str | None = None
    # PROPFIND Depth: infinity answers at most this many resources; 0 refuses
    # it (403 with DAV:propfind-finite-depth, RFC 4918 §9.1).
    webdav_depth_infinity: int = 0
    # COPY, MOVE and DELETE of a collection: at most this many members.
    webdav_max_tree: int = 10_000
    # WebDAV locks (serverio.dav.locks): live locks per process at most (a
    # LOCK past it: 507), and the longest timeout granted, seconds.
    webdav_max_locks: int = 4096
    webdav_lock_timeout_max: int = 86400
    # ... at most this many taken by one client address (IPv6: its /64),
    # at most this many covering one resource (each is listed in its
    # lockdiscovery), and a lock without credentials held this long at most.
    webdav_max_locks_per_client: int = 64
    webdav_max_locks_per_resource: int = 16
    webdav_anonymous_lock_timeout_max: int = 3600

    def validate(self) -> UploadPolicy:
        """Check the bounds (ConfigError naming the option); ``--webdav``
        turns ``upload`` on."""
        _check_ints(
            self,
            (
                ("max_upload_size", 0),
                ("max_uploads", 1),
                ("max_uploads_per_client", 0),
                ("min_upload_rate", 0),
                ("min_free_space", 0),
                ("webdav_depth_infinity", 0),
                ("webdav_max_tree", 1),
                ("webdav_max_locks", 1),
                ("webdav_lock_timeout_max", 1),
                ("webdav_max_locks_per_client", 1),
                ("webdav_max_locks_per_resource", 1),
                ("webdav_anonymous_lock_timeout_max", 1),
            ),
        )
        if self.on_duplicate not in ON_DUPLICATE:
            raise ConfigError(
                f"--on-duplicate must be one of {', '.join(ON_DUPLICATE)}, "
                f"got {self.on_duplicate!r}"
            )
        if self.upload_active not in ACTIVE_MODES:
            raise ConfigError(
                f"--upload-active must be one of {', '.join(ACTIVE_MODES)}, "
                f"got {self.upload_active!r}"
            )
        if self.webdav_prefix is not None:
            prefix = normal_route(self.webdav_prefix, "--webdav-prefix") or None
            if prefix != self.webdav_prefix or not self.webdav:
                return dataclasses.replace(self, webdav_prefix=prefix, webdav=True).validate()
        if self.webdav and not self.upload:
            return dataclasses.replace(self, upload=True).validate()
        if self.max_uploads > _MAX_QUEUE:
            raise ConfigError(f"--max-uploads {self.max_uploads} is absurd (max {_MAX_QUEUE})")
        return self


# ---------------------------------------------------------------- reverse proxy


@dataclass(frozen=True, slots=True)
class ProxyRoute:
    """One proxy route (``--proxy PREFIX=URL`` or a ``[[proxy]]`` table):
    requests whose path is ``prefix`` or below it (segment boundaries) go
    to the upstream.  ``host`` and ``port`` for ``http://host:port``;
    ``unix`` the socket path of ``unix:/path`` (then host is "" and port 0).
    ``set_up``/``remove_up``: request fields set/removed before sending
    upstream; ``set_down``/``remove_down``: response fields, on the way
    back; the ``*_timeout`` fields override the ``--proxy-*-timeout``
    options for this route.  Upstreams come from configuration only,
    never from a request."""

    prefix: str  # "/api": no trailing slash ("/" for everything)
    upstream: str  # as written, for messages and --print-config
    host: str = ""
    port: int = 0
    unix: str = ""
    base: str = ""  # the upstream URL's own path prefix ("" or "/v1")
    strip_prefix: bool = False
    set_up: tuple[tuple[str, str], ...] = ()
    remove_up: tuple[str, ...] = ()
    set_down: tuple[tuple[str, str], ...] = ()
    remove_down: tuple[str, ...] = ()
    # This route's own deadlines ([[proxy]] connect-timeout, head-timeout,
    # idle-timeout, total-timeout); None: the --proxy-*-timeout option's.
    # The Host sent upstream for this route ([[proxy]] host = "pass" or
    # "upstream"); None: --proxy-host's.
    host_mode: str | None = None
    connect_timeout: float | None = None
    head_timeout: float | None = None
    idle_timeout: float | None = None
    total_timeout: float | None = None
    # [[proxy]] pass-authorization: send the client's Authorization on even
    # when serverio checked it (an [[auth]] rule applied and passed); by
    # default such credentials, meant for serverio, are not forwarded.
    pass_authorization: bool = False
    # [[proxy]] case-insensitive: the upstream reads paths without regard
    # to case (IIS, some frameworks), so the [[auth]] rules match the paths
    # under this prefix case-insensitively too (serverio.site.access).
    case_insensitive: bool = False

    @property
    def loopback(self) -> bool:
        """The upstream is this machine (a Unix socket or a loopback host)."""
        if self.unix or self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def authority(self) -> str:
        """The upstream's Host value (``--proxy-host upstream``)."""
        if self.unix:
            return "localhost"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == 80 else f"{host}:{self.port}"


def parse_upstream(text: str, where: str) -> tuple[str, int, str, str]:
    """``http://host[:port][/path]`` or ``unix:/path`` -> (host, port, unix,
    base path); ConfigError naming ``where`` otherwise.  No https (the
    client speaks plain HTTP/1.1), no user-info, query or fragment."""
    if text.startswith("unix:"):
        path = text[5:]
        if not path.startswith("/") or "\x00" in path:
            raise ConfigError(f"{where}: a unix upstream is unix:/absolute/path, got {text!r}")
        return "", 0, path, ""
    if not text.startswith("http://"):
        raise ConfigError(
            f"{where}: the upstream must be http://HOST:PORT or unix:/PATH, got {text!r}"
        )
    rest = text[7:]
    authority, slash, path = rest.partition("/")
    base = (slash + path).rstrip("/")
    if "@" in authority or any(c in rest for c in "?# \t\\") or not authority:
        raise ConfigError(f"{where}: invalid upstream URL {text!r}")
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ("" if not tail else "x")
    else:
        host, _, port_text = authority.partition(":")
    if not host or (port_text and (not port_text.isdigit() or not 0 < int(port_text) < 65536)):
        raise ConfigError(f"{where}: invalid upstream host or port in {text!r}")
    return host, int(port_text) if port_text else 80, "", base


def parse_proxy_spec(text: str, where: str = "--proxy") -> ProxyRoute:
    """``PREFIX=URL`` (``/api=http://127.0.0.1:3000``) -> a ProxyRoute."""
    prefix, eq, url = text.partition("=")
    if not eq:
        raise ConfigError(f"{where} must be PREFIX=URL, got {text!r}")
    return proxy_route(prefix, url, where)


def proxy_route(prefix: str, url: str, where: str, **more: Any) -> ProxyRoute:
    """A checked ProxyRoute: the prefix an absolute path of plain segments."""
    segments = prefix.strip("/").split("/")
    if (
        not prefix.startswith("/")
        or any(s in (".", "..") for s in segments)
        or any(c in prefix for c in "%?#\\\x00")
        or "//" in prefix
    ):
        raise ConfigError(
            f"{where}: the prefix must be an absolute path such as /api, got {prefix!r}"
        )
    host, port, unix, base = parse_upstream(url, where)
    norm = "/" + "/".join(s for s in segments if s)
    return ProxyRoute(norm, url, host, port, unix, base, **more)


@dataclass(frozen=True, slots=True)
class ProxyPolicy:
    """The reverse proxy (serverio.proxy; docs/features.md "Reverse proxy")."""

    proxy: tuple[str, ...] = ()  # --proxy PREFIX=URL
    proxy_routes: tuple[ProxyRoute, ...] = ()  # [[proxy]] tables
    proxy_max_inflight: int = 64  # requests per upstream at once; past it they wait
    # Past --proxy-max-inflight a request waits for a slot, first come first
    # served: at most proxy_queue of them per upstream, each at most
    # proxy_queue_timeout seconds; then 503.  Bounded both ways, so a burst
    # (a page's 500 modules from a dev server, 512 clients) is absorbed and
    # a stuck upstream still answers 503 within the timeout.
    proxy_queue: int = 1024
    proxy_queue_timeout: float = 10.0
    proxy_connect_timeout: float = 5.0
    proxy_head_timeout: float = 60.0  # request sent -> response head
    proxy_idle_timeout: float = 60.0  # between two response body chunks
    proxy_total_timeout: float = 3600.0  # the whole exchange
    # A tunnel (after a 101) with no byte either way for this long is
    # closed; WebSocket peers ping far more often (browsers' and vite's
    # keep-alives run every 30 s or so), a dead peer is noticed in minutes.
    proxy_tunnel_idle: float = 300.0
    # WebSocket/Upgrade tunnels have their own budget, apart from the
    # request slots (an idle tunnel must not starve requests): at most
    # this many at once, every upstream together, and a per-client share
    # of them, so that one client cannot take them all.
    proxy_max_tunnels: int = 256
    proxy_max_tunnels_per_client: int = 32
    proxy_host: str = "pass"  # pass | upstream: the Host sent upstream
    # Idle keep-alive connections kept per upstream: as many as may be in
    # flight, so that a steady load never opens and closes connections.
    proxy_keepalive: int = 64
    # --proxy-fallback URL: what no reserved path, route or file answers
    # (a GET/HEAD the files answer 404, any other method outside a route).
    proxy_fallback: str | None = None
    # Derived by validate(): the --proxy specs and the tables, parsed, and
    # the fallback as a route of prefix "/".
    routes: tuple[ProxyRoute, ...] = field(default=(), compare=False)
    fallback: ProxyRoute | None = field(default=None, compare=False)

    def validate(self) -> ProxyPolicy:
        _check_ints(
            self,
            (
                ("proxy_max_inflight", 1),
                ("proxy_keepalive", 0),
                ("proxy_queue", 0),
                ("proxy_max_tunnels", 0),
                ("proxy_max_tunnels_per_client", 1),
            ),
        )
        _check_seconds(
            self,
            (
                "proxy_queue_timeout",
                "proxy_connect_timeout",
                "proxy_head_timeout",
                "proxy_idle_timeout",
                "proxy_total_timeout",
                "proxy_tunnel_idle",
            ),
        )
        if self.proxy_host not in PROXY_HOST_MODES:
            raise ConfigError(f"--proxy-host must be pass or upstream, got {self.proxy_host!r}")
        routes = tuple(parse_proxy_spec(s) for s in self.proxy) + self.proxy_routes
        seen: set[str] = set()
        for r in routes:
            if r.host_mode is not None and r.host_mode not in PROXY_HOST_MODES:
                raise ConfigError(f"[[proxy]] {r.prefix}: host must be pass or upstream")
            if r.prefix in seen:
                raise ConfigError(f"--proxy: the prefix {r.prefix} is routed twice")
            seen.add(r.prefix)
        fallback = None
        if self.proxy_fallback is not None:
            fallback = proxy_route("/", self.proxy_fallback, "--proxy-fallback")
        return dataclasses.replace(self, routes=routes, fallback=fallback)

    @property
    def enabled(self) -> bool:
        """A route or a fallback is configured (the proxy hook is installed)."""
        return bool(self.routes) or self.fallback is not None


PROXY_HOST_MODES = ("pass", "upstream")


Policy = (
    ListenPolicy
    | ConnectionPolicy
    | H2Policy
    | FilesPolicy
    | PoolPolicy
    | ContentPolicy
    | TlsPolicy
    | LogPolicy
    | WatchPolicy
    | SitePolicy
    | UploadPolicy
    | ProxyPolicy
)


@dataclass(frozen=True, slots=True)
class Config:
    """Every policy of one server, one object per concern.

    Construct with :meth:`of` (settings by field name, routed to their
    policy) or from the policies, then call :meth:`validate`.
    """

    directory: str = "."
    listeners: ListenPolicy = field(default_factory=ListenPolicy)
    conn: ConnectionPolicy = field(default_factory=ConnectionPolicy)
    h2: H2Policy = field(default_factory=H2Policy)
    files: FilesPolicy = field(default_factory=FilesPolicy)
    pools: PoolPolicy = field(default_factory=PoolPolicy)
    content: ContentPolicy = field(default_factory=ContentPolicy)
    tls: TlsPolicy = field(default_factory=TlsPolicy)
    log: LogPolicy = field(default_factory=LogPolicy)
    live: WatchPolicy = field(default_factory=WatchPolicy)
    site: SitePolicy = field(default_factory=SitePolicy)
    uploads: UploadPolicy = field(default_factory=UploadPolicy)
    proxy: ProxyPolicy = field(default_factory=ProxyPolicy)

    # Derived, filled by validate(): the absolute real path of the root, and
    # SOURCE_DATE_EPOCH (seconds) when the environment sets it: the mtime
    # reproducible builds stamp on every file.
    root: str = field(default="", compare=False)
    source_date_epoch: int | None = field(default=None, compare=False)

    @classmethod
    def of(cls, **settings: Any) -> Config:
        """A Config from settings named by field (``Config.of(port=0, index=("a",))``).

        Raises TypeError for a name that is no field of any policy.
        """
        return cls().evolve(**settings)

    def evolve(self, **settings: Any) -> Config:
        """A copy with the named settings changed, each in its own policy."""
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in settings.items():
            group = FIELD_GROUP.get(name)
            if group is None:
                raise TypeError(f"Config has no setting {name!r}")
            if group:
                grouped.setdefault(group, {})[name] = value
            else:
                top[name] = value
        for group, values in grouped.items():
            top[group] = dataclasses.replace(getattr(self, group), **values)
        return dataclasses.replace(self, **top)

    def value(self, name: str) -> Any:
        """The setting named by field (``cfg.value("port")`` is ``cfg.listeners.port``)."""
        group = FIELD_GROUP.get(name)
        if group is None:
            raise AttributeError(f"Config has no setting {name!r}")
        return getattr(getattr(self, group), name) if group else getattr(self, name)

    def validate(self) -> Config:
        """Check every policy; return a copy with derived fields filled in.

        Raises :class:`ConfigError` with a one-line message naming the option.
        """
        conn, h2, files = self.conn.validate(), self.h2.validate(), self.files.validate()
        pools, content, log = self.pools.validate(), self.content.validate(), self.log.validate()
        tls, listeners = self.tls.validate(), self.listeners.validate()
        # The rules between policies.
        if listeners.listen_tls and tls.certfile is None and not tls.dev_tls:
            raise ConfigError("--listen-tls needs --certfile")
        uploads = self.uploads.validate()
        if uploads.webdav and listeners.workers > 1:
            # Dead properties and (class 2) locks live in one process.
            raise ConfigError("--webdav cannot be used with --workers > 1 (locks are per process)")
        if uploads.upload and not uploads.allow_anonymous_writes:
            # Named as given: --webdav (or --webdav-prefix) implies --upload.
            flag = "--webdav" if uploads.webdav else "--upload"
            _check_write_auth(listeners, self.site, flag)
        if self.site.auth_users and not self.site.allow_plain_auth:
            _check_plain_auth(listeners, tls)
        proxy = self.proxy.validate()
        if content.spa is not None and self.proxy.proxy_fallback is not None:
            # Both answer "what nothing else answers": one must decide.
            raise ConfigError("--spa and --proxy-fallback cannot be used together")
        if not os.path.isdir(self.directory):
            raise ConfigError(f"directory {self.directory!r} does not exist or is not a directory")
        root = os.path.realpath(self.directory)
        epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
        return dataclasses.replace(
            self,
            listeners=listeners,
            conn=conn,
            h2=h2,
            files=files,
            pools=pools,
            content=content,
            tls=tls,
            log=log,
            live=self.live.validate(root),
            site=self.site.validate(uploads.upload or proxy.enabled),
            uploads=uploads,
            proxy=proxy,
            root=root,
            source_date_epoch=int(epoch) if epoch.isdigit() else None,
        )


# Group attribute of Config -> its policy class, in declaration order: the
# fields whose default is a policy instance (the factory is the class).
POLICIES: dict[str, type[Policy]] = {
    f.name: f.default_factory  # type: ignore[misc]  # the factory is the policy class
    for f in dataclasses.fields(Config)
    if f.default_factory is not dataclasses.MISSING
}


def _field_groups() -> dict[str, str]:
    out = {f.name: "" for f in dataclasses.fields(Config) if f.name not in POLICIES}
    for group, policy in POLICIES.items():
        for f in dataclasses.fields(policy):
            if f.name in out:
                raise TypeError(f"setting {f.name!r} is declared twice ({group})")
            out[f.name] = group
    return out


# Setting name -> the Config attribute of its policy ("" for Config's own
# fields): every setting is one field of one policy.
FIELD_GROUP: dict[str, str] = _field_groups()


def field_path(name: str) -> str:
    """Where a setting lives: ``"files.index"``, or ``"directory"`` for a root field."""
    group = FIELD_GROUP[name]
    return f"{group}.{name}" if group else name


_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _glob_prefix(pattern: str) -> str | None:
    """``/a/b`` for ``/a/b/**``, ``""`` for ``/**``; None for any other glob."""
    if not pattern.endswith("/**"):
        return None
    prefix = pattern[:-3]
    if any(c in prefix for c in "*?[]{}"):
        return None
    return prefix


def wants_site_rules(cfg: Config) -> bool:
    """Does ``cfg`` set anything the site rules (serverio.site) compile?
    When not, the rules are never compiled nor imported (a plain static
    start: docs/performance.md "Start-up"); when it does and they compile
    to nothing (``-H 'X:'`` alone), load_site says None.  A superset of
    :attr:`serverio.site.rules.SiteRules.empty`'s test, on the settings."""
    site = cfg.site
    return bool(
        site.headers
        or site.header_rules
        or site.cors
        or site.cors_origins
        or site.redirects
        or site.rewrites
        or site.clean_urls
        or site.trailing_slash != "keep"
        or site.error_pages
        or site.auth
        or site.access
        or site.allow
        or site.auth_file is not None
        or site.auth_users
        or cfg.tls.hsts is not None
        or (cfg.uploads.upload and site.writable)
    )


def _public_hosts(listeners: ListenPolicy) -> list[str]:
    """The listening addresses other machines may reach ("*": a wildcard)."""
    hosts = [listeners.host] if not (listeners.listen or listeners.listen_tls) else []
    hosts += [parse_listen(a, "--listen")[0] for a in listeners.listen]
    hosts += [parse_listen(a, "--listen-tls")[0] for a in listeners.listen_tls]
    public = [h or "*" for h in hosts if not _loopback(h)]
    if listeners.fds:
        public.append("an inherited socket")
    return public


def _check_plain_auth(listeners: ListenPolicy, tls: TlsPolicy) -> None:
    """``--auth USER:PASS`` off loopback needs TLS (RFC 7617 §4: basic
    credentials are cleartext), unless ``--allow-plain-auth``."""
    if tls.certfile is not None or tls.dev_tls:
        plain = [parse_listen(a, "--listen")[0] for a in listeners.listen]
        public = [h or "*" for h in plain if not _loopback(h)]
    else:
        public = _public_hosts(listeners)
    if public:
        raise ConfigError(
            f"--auth on {public[0]} without TLS: the password would cross the network "
            "readable (add --certfile or --dev-tls, or --allow-plain-auth)"
        )


def _check_write_auth(listeners: ListenPolicy, site: SitePolicy, flag: str = "--upload") -> None:
    """``--upload`` on an address other than loopback: every writable
    prefix must lie under an ``[[auth]]`` rule ``PREFIX/**`` (or
    ``--auth-file``), unless ``--allow-anonymous-writes``.  With
    ``[[access]]`` / ``--allow`` rules: no rule may give ``anonymous`` a
    write right (what reads allow does not matter: public reads, signed-in
    writes), since every other write needs a signed-in user."""
    public = _public_hosts(listeners)
    if not public:
        return
    if site.access or site.allow:
        anonymous = _anonymous_write(site)
        if anonymous is not None:
            raise ConfigError(
                f"{flag} on {public[0]}: {anonymous} gives anonymous clients a write right "
                "(give it to authenticated, a group or users instead, or --allow-anonymous-writes)"
            )
        return
    if site.auth_file is not None or site.auth_users:
        return
    covers = [p for p in (_glob_prefix(g) for g, _ in site.auth) if p is not None]
    writable = [_glob_prefix(g) for g, *_ in site.writable] or [""]
    for w in writable:
        if w is None:
            continue  # not a writable glob at all: compile_writable refuses it
        if not any(w == a or w.startswith(a + "/") or a == "" for a in covers):
            raise ConfigError(
                f"{flag} on {public[0]}: writable path {w}/** is under no "
                "[[auth]] rule PREFIX/** (add one, or --auth-file, or --allow-anonymous-writes)"
            )


# The write rights (serverio.http.access.WRITES), spelt as rules spell them.
_WRITE_RIGHTS = frozenset({"upload", "overwrite", "delete", "mkdir", "lock"})


def _anonymous_write(site: SitePolicy) -> str | None:
    """The first ``[[access]]`` table or ``--allow`` rule that gives
    ``anonymous`` a write right (as the rule is named in messages), or None.
    Read at the syntax level only: the rules themselves are checked when
    compiled (serverio.site.rights)."""
    source = site.rules_source or "--config"
    for i, (_, grants) in enumerate(site.access):
        for principal, rights in grants:
            if principal == "anonymous" and _WRITE_RIGHTS & {r.strip().lower() for r in rights}:
                return f"{source}: [[access]] #{i + 1}"
    for line in site.allow:
        principals, _, rest = line.partition(":")
        words = rest.partition("@")[0]
        names = {p.strip() for p in principals.split(",")}
        if "anonymous" in names and _WRITE_RIGHTS & {r.strip().lower() for r in words.split(",")}:
            return f"--allow {line!r}"
    return None


def _same_host(a: str, b: str) -> bool:
    return a == b or a in _WILDCARDS or b in _WILDCARDS


def parse_host_port(text: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); ConfigError otherwise."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        sep = ""  # an unbracketed IPv6 literal: ambiguous
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"{option} must be HOST:PORT (IPv6 as [ADDR]:PORT), got {text!r}")
    return host, int(port_text)


# A listener's own protocol choice: ``--listen HOST:PORT/h1`` serves
# HTTP/1.1 only there (no h2c preface, ALPN http/1.1 only); ``/h2`` allows
# HTTP/2 there even with --no-http2.  Without a suffix, --http2 decides.
LISTEN_PROTOCOLS = ("h1", "h2")


def parse_listen(text: str, option: str) -> tuple[str, int, str | None]:
    """``HOST:PORT[/h1|/h2]`` -> (host, port, protocol or None); ConfigError otherwise."""
    address, slash, proto = text.rpartition("/")
    if not slash:
        address, proto = text, ""
    elif proto not in LISTEN_PROTOCOLS:
        raise ConfigError(f"{option}: the protocol after '/' must be h1 or h2, got {text!r}")
    host, port = parse_host_port(address, option)
    return host, port, proto or None


def listener_http2(proto: str | None, default: bool) -> bool:
    """Whether a listener with protocol suffix ``proto`` speaks HTTP/2."""
    return default if proto is None else proto == "h2"


def normal_route(route: str, option: str) -> str:
    """A mount route or route prefix in its one spelling: ``/docs`` for
    ``/docs`` and ``/docs/``, ``""`` for ``/``.  ConfigError (naming
    ``option``) unless it starts with ``/`` and its segments are plain
    names: no ``.``/``..``, no hidden (dot) name, no percent-encoding,
    backslash, control character or empty segment.  Routes are compared
    with the *decoded* segments of a request (serverio.http.target), so an
    encoded character in a route could never match."""
    if not route.startswith("/"):
        raise ConfigError(f"{option}: route {route!r} must start with '/'")
    body = route[1:-1] if route.endswith("/") else route[1:]
    if not body:
        return ""
    for seg in body.split("/"):
        bad = (
            not seg
            or seg.startswith(".")
            or any(c in "%\\?#" or ord(c) < 0x20 or ord(c) == 0x7F for c in seg)
        )
        if bad:
            raise ConfigError(
                f"{option}: route {route!r} must be '/'-separated plain names "
                "(no '.', '..', dot names, percent-encoding, backslash, '?', '#' "
                "or empty segments)"
            )
    return "/" + body


def _opt(name: str) -> str:
    return name.replace("_", "-")


def _is_relative_path(v: str) -> bool:
    segments = v.split("/")
    return (
        bool(v)
        and "\x00" not in v
        and "\\" not in v
        and all(s and not s.startswith(".") for s in segments)
    )


def _is_field_value(v: str) -> bool:
    return v == v.strip() and all(0x20 <= ord(c) < 0x7F for c in v)
