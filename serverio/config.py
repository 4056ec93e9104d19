"""Every policy knob, in one narrow policy object per concern.

A :class:`Config` holds the policies (:class:`ListenPolicy`,
:class:`ConnectionPolicy`, :class:`FilesPolicy` ...) and the derived root
fields; each is immutable and validated once, at start-up (each policy
validates itself, :meth:`Config.validate` adds the rules between them).  The
hot path reads attributes and never re-parses anything; code that needs one
concern takes that policy, not the whole Config.  Defaults are justified in
docs/cli.md.

Each setting is declared once, on its field (:data:`FIELD_GROUP` says which
policy holds it)::

    webdav_max_locks: int = setting(
        4096, ("--webdav-max-locks",), "most WebDAV locks held at once", "Uploads",
        metavar="N", parse="int", ge=1,
    )

:func:`setting` returns ``dataclasses.field(default=4096, metadata=...)``
typed as its default, so the field stays an ``int`` for ``mypy --strict``
and the default is written nowhere else.  The metadata (:class:`Declared`)
holds the rest: the flags (the first long one is the TOML key and names
the ``SERVERIO_*`` variable), help, group, metavar, value parser, choices
and bounds.  From it are derived: the choice and bound checks
(:func:`check_declared`, called by each policy's ``validate``, with the
one-line messages naming the flag), serverio.ops.options' command line
(``--help``, ``--help-all``, the TOML keys, the environment), the man page,
the shell completions and docs/cli.md's option tables (serverio.ops.clidocs;
a test regenerates them and fails on drift).  The declaration sits on the field rather than on a
separate option object so that there is one place to read and nothing to
keep in step; :func:`setting` only packs its arguments (the command line's
objects are built by serverio.ops.options), so importing this module stays
cheap.  Checks between settings stay in the ``validate`` methods.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, Unpack

from .errors import ConfigError

__all__ = [
    "ACCESS_LOG_FORMATS",
    "ACTIVE_MODES",
    "ETAG_MODES",
    "FIELD_GROUP",
    "LOG_LEVELS",
    "ON_DUPLICATE",
    "POLICIES",
    "SETTING",
    "Config",
    "ConnectionPolicy",
    "ContentPolicy",
    "Declared",
    "FilesPolicy",
    "H2Policy",
    "ListenPolicy",
    "LogPolicy",
    "Policy",
    "PoolPolicy",
    "ProxyPolicy",
    "ProxyRoute",
    "ResumablePolicy",
    "SitePolicy",
    "TlsPolicy",
    "UploadPolicy",
    "UsersPolicy",
    "WatchPolicy",
    "check_declared",
    "declared",
    "field_path",
    "hide_glob_ok",
    "listener_http2",
    "normal_route",
    "parse_host_port",
    "parse_listen",
    "parse_networks",
    "parse_proxy_spec",
    "parse_upstream",
    "proxy_route",
    "setting",
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
# --proxy-host and [[proxy]] host: the Host sent upstream.
PROXY_HOST_MODES = ("pass", "upstream")

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


# ---------------------------------------------------------------- declarations
#
# Each setting is declared once, on its policy field: ``setting(default,
# flags, help, group, **more)`` is the field's default *and* its
# declaration (flags, metavar, value parser, bounds, choices, help, group),
# kept in the field's metadata under SETTING.  The bound and choice checks
# below, serverio.ops.options' command line (--help, TOML keys, SERVERIO_*
# variables), the man page, the completions and docs/cli.md's option tables
# all read it; nothing else states a default, a bound or a flag.
# setting() only packs its arguments: the Option objects of the command line
# are built by serverio.ops.options, the tables only when asked.

T = TypeVar("T")

SETTING = "serverio.setting"  # the metadata key of a field's Declared

if TYPE_CHECKING:  # names for the type checker only: nothing to build at import
    Kind = Literal["value", "flag", "toggle", "list", "extend", "positional", "version"]
    # How the command line, the environment and the TOML file parse a value
    # (serverio.ops.options maps each name to its converter).
    Parse = Literal["int", "float", "seconds", "bytes", "mount", "cidr", "user", "workers", "field"]

    class SettingKw(TypedDict, total=False):
        """What a declaration may add to its flags, help and group (see
        serverio.ops.options.Option for each, and :func:`setting`)."""

        kind: Kind
        metavar: str
        parse: Parse
        choices: tuple[str, ...]
        # Bounds, checked by validate() with a one-line ConfigError naming the
        # flag, and shown in docs/cli.md: ge/le/gt as the names say, cap an
        # upper bound past which a value is "absurd" (a typo, not a wish).
        ge: float
        le: float
        gt: float
        cap: float
        invert: bool
        split: str
        switch: tuple[str, str, str]
        sets: tuple[tuple[str, object], ...]
        two_token: bool
        merge: bool
        equals_alias: str
        toml: bool
        default_factory: Callable[[], Any]
        default_text: str
        name: str
        fs_path: bool


class Declared(tuple[tuple[str, ...], str, str, "SettingKw"]):
    """One setting's declaration, as :func:`setting` recorded it:
    ``(flags, help, group, more)``.  A tuple, made in C: one is built per
    setting at import, with no Python frame."""

    __slots__ = ()

    @property
    def flags(self) -> tuple[str, ...]:
        return self[0]

    @property
    def help(self) -> str:
        return self[1]

    @property
    def group(self) -> str:
        return self[2]

    @property
    def more(self) -> SettingKw:
        return self[3]

    @property
    def flag(self) -> str:
        """The flag messages name: the first long one."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0])

    def range_text(self) -> str:
        """The bounds in words ("1 to 10000", "at least 0", "above 0"; "" for none)."""
        m = self.more
        lo, hi = m.get("ge"), m.get("le", m.get("cap"))
        if m.get("gt") is not None:
            low = f"above {_num(m['gt'])}"
            return low if hi is None else f"{low}, at most {_num(hi)}"
        if lo is not None and hi is not None:
            return f"{_num(lo)} to {_num(hi)}"
        if lo is not None:
            return f"at least {_num(lo)}"
        return "" if hi is None else f"at most {_num(hi)}"

    def check(self, value: object) -> None:
        """Raise ConfigError naming the flag unless ``value`` (not None;
        of a list setting, each item) is one of the choices and within the
        bounds."""
        m = self.more
        choices = m.get("choices")
        bounded = "ge" in m or "le" in m or "gt" in m or "cap" in m
        seconds = m.get("parse") in ("seconds", "float")
        for v in value if isinstance(value, tuple) else (value,):
            if v is None:
                continue
            if choices is not None and v not in choices:
                raise ConfigError(f"{self.flag} must be one of {', '.join(choices)}, got {v!r}")
            if bounded and seconds:
                self._check_seconds(v)
            elif bounded:
                self._check_int(v)

    def _check_seconds(self, v: object) -> None:
        m, flag = self.more, self.flag
        lo, hi, gt = m.get("ge"), m.get("le"), m.get("gt")
        ok = (
            isinstance(v, int | float)
            and math.isfinite(v)
            and (lo is None or v >= lo)
            and (gt is None or v > gt)
            and (hi is None or v <= hi)
        )
        if ok:
            return
        if gt == 0 and hi is None:
            raise ConfigError(f"{flag} must be a positive number of seconds, got {v!r}")
        if lo is not None and hi is not None:
            raise ConfigError(
                f"{flag} must be between {_num(lo)} and {_num(hi)} seconds, got {v!r}"
            )
        raise ConfigError(f"{flag} must be a number of seconds, {self.range_text()}, got {v!r}")

    def _check_int(self, v: object) -> None:
        m, flag = self.more, self.flag
        lo, hi, cap = m.get("ge"), m.get("le"), m.get("cap")
        if hi is not None:
            if not isinstance(v, int) or (lo is not None and v < lo) or v > hi:
                unit = "seconds " if self.more.get("metavar") in ("S", "SECONDS") else ""
                raise ConfigError(
                    f"{flag} must be {unit}from {_num(lo or 0)} to {_num(hi)}, got {v!r}"
                )
        elif lo is not None and (not isinstance(v, int) or v < lo):
            raise ConfigError(f"{flag} must be an integer >= {_num(lo)}, got {v!r}")
        if cap is not None and isinstance(v, int) and v > cap:
            raise ConfigError(f"{flag} {v} is absurd (max {_num(cap)})")


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def setting(
    default: T, flags: tuple[str, ...], help: str, group: str, /, **more: Unpack[SettingKw]
) -> T:
    """A policy field's default, declared as a setting: ``flags`` (the long
    one first after any short one: it names the TOML key and the
    ``SERVERIO_*`` variable), ``help`` (one line of ``--help``), ``group``
    (a section of ``--help`` and docs/cli.md), and ``more``
    (:class:`SettingKw`: metavar, parse, bounds ...).  Typed as the default,
    so the field keeps its own type for ``mypy --strict``."""
    return field(default=default, metadata={SETTING: Declared((flags, help, group, more))})


def declared(cls: type[Any]) -> Iterator[tuple[str, Declared]]:
    """(field name, declaration) of each declared setting of a policy class, in order."""
    for f in dataclasses.fields(cls):
        d = f.metadata.get(SETTING)
        if d is not None:
            yield f.name, d


def check_declared(policy: object) -> None:
    """Check every declared bound and choice of ``policy`` (ConfigError naming the flag)."""
    for f in dataclasses.fields(policy):  # type: ignore[arg-type]  # a policy dataclass
        d = f.metadata.get(SETTING)
        if d is not None:
            d.check(getattr(policy, f.name))


# ---------------------------------------------------------------- policies
#
# One frozen dataclass per concern, named after who consumes it (the table
# in docs/architecture.md "Configuration").  Field names are unique across
# the policies: the declarations of serverio.ops.options name a field, and
# FIELD_GROUP says which policy holds it.


@dataclass(frozen=True, slots=True)
class ListenPolicy:
    """Where the server listens and how many processes (serverio.app.server, ops)."""

    host: str = setting(
        "127.0.0.1",
        ("-b", "--bind"),
        "bind address; -b 0.0.0.0 or -b :: serves the network",
        "Where and what",
        metavar="ADDRESS",
    )
    port: int = setting(
        8000,
        ("--port",),
        "port to listen on (also the positional PORT, or -p PORT); 0 = any free port; $PORT "
        "when no port, --listen or --fd is given",
        "Where and what",
        kind="positional",
        metavar="PORT",
        parse="int",
        ge=0,
        le=65535,
    )
    # processes, each with its own SO_REUSEPORT listener
    workers: int = setting(
        1,
        ("--workers",),
        "processes, each with its own SO_REUSEPORT listener; "
        "auto = one per CPU available (affinity, cgroup quota)",
        "Processes",
        metavar="N",
        parse="workers",
        ge=1,
        le=_MAX_PROCESSES,
    )
    # inherited listening sockets (--fd); replaces host/port
    fds: tuple[int, ...] = setting(
        (),
        ("--fd",),
        "serve on inherited listening socket N instead of binding (repeatable); "
        "systemd's LISTEN_FDS is used automatically",
        "Socket activation",
        kind="list",
        metavar="N",
        parse="int",
        ge=0,
    )
    # --listen / --listen-tls HOST:PORT (repeatable); replace host/port.
    listen: tuple[str, ...] = setting(
        (),
        ("--listen",),
        "plaintext listener (repeatable; IPv6 as [::1]:8080; /h1 or /h2 after it picks "
        "its protocol); replaces -b and the port",
        "Processes",
        kind="list",
        metavar="HOST:PORT",
        default_text="none; -b and the port apply",
    )
    listen_tls: tuple[str, ...] = setting(
        (),
        ("--listen-tls",),
        "TLS listener with --certfile/--keyfile (repeatable; /h1 or /h2 as for --listen); "
        "replaces -b and the port",
        "Processes",
        kind="list",
        metavar="HOST:PORT",
    )
    # HOST:PORT of /metrics and /healthz; off by default
    admin_bind: str | None = setting(
        None,
        ("--admin-bind",),
        "serve GET /metrics and /healthz there (never the public port)",
        "Metrics and health",
        metavar="HOST:PORT",
        default_text="off",
    )

    def validate(self) -> ListenPolicy:
        """Check the addresses and process counts (ConfigError naming the option)."""
        check_declared(self)
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

    max_connections: int = setting(
        1024,
        ("--max-connections",),
        "open connections; past it a new one gets 503 and is closed",
        "Connections",
        metavar="N",
        parse="int",
        ge=1,
    )
    head_timeout: float = setting(
        10.0,
        ("--head-timeout",),
        "seconds to receive one complete request head",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    keepalive_timeout: float = setting(
        5.0,
        ("--keepalive-timeout",),
        "idle seconds between requests before a silent close",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    write_timeout: float = setting(
        30.0,
        ("--write-timeout",),
        "seconds without send progress before aborting",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    max_requests: int = setting(
        1000,
        ("--max-requests",),
        "requests per connection",
        "Connections",
        metavar="N",
        parse="int",
        ge=1,
    )
    shutdown_timeout: float = setting(
        10.0,
        ("--shutdown-timeout",),
        "drain deadline on SIGINT/SIGTERM",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # Lame-duck period on SIGTERM: /healthz says 503 and every response
    # closes its connection, but the listeners keep accepting this long.
    shutdown_delay: float = setting(
        0.0,
        ("--shutdown-delay",),
        "on SIGTERM, keep accepting S seconds with /healthz 503 and Connection: close "
        "(lame duck for load balancers)",
        "Connections",
        metavar="S",
        parse="seconds",
        ge=0,
        le=3600,
    )
    max_head_size: int = setting(
        16384,
        ("--max-head-size",),
        "largest request head (request line + fields); larger gets 431",
        "Connections",
        metavar="BYTES",
        parse="int",
        ge=8192,  # the fixed target size (max_target_size): 414 before 431
    )
    max_target_size: int = 8192
    # Request bodies (serverio.net.reqbody.BodyPolicy; docs/features.md
    # "Request bodies"): content bytes accepted (RFC 9110 §15.5.14: 413
    # past it), seconds one read of it may wait, seconds the whole of it.
    max_body_size: int = setting(
        _MiB,
        ("--max-body-size",),
        "largest request body accepted (413 before reading when a larger one is declared; "
        "cut off when more arrives)",
        "Connections",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    body_timeout: float = setting(
        30.0,
        ("--body-timeout",),
        "seconds one read of a request body may wait for the next bytes (then 408)",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    body_total_timeout: float = setting(
        300.0,
        ("--body-total-timeout",),
        "seconds for a whole request body, from its first read (then 408)",
        "Connections",
        metavar="S",
        parse="seconds",
        gt=0,
    )

    def validate(self) -> ConnectionPolicy:
        """Check the limits and deadlines (ConfigError naming the option)."""
        check_declared(self)
        if not isinstance(self.max_target_size, int) or self.max_target_size < 16:
            raise ConfigError(
                f"max_target_size must be an integer >= 16, got {self.max_target_size!r}"
            )
        if self.max_target_size > self.max_head_size:
            raise ConfigError("--max-head-size must be at least the maximum target size (8192)")
        return self


@dataclass(frozen=True, slots=True)
class H2Policy:
    """HTTP/2 (serverio.net.h2conn; docs/features.md "HTTP/2")."""

    http2: bool = setting(
        True,
        ("--http2", "--no-http2"),
        "serve HTTP/2 (ALPN h2 over TLS, h2c prior knowledge in clear) or HTTP/1.1 only",
        "HTTP/2",
        kind="toggle",
    )
    # SETTINGS_MAX_CONCURRENT_STREAMS; REFUSED_STREAM past it
    h2_max_streams: int = setting(
        100,
        ("--h2-max-streams",),
        "concurrent streams per connection (REFUSED_STREAM past it)",
        "HTTP/2",
        metavar="N",
        parse="int",
        ge=1,
        cap=_MAX_H2_STREAMS,
    )
    # Per connection and second: stream resets by the client (rapid reset,
    # CVE-2023-44487) and control frames that deliver no request (PING,
    # SETTINGS, PRIORITY, empty DATA, WINDOW_UPDATEs no DATA earned); past
    # either, GOAWAY ENHANCE_YOUR_CALM.
    h2_max_resets: int = setting(
        200,
        ("--h2-max-resets",),
        "stream resets per connection and second before GOAWAY ENHANCE_YOUR_CALM",
        "HTTP/2",
        metavar="N",
        parse="int",
        ge=1,
    )
    h2_max_control: int = setting(
        200,
        ("--h2-max-control",),
        "PING/SETTINGS/PRIORITY/empty/unearned WINDOW_UPDATE frames per connection and "
        "second before GOAWAY",
        "HTTP/2",
        metavar="N",
        parse="int",
        ge=1,
    )
    # Body descriptors (files streamed from disk, over --small-file-size) one
    # HTTP/2 connection holds at once; a stream past it waits for one.  Part
    # of the open-file arithmetic (serverio.ops.fdlimit): 1 + this per
    # connection.
    h2_max_open_files: int = setting(
        4,
        ("--h2-max-open-files",),
        "file descriptors of streamed bodies one connection holds at once (a stream past it waits)",
        "HTTP/2",
        metavar="N",
        parse="int",
        ge=1,
        cap=_MAX_H2_STREAMS,
    )

    def validate(self) -> H2Policy:
        """Check the stream and flood budgets (ConfigError naming the option)."""
        check_declared(self)
        return self


def hide_glob_ok(glob: str) -> bool:
    """Is ``glob`` a usable ``--hide`` glob (non-empty, relative, no NUL)?"""
    return bool(glob) and "\x00" not in glob and not glob.startswith("/") and len(glob) <= 1024


@dataclass(frozen=True, slots=True)
class FilesPolicy:
    """Which files are served and how (serverio.fs, the file decisions of http.core)."""

    # as http.server
    index: tuple[str, ...] = setting(
        ("index.html", "index.htm"),
        ("--index",),
        "index file name, repeatable or comma-separated",
        "Files",
        kind="list",
        metavar="NAME",
        split=",",
    )
    hidden: bool = setting(
        False, ("--hidden",), "serve dotfiles and dot-directories", "Files", kind="flag"
    )
    follow_symlinks: bool = setting(
        False, ("--follow-symlinks",), "allow symlinks that leave the root", "Files", kind="flag"
    )
    cache_control: str | None = setting(
        None,
        ("--cache-control",),
        "Cache-Control value of 200/206/304 responses",
        "Files",
        metavar="VALUE",
        default_text="none",
    )
    small_file_size: int = setting(
        65536,
        ("--small-file-size",),
        "bodies up to this size are read and sent with the head",
        "Files",
        metavar="BYTES",
        parse="int",
        ge=0,
    )
    sendfile: bool = setting(
        True,
        ("--no-sendfile",),
        "send file bodies through user space",
        "Files",
        kind="flag",
        invert=True,
    )
    # Warm-file cache (serverio.fs.filecache): bytes of small files kept in
    # memory; 0 = off.  In pooled mode an entry is trusted without a stat
    # for fs_cache_valid seconds after its last revalidation.
    file_cache_size: int = setting(
        16 * _MiB,
        ("--file-cache-size",),
        "memory for small files' bytes, revalidated per request (0 = off)",
        "Blocking work",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    # The files' metadata apart from their bytes (serverio.fs.filecache,
    # "File metadata apart from the bytes"): entries, not bytes (a few
    # hundred bytes each); 0 = off.  Off too with --file-cache-size 0.
    file_meta_entries: int = setting(
        16384,
        ("--file-meta-entries",),
        "small files whose facts and validators are kept apart from their bytes (0 = off)",
        "Blocking work",
        metavar="N",
        parse="int",
        ge=0,
    )
    fs_cache_valid: float = setting(
        1.0,
        ("--fs-cache-valid",),
        "with --fs-workers: trust a cached file this long without a stat",
        "Blocking work",
        metavar="SECONDS",
        parse="float",
        ge=0,
        le=3600,
    )
    max_ranges: int = setting(
        16,
        ("--max-ranges",),
        "ranges in one Range header; more are answered with the whole file",
        "Files",
        metavar="N",
        parse="int",
        ge=1,
    )
    # ETag rule (docs/features.md "Validators"): "auto" or "content".
    etag: str = setting(
        "auto",
        ("--etag",),
        "ETag rule: auto (content hash for small files and constant mtimes, else "
        "size+mtime) or content (content hash for every file)",
        "Files",
        choices=ETAG_MODES,
    )
    # --mount ROUTE=DIR / [[mount]] (docs/features.md "Mounts and a route
    # prefix"): (route, directory); validate() normalises the routes
    # ("/docs/" is "/docs").  --route-prefix: the whole site under it.
    mounts: tuple[tuple[str, str], ...] = setting(
        (),
        ("--mount",),
        "serve DIR under ROUTE too (repeatable; the longest route wins; TOML: [[mount]] "
        "tables with route and dir)",
        "Files",
        kind="list",
        metavar="ROUTE=DIR",
        parse="mount",
    )
    route_prefix: str | None = setting(
        None,
        ("--route-prefix",),
        "serve the whole site (the directory and every mount) under PREFIX; 404 outside it",
        "Files",
        metavar="PREFIX",
        default_text="none",
    )
    # --hide GLOB (repeatable; TOML hide = [...]): names left out of
    # listings, searches, archives and WebDAV listings (serverio.fs.hide).
    # Not an access rule: a hidden name is still served by its URL.
    hide: tuple[str, ...] = setting(
        (),
        ("--hide",),
        "leave matching names out of listings, search, archives and WebDAV listings "
        "(repeatable; '*.tmp', 'private/*'); still served by URL: not an access rule",
        "Files",
        kind="list",
        metavar="GLOB",
    )
    # [[hide]] (TOML): (folder path glob or "" for every folder, (glob, ...)):
    # the globs, as --hide's, left out only of the listings of the folders
    # the path glob matches (checked by serverio.ops.tomlconfig, compiled
    # by serverio.fs.hide).
    hide_tables: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def validate(self) -> FilesPolicy:
        """Check the file options (ConfigError naming the option)."""
        check_declared(self)
        for glob in self.hide:
            if not hide_glob_ok(glob):
                raise ConfigError(f"--hide {glob!r} must be a non-empty relative glob")
        total = len(self.hide) + sum(len(names) for _, names in self.hide_tables)
        if total > 256:
            raise ConfigError(f"--hide and [[hide]]: at most 256 globs, got {total}")
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

    fs_workers: int = setting(
        0,
        ("--fs-workers",),
        "threads for filesystem preparation (0 = inline)",
        "Blocking work",
        metavar="N",
        parse="int",
        ge=0,
        cap=_MAX_WORKERS,
    )
    fs_queue: int = setting(
        0,
        ("--fs-queue",),
        "callers that may wait for an fs worker; past it 503 (needs --fs-workers > 0)",
        "Blocking work",
        metavar="N",
        parse="int",
        ge=0,
        cap=_MAX_QUEUE,
    )
    work_workers: int = setting(
        2,
        ("--work-workers",),
        "threads for listings, compression and hashing (0 = inline)",
        "Blocking work",
        metavar="N",
        parse="int",
        ge=0,
        cap=_MAX_WORKERS,
    )
    work_queue: int = setting(
        64,
        ("--work-queue",),
        "callers that may wait for a work thread",
        "Blocking work",
        metavar="N",
        parse="int",
        ge=0,
        cap=_MAX_QUEUE,
    )

    def validate(self) -> PoolPolicy:
        """Check the pool sizes (ConfigError naming the option)."""
        check_declared(self)
        for pool in ("fs", "work"):
            workers = getattr(self, f"{pool}_workers")
            queue = getattr(self, f"{pool}_queue")
            if workers == 0 and queue > 0:
                raise ConfigError(f"--{pool}-queue needs --{pool}-workers > 0 (0 workers = inline)")
        return self


@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """Content features (docs/features.md, "Content options" in docs/cli.md)."""

    listing: bool = setting(
        True,
        ("--no-listing",),
        "404 for directories without an index file",
        "Content options",
        kind="flag",
        invert=True,
    )
    listing_max_entries: int = setting(
        10_000,
        ("--listing-max-entries",),
        "entries shown per listing; more are cut with a notice",
        "Content options",
        metavar="N",
        parse="int",
        ge=1,
        cap=_MAX_LISTING_ENTRIES,
    )
    # rendered listings shared by identical requests
    listing_cache_size: int = setting(
        8 * _MiB,
        ("--listing-cache-size",),
        "memory for rendered listings, shared, LRU (0 = off)",
        "Content options",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    download: tuple[str, ...] = setting(
        (),
        ("--download",),
        "serve matching files as attachments (repeatable; '*.zip', 'releases/*')",
        "Content options",
        kind="list",
        metavar="GLOB",
    )
    # None = off; else a file path relative to the root
    spa: str | None = setting(
        None,
        ("--spa-file",),
        "the file --spa answers with (implies --spa; --spa=FILE is the same)",
        "Content options",
        metavar="FILE",
        default_text="off; index.html with --spa",
        switch=(
            "--spa",
            "index.html",
            "answer missing extension-less paths with index.html (or --spa-file)",
        ),
        equals_alias="--spa",
    )
    precompressed: bool = setting(
        True,
        ("--no-precompressed",),
        "ignore FILE.br / FILE.zst / FILE.gz sidecars",
        "Content options",
        kind="flag",
        invert=True,
    )
    # 0 = no on-the-fly compression
    compress_max_size: int = setting(
        8 * _MiB,
        ("--compress-max-size",),
        "largest file compressed on the fly (0 = never)",
        "Content options",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    compress_cache_size: int = setting(
        64 * _MiB,
        ("--compress-cache-size",),
        "memory for compressed results, LRU (0 = no caching)",
        "Content options",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    digest: bool = setting(
        False,
        ("--digest",),
        "send Repr-Digest (RFC 9530) with file responses",
        "Content options",
        kind="flag",
    )
    # --archives: ?archive=zip|tar.gz on a listed directory (serverio.archive).
    archives: bool = setting(
        False,
        ("--archives",),
        "offer listed directories as ?archive=zip and ?archive=tar.gz downloads (streamed)",
        "Content options",
        kind="flag",
    )
    archive_max_entries: int = setting(
        100_000,
        ("--archive-max-entries",),
        "members of one archive at most (more: 413)",
        "Content options",
        metavar="N",
        parse="int",
        ge=1,
    )
    archive_max_bytes: int = setting(
        16 * 1024 * _MiB,
        ("--archive-max-bytes",),
        "file bytes of one archive at most (more: 413; passed while streaming: cut)",
        "Content options",
        metavar="BYTES",
        parse="bytes",
        ge=1,
    )
    # --title: the listing's heading and window title, before the path.
    title: str = setting(
        "",
        ("--title",),
        "the listing page's heading and window title (before the path)",
        "Content options",
        metavar="TEXT",
        default_text="none",
    )
    # ?q= (a recursive search below a listed folder, serverio.fs.search):
    # at most this many entries visited, and this long, per search.
    search_max_entries: int = setting(
        100_000,
        ("--search-max-entries",),
        "entries one recursive search (?q=) visits at most; the answer says it was cut",
        "Content options",
        metavar="N",
        parse="int",
        ge=1,
    )
    search_time: float = setting(
        5.0,
        ("--search-time",),
        "seconds one recursive search (?q=) runs at most; the answer says it was cut",
        "Content options",
        metavar="SECONDS",
        parse="float",
        gt=0,
        le=3600,
    )

    def validate(self) -> ContentPolicy:
        """Check the content options (ConfigError naming the option)."""
        check_declared(self)
        if len(self.title) > 200 or not self.title.isprintable():
            raise ConfigError("--title must be at most 200 printable characters")
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

    certfile: str | None = setting(
        None,
        ("--certfile", "--tls-cert"),
        "PEM certificate chain; turns TLS on",
        "TLS",
        metavar="PATH",
        default_text="off",
        fs_path=True,
    )
    keyfile: str | None = setting(
        None,
        ("--keyfile", "--tls-key"),
        "PEM private key",
        "TLS",
        metavar="PATH",
        default_text="the certfile",
        fs_path=True,
    )
    # the NAME of a variable, never the password
    keyfile_password_env: str | None = setting(
        None,
        ("--keyfile-password-env",),
        "environment variable holding the key's password (never pass it in argv)",
        "TLS",
        metavar="NAME",
        default_text="none",
    )
    # --tls-password-file: a file holding it
    keyfile_password_file: str | None = setting(
        None,
        ("--tls-password-file",),
        "file holding the key's password (first line)",
        "TLS",
        metavar="PATH",
        default_text="none",
        fs_path=True,
    )
    # --hsts SECONDS: Strict-Transport-Security on TLS responses (RFC 6797);
    # None = off.  --hsts-include-subdomains adds includeSubDomains.
    hsts: int | None = setting(
        None,
        ("--hsts",),
        "send Strict-Transport-Security: max-age=SECONDS on TLS responses "
        "(never over plain HTTP; needs --certfile)",
        "TLS",
        metavar="SECONDS",
        parse="int",
        default_text="off",
        ge=0,
        le=_MAX_HSTS,
    )
    hsts_include_subdomains: bool = setting(
        False,
        ("--hsts-include-subdomains",),
        "with --hsts: add includeSubDomains (every subdomain must serve HTTPS)",
        "TLS",
        kind="flag",
    )
    # --dev-tls: a local CA and leaf made in dev_tls_dir (serverio.ops.devtls);
    # the CLI then fills certfile/keyfile with the leaf.
    dev_tls: bool = setting(
        False,
        ("--dev-tls",),
        "development HTTPS: a local CA (made once) and a certificate for localhost, the "
        "hostname and the LAN addresses; prints how to trust the CA",
        "TLS",
        kind="flag",
    )
    dev_tls_dir: str | None = setting(
        None,
        ("--dev-tls-dir",),
        "with --dev-tls: the directory of the CA and certificate",
        "TLS",
        metavar="PATH",
        default_text="the user's data directory",
        fs_path=True,
    )

    def validate(self) -> TlsPolicy:
        """Check the files and their combinations (ConfigError naming the option)."""
        check_declared(self)
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
        if self.certfile is None and not self.dev_tls:
            # Sent on TLS responses only (RFC 6797 §7.2): without TLS it would
            # never go out.  Behind a TLS-terminating proxy, set it there.
            raise ConfigError("--hsts needs --certfile (it is only sent over TLS)")


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """The access and error logs (serverio.observe)."""

    access_log: str = setting(
        "common",
        ("--access-log",),
        "access log format, one line per response",
        "Output",
        choices=ACCESS_LOG_FORMATS,
    )
    quiet: bool = setting(
        False,
        ("-q", "--quiet"),
        "no access log (same as --access-log off)",
        "Output",
        kind="flag",
        sets=(("access_log", "off"),),
    )
    # reopened on SIGHUP; stderr when unset
    access_log_file: str | None = setting(
        None,
        ("--access-log-file",),
        "append the access log to PATH (reopened on SIGHUP)",
        "Logs",
        metavar="PATH",
        default_text="stderr",
        fs_path=True,
    )
    log_level: str = setting(
        "info", ("--log-level",), "error log level (stderr)", "Logs", choices=LOG_LEVELS
    )
    # -v: every counter at exit, not only the summary line
    verbose: bool = setting(
        False,
        ("-v", "--verbose"),
        "at exit print every counter (as /metrics has them) after the one summary line",
        "Output",
        kind="flag",
    )

    def validate(self) -> LogPolicy:
        """Check the formats and the log file's directory (ConfigError naming the option)."""
        check_declared(self)
        if self.access_log_file is not None:
            parent = os.path.dirname(os.path.abspath(self.access_log_file))
            if not os.path.isdir(parent):
                raise ConfigError(f"--access-log-file: directory {parent!r} does not exist")
        return self


_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True, slots=True)
class WatchPolicy:
    """Development mode (docs/features.md "Live reload"): watch the root and
    reload browsers over Server-Sent Events under the reserved prefix."""

    watch: bool = setting(
        False,
        ("--watch",),
        "development mode: watch the directory and live-reload browsers on change "
        "(injects a script into HTML; not for production)",
        "Development",
        kind="flag",
    )
    watch_prefix: str = setting(
        "/.serverio",
        ("--watch-prefix",),
        "reserved path of the live-reload event stream and script",
        "Development",
        metavar="PATH",
    )
    # force the polling watcher (network filesystems)
    watch_poll: bool = setting(
        False,
        ("--watch-poll",),
        "with --watch: poll for changes instead of inotify (network filesystems)",
        "Development",
        kind="flag",
    )
    # Event streams open at once (serverio.concurrency.broadcast.StreamSlots):
    # their own budget, outside --max-connections; past it, 503.
    watch_max_streams: int = setting(
        32,
        ("--watch-max-streams",),
        "with --watch: event streams open at once, apart from --max-connections (past it: 503)",
        "Development",
        metavar="N",
        parse="int",
        ge=1,
    )
    # --open: the first URL in a browser once listening
    open_browser: bool = setting(
        False,
        ("--open",),
        "open the first URL in the web browser once listening (Python's webbrowser)",
        "Development",
        kind="flag",
    )
    # --qr: a QR code of the first LAN URL (serverio.ops.qr)
    qr: bool = setting(
        False,
        ("--qr",),
        "print a QR code of the first network URL (the loopback one without) once listening",
        "Development",
        kind="flag",
    )

    def validate(self, root: str) -> WatchPolicy:
        """Check the prefix against the served ``root`` (ConfigError naming the option)."""
        check_declared(self)
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
class UsersPolicy:
    """Who the users are and what proves it: the site-wide users (Basic
    authentication, docs/reference/basic-auth.md), what each may do where
    (``[[access]]``, ``[[group]]``, ``--allow``: docs/reference/access.md)
    and the secret that signs what a server hands out to be shown back
    (serverio.signing).  Per-path
    users files are the site rules' ``[[auth]]`` tables (:class:`SitePolicy`)."""

    # --auth-file: the whole site
    auth_file: str | None = setting(
        None,
        ("--auth-file",),
        "basic authentication for the whole site from this htpasswd-style file",
        "Site rules",
        metavar="FILE",
        default_text="none",
        fs_path=True,
    )
    # --auth USER:PASS: users-file lines (USER:HASH, hashed when parsed) for
    # the whole site, beside --auth-file's; off loopback only with TLS or
    # --allow-plain-auth (_check_plain_auth).
    auth_users: tuple[str, ...] = setting(
        (),
        ("--auth",),
        "basic authentication for the whole site with this user and password (repeatable; "
        "hashed in memory at once; other local users see it in ps: --auth-file for "
        "anything else); off loopback it needs TLS or --allow-plain-auth",
        "Site rules",
        kind="list",
        metavar="USER:PASS",
        parse="user",
        toml=False,
        name="auth_users",
        default_text="none",
    )
    allow_plain_auth: bool = setting(
        False,
        ("--allow-plain-auth",),
        "allow --auth on a non-loopback address without TLS (the password then crosses "
        "the network readable)",
        "Site rules",
        kind="flag",
    )
    # --secret-file: the key that signs session cookies, share links and
    # resumable-upload URLs (serverio.secret; None: a per-user one).
    secret_file: str | None = setting(
        None,
        ("--secret-file",),
        "sign session cookies, share links and resumable-upload URLs with this file's "
        "content (at least 32 bytes; give every replica of a fleet the same file); "
        "default: a key generated once in serverio's data directory",
        "Site rules",
        metavar="FILE",
        default_text="generated",
        fs_path=True,
    )
    # --trusted-user-header: the request field a --trusted-proxies peer
    # names the signed-in user with (oauth2-proxy, Authelia, Caddy
    # forward_auth); from any other peer it is ignored and stripped
    # (serverio.login.identity).  None: no such field is read.
    trusted_user_header: str | None = setting(
        None,
        ("--trusted-user-header",),
        "the request field (Remote-User, X-Forwarded-User) that names the signed-in "
        "user, honoured only from --trusted-proxies peers (ignored and stripped from others)",
        "Site rules",
        metavar="NAME",
        parse="field",
        default_text="none",
    )
    # --session-max-age: seconds a sign-in through the login page lasts
    # (the signed session cookie's expiry; serverio.login).
    session_max_age: int = setting(
        43200,
        ("--session-max-age",),
        "seconds a sign-in through the login page lasts (the signed session cookie's expiry)",
        "Site rules",
        metavar="S",
        parse="int",
        ge=1,
    )
    # --share-max-age: the longest a share link may last (seconds; a longer
    # request is capped); --share-deny-file: revoked share links, one per
    # line (serverio.login.share).
    share_max_age: int = setting(
        2592000,
        ("--share-max-age",),
        "the longest a share link may last, in seconds (longer requests are capped)",
        "Site rules",
        metavar="S",
        parse="int",
        ge=1,
    )
    share_deny_file: str | None = setting(
        None,
        ("--share-deny-file",),
        "revoked share links: a file of share tokens (or whole links), one per line, "
        "re-read when it changes",
        "Site rules",
        metavar="FILE",
        default_text="none",
        fs_path=True,
    )

    def validate(self) -> UsersPolicy:
        """Check the declared bounds (the login feature's ages)."""
        check_declared(self)
        return self

    # [[access]]: (path glob, ((principal, (right, ...)), ...)) per table;
    # [[group]]: (name, (member, ...)).  With any rule (these or --allow),
    # --auth-file / --auth name the users the rules give rights to
    # (serverio.site.rights; docs/reference/access.md).
    access: tuple[AccessTable, ...] = ()
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    allow: tuple[str, ...] = setting(
        (),
        ("--allow",),
        "give principals rights below a path: PRINCIPAL[,PRINCIPAL...]:RIGHT[,RIGHT...]@PATH "
        "(repeatable; principals: anonymous, authenticated, a group, a user of --auth-file / "
        "--auth; rights: read, list, upload, overwrite, delete, mkdir, lock, share)",
        "Site rules",
        kind="list",
        metavar="RULE",
        default_text="none",
    )

    @property
    def rights(self) -> bool:
        """Are there ``[[access]]`` or ``--allow`` rules?"""
        return bool(self.access or self.allow)


@dataclass(frozen=True, slots=True)
class SitePolicy:
    """Site rules (serverio.site.rules; docs/features.md "Site rules"): the raw
    specifications, compiled once by serverio.site.service.load_site."""

    # --header "Name: value"
    headers: tuple[str, ...] = setting(
        (),
        ("-H", "--header"),
        "add a header to every response (repeatable; added to the file's list, "
        "'NAME:' with no value removes NAME; 'NAME VALUE' as two arguments, "
        "http.server's form, works too)",
        "Site rules",
        kind="list",
        metavar="'NAME: VALUE'",
        two_token=True,
        merge=True,
    )
    cors: bool = setting(
        False,
        ("--cors",),
        "Access-Control-Allow-Origin: * on every response",
        "Site rules",
        kind="flag",
    )
    cors_origins: tuple[str, ...] = setting(
        (),
        ("--cors-origin",),
        "allow this origin (repeatable; echoed with Vary: Origin)",
        "Site rules",
        kind="list",
        metavar="ORIGIN",
    )
    # --cors-writes: with --upload, the listed origins may also write
    # (preflights answer PUT, DELETE, POST on writable paths; the upload
    # form's CSRF rule accepts them).
    cors_writes: bool = setting(
        False,
        ("--cors-writes",),
        "with --upload, let the --cors-origin origins write too (preflights of PUT, "
        "DELETE and POST on writable paths; never with --cors)",
        "Site rules",
        kind="flag",
    )
    # [[headers]]: (path glob, ((name, value), ...), (removed name, ...))
    header_rules: tuple[HeaderRule, ...] = ()
    redirects: tuple[tuple[str, str, int], ...] = ()  # [[redirects]]: (from, to, status)
    rewrites: tuple[tuple[str, str], ...] = ()  # [[rewrites]]: (from, to)
    clean_urls: bool = setting(
        False,
        ("--clean-urls",),
        "serve /about from about.html and redirect /about.html to /about",
        "Site rules",
        kind="flag",
    )
    trailing_slash: str = setting(
        "keep",
        ("--trailing-slash",),
        "add or remove a trailing slash by redirect (keep: directories get one)",
        "Site rules",
        choices=("add", "remove", "keep"),
    )
    error_pages: tuple[tuple[str, str], ...] = ()  # [errors]: ("404" | "5xx", page)
    auth: tuple[tuple[str, str], ...] = ()  # [[auth]]: (path glob, users file)
    # [[writable]]: (path glob, allowed methods "put" / "delete"[, active]);
    # with --upload, empty means the whole root is writable.  ``active``
    # (one of ACTIVE_MODES, "" or left out: --upload-active) is how active
    # files under it are served (serverio.http.active).
    writable: tuple[WritableTable, ...] = ()
    # --trusted-proxies: peers whose Forwarded / X-Forwarded-For name the
    # client (serverio.http.forwarded); empty: trust no one.
    trusted_proxies: tuple[str, ...] = setting(
        (),
        ("--trusted-proxies",),
        "reverse proxies (addresses or networks) whose Forwarded / X-Forwarded-For "
        "name the client, for the access log and the auth limiter",
        "Reverse proxies",
        kind="extend",
        metavar="CIDR",
        parse="cidr",
        default_text="trust no one",
    )
    # --allowed-hosts: the Host names served besides the expected ones
    # (serverio.http.hosts): "name", ".name" (it and below), "*.name"
    # (below only), "*" (no check at all).
    allowed_hosts: tuple[str, ...] = setting(
        (),
        ("--allowed-hosts",),
        "with --upload, --webdav or a proxy route, also answer for these Host names "
        "(repeatable or comma-separated; .NAME or *.NAME for subdomains, '*' for any); "
        "other unexpected hosts get 421 (DNS rebinding)",
        "Site rules",
        kind="list",
        metavar="NAME",
        split=",",
        default_text="loopback names, IP addresses, the bound names",
    )
    rules_source: str = ""  # the file the tables came from (for messages)
    # Derived by validate() from trusted_proxies.
    proxy_networks: tuple[IPNetwork, ...] = field(default=(), compare=False)
    # Derived by Config.validate(): is the Host of every request checked
    # (serverio.http.hosts)?  With writes or the proxy on, or --allowed-hosts
    # given; never with --allowed-hosts '*'.
    check_hosts: bool = field(default=False, compare=False)

    def validate(self, writes_or_proxy: bool = False) -> SitePolicy:
        """Parse the trusted proxies and the allowed hosts; a copy with
        proxy_networks and check_hosts filled in.  ``writes_or_proxy``:
        --upload, --webdav or a proxy route is on (the Host check's default)."""
        check_declared(self)
        try:
            networks = parse_networks(self.trusted_proxies)
        except ValueError as exc:
            raise ConfigError(f"--trusted-proxies: {exc}") from None
        names = self.allowed_hosts
        for name in names:
            if name != "*" and re.fullmatch(_ALLOWED_HOST, name) is None:
                raise ConfigError(
                    f"--allowed-hosts: {name!r} is not a host name (NAME, .NAME or *.NAME; "
                    "no scheme, port or path), nor '*'"
                )
        check = (writes_or_proxy or bool(names)) and "*" not in names
        return dataclasses.replace(self, proxy_networks=networks, check_hosts=check)


# One --allowed-hosts value: a DNS name (letters, digits, '-', '_', dots;
# RFC 1123 §2.1 loosely, '_' as some LAN names have it) with an optional
# leading "." or "*." (a domain and its subdomains / its subdomains only),
# an IPv4 address, or an IPv6 one in brackets.  A pattern, compiled (and
# cached by re) only when --allowed-hosts is given: ~1M instructions that a
# start without it need not spend at import.
_ALLOWED_HOST = r"(?:\*?\.)?[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]"


@dataclass(frozen=True, slots=True)
class ResumablePolicy:
    """Resumable uploads (serverio.resumable; docs/reference/resumable-uploads.md),
    on when uploads are (``--upload``, ``--webdav``): their own limits beside
    :class:`UploadPolicy`'s, which bound every upload."""

    # Resumable uploads (serverio.resumable; docs/reference/resumable-uploads.md):
    # how long an incomplete upload lives after its creation (then the
    # sweeper removes its temporary), and the bytes of incomplete uploads
    # (declared lengths, else --max-upload-size) one client may hold.
    upload_expiry: float = setting(
        86400.0,
        ("--upload-expiry",),
        "seconds an incomplete resumable upload (IETF draft or tus) may live; then its "
        "temporary is removed",
        "Uploads",
        metavar="S",
        parse="seconds",
        ge=1,
        le=366 * 86400,
    )
    max_incomplete_per_client: int = setting(
        8 * 1024 * _MiB,
        ("--max-incomplete-per-client",),
        "bytes of incomplete resumable uploads one client may hold at once (their declared "
        "lengths); past it 507; 0: no quota",
        "Uploads",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )

    # --upload-chunk-size: the largest part of a resumable upload a client
    # should send, kept under what a proxy in front accepts in one request
    # (Cloudflare: 100 MB).  Announced as Upload-Limit max-append-size (the
    # draft's §"Limits"); the listing's uploader sends parts of this size.
    # A hint, not enforced: a larger part from another client is taken.
    upload_chunk_size: int = setting(
        50 * _MiB,
        ("--upload-chunk-size",),
        "largest part of a resumable upload the listing's uploader sends (announced to "
        "IETF clients as Upload-Limit max-append-size)",
        "Uploads",
        metavar="BYTES",
        parse="bytes",
        ge=1024,
    )

    def validate(self) -> ResumablePolicy:
        """Check the bounds (ConfigError naming the option)."""
        check_declared(self)
        return self


@dataclass(frozen=True, slots=True)
class UploadPolicy:
    """Writes: PUT and DELETE (serverio.upload; docs/features.md "Uploads")."""

    # --upload: PUT and DELETE enabled (off: read-only)
    upload: bool = setting(
        False,
        ("--upload",),
        "accept PUT (create or replace a file) and DELETE under the root; off: read-only",
        "Uploads",
        kind="flag",
    )
    # 413 past it (declared or streamed)
    max_upload_size: int = setting(
        1024 * _MiB,
        ("--max-upload-size",),
        "largest file a PUT may write (413 when declared larger or when more arrives)",
        "Uploads",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    # writes in flight; 503 past it
    max_uploads: int = setting(
        16,
        ("--max-uploads",),
        "writes in flight at once; past it 503",
        "Uploads",
        metavar="N",
        parse="int",
        ge=1,
        cap=_MAX_QUEUE,
    )
    # --max-uploads-per-client: writes one client may have in flight (503
    # past it); 0: half of max_uploads, at least 1 (serverio.upload.slots).
    max_uploads_per_client: int = setting(
        0,
        ("--max-uploads-per-client",),
        "writes one client may have in flight at once (its share of the write slots); past "
        "it 503; 0: half of them",
        "Uploads",
        metavar="N",
        parse="int",
        default_text="0, half",
        ge=0,
    )
    # --min-upload-rate: bytes per second an upload's body must keep up once
    # the client was waited for RATE_GRACE seconds (408 below it); 0: off.
    min_upload_rate: int = setting(
        1024,
        ("--min-upload-rate",),
        "bytes per second an upload must keep up after its first 10 seconds of waiting "
        "for the client; slower is cut with 408; 0: no minimum",
        "Uploads",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    # 507 when a write would leave less free
    min_free_space: int = setting(
        64 * _MiB,
        ("--min-free-space",),
        "refuse a write (507) that would leave less free space on the disk",
        "Uploads",
        metavar="BYTES",
        parse="bytes",
        ge=0,
    )
    # --on-duplicate: a form upload's file whose name is taken is refused
    # (409), renamed "a (1).txt", or overwrites it (serverio.upload.form).
    on_duplicate: str = setting(
        "error",
        ("--on-duplicate",),
        "a file of the upload form whose name is taken: refuse it (409), rename it "
        "'name (1).ext', or overwrite the existing file",
        "Uploads",
        choices=ON_DUPLICATE,
    )
    # --upload-mkdirs: a PUT or form upload below a missing folder creates
    # its parents (as dufs does) instead of 409 (RFC 4918 §9.7.1's default).
    upload_mkdirs: bool = setting(
        False,
        ("--upload-mkdirs",),
        "a PUT or form upload below a missing folder creates the folders (else 409)",
        "Uploads",
        kind="flag",
    )
    # --upload-active: an active file (HTML, SVG, XML, JavaScript) under a
    # writable path is served with CSP sandbox, as an attachment, or inline
    # (serverio.http.active; a [[writable]] table's ``active`` overrides).
    upload_active: str = setting(
        "sandbox",
        ("--upload-active",),
        "how an HTML, SVG, XML or JavaScript file under a writable path is served: with a "
        "CSP sandbox, as an attachment, or inline (a [[writable]] table's active overrides it)",
        "Uploads",
        choices=ACTIVE_MODES,
    )
    # Serve writes on a non-loopback address without an auth rule over them.
    allow_anonymous_writes: bool = setting(
        False,
        ("--allow-anonymous-writes",),
        "allow --upload on a non-loopback address without an [[auth]] rule over every "
        "writable path",
        "Uploads",
        kind="flag",
    )
    # --no-fsync: a PUT's or form upload's file is renamed into place without
    # fsync of the file or its directory (still atomic; not durable across a
    # power loss or kernel crash).  COPY, MOVE, MKCOL and PROPPATCH still sync.
    no_fsync: bool = setting(
        False,
        ("--no-fsync",),
        "commit a PUT's or form upload's file without fsync (still atomic: a reader never "
        "sees a partial file; a power loss may lose or empty it)",
        "Uploads",
        kind="flag",
    )
    # --webdav: WebDAV class 1 and 2 on the whole root (serverio.dav; it implies
    # --upload: PUT and DELETE are its methods too).
    webdav: bool = setting(
        False,
        ("--webdav",),
        "serve WebDAV class 1 and 2 (PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK) "
        "on the whole root (or under --webdav-prefix); "
        "implies --upload",
        "Uploads",
        kind="flag",
    )
    # --webdav-prefix: WebDAV only at and under this route ("/dav"; it
    # implies --webdav); None: the whole root.  validate() normalises it.
    webdav_prefix: str | None = setting(
        None,
        ("--webdav-prefix",),
        "serve WebDAV only at PREFIX and under it; elsewhere the server answers as "
        "without --webdav; implies --webdav",
        "Uploads",
        metavar="PREFIX",
        default_text="the whole root",
    )
    # PROPFIND Depth: infinity answers at most this many resources; 0 refuses
    # it (403 with DAV:propfind-finite-depth, RFC 4918 §9.1).
    webdav_depth_infinity: int = setting(
        0,
        ("--webdav-depth-infinity",),
        "answer PROPFIND Depth: infinity with at most N resources (0: refuse it, 403)",
        "Uploads",
        metavar="N",
        parse="int",
        ge=0,
    )
    # COPY, MOVE and DELETE of a collection: at most this many members.
    webdav_max_tree: int = setting(
        10_000,
        ("--webdav-max-tree",),
        "most members a COPY, MOVE or DELETE of a collection may touch",
        "Uploads",
        metavar="N",
        parse="int",
        ge=1,
    )
    # WebDAV locks (serverio.dav.locks): live locks per process at most (a
    # LOCK past it: 507), and the longest timeout granted, seconds.
    webdav_max_locks: int = setting(
        4096,
        ("--webdav-max-locks",),
        "most WebDAV locks held at once (per process, in memory); a LOCK past it gets 507",
        "Uploads",
        metavar="N",
        parse="int",
        ge=1,
    )
    webdav_lock_timeout_max: int = setting(
        86400,
        ("--webdav-lock-timeout-max",),
        "longest WebDAV lock timeout granted, in seconds (Timeout: Infinite gets this)",
        "Uploads",
        metavar="SECONDS",
        parse="int",
        ge=1,
    )
    # ... at most this many taken by one client address (IPv6: its /64),
    # at most this many covering one resource (each is listed in its
    # lockdiscovery), and a lock without credentials held this long at most.
    webdav_max_locks_per_client: int = setting(
        64,
        ("--webdav-max-locks-per-client",),
        "most WebDAV locks one client address holds at once (IPv6: its /64); past it 507",
        "Uploads",
        metavar="N",
        parse="int",
        ge=1,
    )
    webdav_max_locks_per_resource: int = setting(
        16,
        ("--webdav-max-locks-per-resource",),
        "most WebDAV locks covering one resource (shared locks stack); past it 507",
        "Uploads",
        metavar="N",
        parse="int",
        ge=1,
    )
    webdav_anonymous_lock_timeout_max: int = setting(
        3600,
        ("--webdav-anonymous-lock-timeout-max",),
        "longest WebDAV lock timeout granted to a client without credentials, in seconds",
        "Uploads",
        metavar="SECONDS",
        parse="int",
        ge=1,
    )

    def validate(self) -> UploadPolicy:
        """Check the bounds (ConfigError naming the option); ``--webdav``
        turns ``upload`` on."""
        check_declared(self)
        if self.webdav_prefix is not None:
            prefix = normal_route(self.webdav_prefix, "--webdav-prefix") or None
            if prefix != self.webdav_prefix or not self.webdav:
                return dataclasses.replace(self, webdav_prefix=prefix, webdav=True).validate()
        if self.webdav and not self.upload:
            return dataclasses.replace(self, upload=True).validate()
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

    # --proxy PREFIX=URL
    proxy: tuple[str, ...] = setting(
        (),
        ("--proxy",),
        "forward requests under PREFIX to an upstream, http://HOST:PORT or unix:/PATH "
        "(repeatable; the longest prefix wins)",
        "Upstreams",
        kind="list",
        metavar="PREFIX=URL",
        default_text="none",
    )
    proxy_routes: tuple[ProxyRoute, ...] = ()  # [[proxy]] tables
    # requests per upstream at once; past it they wait
    proxy_max_inflight: int = setting(
        64,
        ("--proxy-max-inflight",),
        "requests in flight to one upstream at once (past it they wait: --proxy-queue)",
        "Upstreams",
        metavar="N",
        parse="int",
        ge=1,
    )
    # Past --proxy-max-inflight a request waits for a slot, first come first
    # served: at most proxy_queue of them per upstream, each at most
    # proxy_queue_timeout seconds; then 503.  Bounded both ways, so a burst
    # (a page's 500 modules from a dev server, 512 clients) is absorbed and
    # a stuck upstream still answers 503 within the timeout.
    proxy_queue: int = setting(
        1024,
        ("--proxy-queue",),
        "requests that may wait for an in-flight slot per upstream (past it: 503; 0: never wait)",
        "Upstreams",
        metavar="N",
        parse="int",
        ge=0,
    )
    proxy_queue_timeout: float = setting(
        10.0,
        ("--proxy-queue-timeout",),
        "seconds a request waits for an in-flight slot (then 503)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    proxy_connect_timeout: float = setting(
        5.0,
        ("--proxy-connect-timeout",),
        "seconds to connect to an upstream (then 504)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # request sent -> response head
    proxy_head_timeout: float = setting(
        60.0,
        ("--proxy-head-timeout",),
        "seconds from the request sent to the upstream's response head (then 504)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # between two response body chunks
    proxy_idle_timeout: float = setting(
        60.0,
        ("--proxy-idle-timeout",),
        "seconds an upstream body may pause between chunks (then the response is cut)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # the whole exchange
    proxy_total_timeout: float = setting(
        3600.0,
        ("--proxy-total-timeout",),
        "seconds for a whole proxied exchange (504 before the head, cut after)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # A tunnel (after a 101) with no byte either way for this long is
    # closed; WebSocket peers ping far more often (browsers' and vite's
    # keep-alives run every 30 s or so), a dead peer is noticed in minutes.
    proxy_tunnel_idle: float = setting(
        300.0,
        ("--proxy-tunnel-idle",),
        "seconds a WebSocket/Upgrade tunnel may carry no byte either way (then it is closed)",
        "Upstreams",
        metavar="S",
        parse="seconds",
        gt=0,
    )
    # WebSocket/Upgrade tunnels have their own budget, apart from the
    # request slots (an idle tunnel must not starve requests): at most
    # this many at once, every upstream together, and a per-client share
    # of them, so that one client cannot take them all.
    proxy_max_tunnels: int = setting(
        256,
        ("--proxy-max-tunnels",),
        "WebSocket/Upgrade tunnels open at once, every upstream together, apart from "
        "--proxy-max-inflight (past it: 503; 0: no tunnels)",
        "Upstreams",
        metavar="N",
        parse="int",
        ge=0,
    )
    proxy_max_tunnels_per_client: int = setting(
        32,
        ("--proxy-max-tunnels-per-client",),
        "tunnels one client (address, IPv6 /64) may hold open at once (past it: 503)",
        "Upstreams",
        metavar="N",
        parse="int",
        ge=1,
    )
    # pass | upstream: the Host sent upstream
    proxy_host: str = setting(
        "pass",
        ("--proxy-host",),
        "the Host sent upstream: the client's (pass) or the upstream's own (upstream)",
        "Upstreams",
        choices=PROXY_HOST_MODES,
    )
    # Idle keep-alive connections kept per upstream: as many as may be in
    # flight, so that a steady load never opens and closes connections.
    proxy_keepalive: int = setting(
        64,
        ("--proxy-keepalive",),
        "idle keep-alive connections kept per upstream",
        "Upstreams",
        metavar="N",
        parse="int",
        ge=0,
    )
    # --proxy-fallback URL: what no reserved path, route or file answers
    # (a GET/HEAD the files answer 404, any other method outside a route).
    proxy_fallback: str | None = setting(
        None,
        ("--proxy-fallback",),
        "forward what nothing else answers (a GET/HEAD no file answers, any other method "
        "outside a --proxy prefix) to this upstream; not with --spa",
        "Upstreams",
        metavar="URL",
        default_text="none",
    )
    # Derived by validate(): the --proxy specs and the tables, parsed, and
    # the fallback as a route of prefix "/".
    routes: tuple[ProxyRoute, ...] = field(default=(), compare=False)
    fallback: ProxyRoute | None = field(default=None, compare=False)

    def validate(self) -> ProxyPolicy:
        check_declared(self)
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
    | UsersPolicy
    | SitePolicy
    | UploadPolicy
    | ResumablePolicy
    | ProxyPolicy
)


@dataclass(frozen=True, slots=True)
class Config:
    """Every policy of one server, one object per concern.

    Construct with :meth:`of` (settings by field name, routed to their
    policy) or from the policies, then call :meth:`validate`.
    """

    directory: str = setting(
        ".",
        ("-d", "--directory", "--root"),
        "directory to serve (also the positional DIR)",
        "Where and what",
        metavar="DIR",
        default_factory=os.getcwd,
        default_text="the current directory",
        fs_path=True,
    )
    listeners: ListenPolicy = field(default_factory=ListenPolicy)
    conn: ConnectionPolicy = field(default_factory=ConnectionPolicy)
    h2: H2Policy = field(default_factory=H2Policy)
    files: FilesPolicy = field(default_factory=FilesPolicy)
    pools: PoolPolicy = field(default_factory=PoolPolicy)
    content: ContentPolicy = field(default_factory=ContentPolicy)
    tls: TlsPolicy = field(default_factory=TlsPolicy)
    log: LogPolicy = field(default_factory=LogPolicy)
    live: WatchPolicy = field(default_factory=WatchPolicy)
    users: UsersPolicy = field(default_factory=UsersPolicy)
    site: SitePolicy = field(default_factory=SitePolicy)
    uploads: UploadPolicy = field(default_factory=UploadPolicy)
    resumable: ResumablePolicy = field(default_factory=ResumablePolicy)
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
            _check_write_auth(listeners, self.site, self.users, flag)
        if self.users.auth_users and not self.users.allow_plain_auth:
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
            users=self.users.validate(),
            uploads=uploads,
            resumable=self.resumable.validate(),
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
        or cfg.users.access
        or cfg.users.allow
        or cfg.users.auth_file is not None
        or cfg.users.auth_users
        or cfg.users.trusted_user_header is not None
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


def _check_write_auth(
    listeners: ListenPolicy, site: SitePolicy, users: UsersPolicy, flag: str = "--upload"
) -> None:
    """``--upload`` on an address other than loopback: every writable
    prefix must lie under an ``[[auth]]`` rule ``PREFIX/**`` (or
    ``--auth-file``), unless ``--allow-anonymous-writes``.  With
    ``[[access]]`` / ``--allow`` rules: no rule may give ``anonymous`` a
    write right (what reads allow does not matter: public reads, signed-in
    writes), since every other write needs a signed-in user."""
    public = _public_hosts(listeners)
    if not public:
        return
    if users.access or users.allow:
        anonymous = _anonymous_write(users, site.rules_source)
        if anonymous is not None:
            raise ConfigError(
                f"{flag} on {public[0]}: {anonymous} gives anonymous clients a write right "
                "(give it to authenticated, a group or users instead, or --allow-anonymous-writes)"
            )
        return
    if users.auth_file is not None or users.auth_users:
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


def _anonymous_write(users: UsersPolicy, rules_source: str) -> str | None:
    """The first ``[[access]]`` table or ``--allow`` rule that gives
    ``anonymous`` a write right (as the rule is named in messages), or None.
    Read at the syntax level only: the rules themselves are checked when
    compiled (serverio.site.rights)."""
    source = rules_source or "--config"
    for i, (_, grants) in enumerate(users.access):
        for principal, rights in grants:
            if principal == "anonymous" and _WRITE_RIGHTS & {r.strip().lower() for r in rights}:
                return f"{source}: [[access]] #{i + 1}"
    for line in users.allow:
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
