"""``python -m serverio``: a drop-in for ``python -m http.server``'s flags."""

from __future__ import annotations

import argparse
import functools
import getpass
import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import trio

from ..config import ACCESS_LOG_FORMATS, ETAG_MODES, LOG_LEVELS, Config, parse_networks
from ..errors import ConfigError
from ..http.passwords import DEFAULT_ITERATIONS, hash_password
from ..net.activation import systemd_fds
from ..net.tls import make_ssl_context
from ..pipeline.site import load_site
from .check import check_url
from .cpus import available_cpus
from .fdlimit import fit_fd_limit
from .run import run_server
from .tomlconfig import dump, parse_with_config

__all__ = ["build_parser", "config_from_args", "main"]

_D = Config()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One clear line and exit status 2, like every other invalid input.
        self.exit(2, f"serverio: error: {message}\n")

    def parse_known_args(  # type: ignore[override]  # same signature, narrower types
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # No option takes an optional value (a bare number after one would
        # be ambiguous with the port), but "--spa=FILE" (one token, so
        # unambiguous) is still accepted as "--spa-file=FILE".
        argv = sys.argv[1:] if args is None else list(args)
        out: list[str] = []
        i = 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                out.extend(argv[i:])
                break
            if arg in ("-H", "--header") and i + 2 < len(argv):
                # Two forms: "-H 'Name: value'" (one token), and CPython's
                # http.server form "-H Name value" (two tokens): a first
                # token without ':' cannot be the one-token form.
                name = argv[i + 1]
                if ":" not in name:
                    out += [arg, f"{name}: {argv[i + 2]}"]
                    i += 3
                    continue
            out.append("--spa-file=" + arg[6:] if arg.startswith("--spa=") else arg)
            i += 1
        return super().parse_known_args(out, namespace)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    return v


_SIZE_UNITS = {
    "": 1,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
}


def _bytes(text: str) -> int:
    """A byte count: ``1048576``, ``64M``, ``64MiB``, ``512k`` (binary units)."""
    t = text.strip().lower()
    digits = t.rstrip("kmgib")
    unit = t[len(digits) :]
    if not digits.isdigit() or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1048576, 512k, 64MiB)")
    return int(digits) * _SIZE_UNITS[unit]


def _version() -> str:
    try:
        return importlib.metadata.version("serverio")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="serverio",
        description=(
            "Serve a directory over HTTP/1.1 (trio + h11). Binds 127.0.0.1 by default "
            "- safer than http.server, which listens on all interfaces; pass -b 0.0.0.0 "
            "(or -b ::) to serve the network."
        ),
    )
    p.add_argument(
        "port", nargs="?", type=int, default=_D.port, help="port (default 8000; 0 = any free)"
    )
    p.add_argument("--version", action="version", version=f"serverio {_version()}")
    p.add_argument(
        "-b", "--bind", metavar="ADDRESS", default=_D.host, help="bind address (default 127.0.0.1)"
    )
    p.add_argument(
        "-d", "--directory", default=os.getcwd(), help="directory to serve (default: cwd)"
    )
    p.add_argument(
        "-p",
        "--protocol",
        default="HTTP/1.1",
        help="accepted for http.server compatibility; serverio always speaks HTTP/1.1",
    )
    g = p.add_argument_group("connections")
    g.add_argument("--max-connections", type=int, default=_D.max_connections, metavar="N")
    g.add_argument(
        "--head-timeout",
        type=_seconds,
        default=_D.head_timeout,
        metavar="S",
        help="time to receive one complete request head",
    )
    g.add_argument("--keepalive-timeout", type=_seconds, default=_D.keepalive_timeout, metavar="S")
    g.add_argument(
        "--write-timeout",
        type=_seconds,
        default=_D.write_timeout,
        metavar="S",
        help="time without send progress before aborting",
    )
    g.add_argument(
        "--max-requests",
        type=int,
        default=_D.max_requests,
        metavar="N",
        help="requests per connection",
    )
    g.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=_D.shutdown_timeout,
        metavar="S",
        help="drain deadline on SIGINT/SIGTERM",
    )
    g.add_argument(
        "--shutdown-delay",
        type=_seconds,
        default=_D.shutdown_delay,
        metavar="S",
        help="on SIGTERM, keep accepting S seconds with /healthz 503 and Connection: close "
        "(lame duck for load balancers; default 0)",
    )
    g.add_argument("--max-head-size", type=int, default=_D.max_head_size, metavar="BYTES")
    h = p.add_argument_group("HTTP/2")
    h.add_argument(
        "--http2",
        action="store_true",
        help="serve HTTP/2 (ALPN h2 over TLS, h2c prior knowledge in clear); the default",
    )
    h.add_argument("--no-http2", action="store_true", help="HTTP/1.1 only")
    h.add_argument(
        "--h2-max-streams",
        type=int,
        default=_D.h2_max_streams,
        metavar="N",
        help="concurrent streams per connection (REFUSED_STREAM past it)",
    )
    h.add_argument(
        "--h2-max-resets",
        type=int,
        default=_D.h2_max_resets,
        metavar="N",
        help="stream resets per connection and second before GOAWAY ENHANCE_YOUR_CALM",
    )
    h.add_argument(
        "--h2-max-control",
        type=int,
        default=_D.h2_max_control,
        metavar="N",
        help="PING/SETTINGS/PRIORITY/empty/unearned WINDOW_UPDATE frames per connection and second "
        "before GOAWAY",
    )
    h.add_argument(
        "--h2-max-open-files",
        type=int,
        default=_D.h2_max_open_files,
        metavar="N",
        help="file descriptors of streamed bodies one connection holds at once "
        "(a stream past it waits)",
    )
    f = p.add_argument_group("files")
    f.add_argument(
        "--index",
        action="append",
        metavar="NAME",
        help="index file name, repeatable or comma-separated (default index.html)",
    )
    f.add_argument("--hidden", action="store_true", help="serve dotfiles and dot-directories")
    f.add_argument(
        "--follow-symlinks", action="store_true", help="allow symlinks that leave the root"
    )
    f.add_argument("--cache-control", metavar="VALUE", default=None)
    f.add_argument(
        "--small-file-size",
        type=int,
        default=_D.small_file_size,
        metavar="BYTES",
        help="bodies up to this size are read and sent with the head",
    )
    f.add_argument("--max-ranges", type=int, default=_D.max_ranges, metavar="N")
    f.add_argument(
        "--etag",
        choices=ETAG_MODES,
        default=_D.etag,
        help="ETag rule: auto (content hash for small files and constant mtimes, else "
        "size+mtime) or content (content hash for every file); default auto",
    )
    f.add_argument("--no-sendfile", action="store_true", help="send file bodies through user space")
    c = p.add_argument_group("content")
    c.add_argument(
        "--no-listing", action="store_true", help="404 for directories without an index file"
    )
    c.add_argument(
        "--listing-max-entries",
        type=int,
        default=_D.listing_max_entries,
        metavar="N",
        help="entries shown per listing; more are cut with a notice (default 10000)",
    )
    c.add_argument(
        "--listing-cache-size",
        type=_bytes,
        default=_D.listing_cache_size,
        metavar="BYTES",
        help="memory for rendered listings, shared, LRU (default 8MiB; 0 = off)",
    )
    c.add_argument(
        "--download",
        action="append",
        metavar="GLOB",
        help="serve matching files as attachments (repeatable; '*.zip', 'releases/*')",
    )
    c.add_argument(
        "--spa",
        action="store_true",
        help="answer missing extension-less paths with index.html (or --spa-file)",
    )
    c.add_argument(
        "--spa-file",
        metavar="FILE",
        default=None,
        help="the file --spa answers with (implies --spa; --spa=FILE is the same)",
    )
    c.add_argument(
        "--no-precompressed",
        action="store_true",
        help="ignore FILE.br / FILE.zst / FILE.gz sidecars",
    )
    c.add_argument(
        "--compress-max-size",
        type=_bytes,
        default=_D.compress_max_size,
        metavar="BYTES",
        help="largest file compressed on the fly (default 8MiB; 0 = never)",
    )
    c.add_argument(
        "--compress-cache-size",
        type=_bytes,
        default=_D.compress_cache_size,
        metavar="BYTES",
        help="memory for compressed results, LRU (default 64MiB)",
    )
    c.add_argument(
        "--digest", action="store_true", help="send Repr-Digest (RFC 9530) with file responses"
    )
    b = p.add_argument_group("blocking work")
    b.add_argument(
        "--fs-workers",
        type=int,
        default=_D.fs_workers,
        metavar="N",
        help="threads for filesystem preparation (0 = inline)",
    )
    b.add_argument("--fs-queue", type=int, default=_D.fs_queue, metavar="N")
    b.add_argument(
        "--file-cache-size",
        type=_bytes,
        default=_D.file_cache_size,
        metavar="BYTES",
        help="memory for small files' bytes, revalidated per request (default 16MiB; 0 = off)",
    )
    b.add_argument(
        "--fs-cache-valid",
        type=float,
        default=_D.fs_cache_valid,
        metavar="SECONDS",
        help="with --fs-workers: trust a cached file this long without a stat (default 1)",
    )
    b.add_argument("--work-workers", type=int, default=_D.work_workers, metavar="N")
    b.add_argument("--work-queue", type=int, default=_D.work_queue, metavar="N")
    o = p.add_argument_group("output")
    o.add_argument("--access-log", choices=ACCESS_LOG_FORMATS, default=_D.access_log)
    o.add_argument("-q", "--quiet", action="store_true", help="no access log")
    o.add_argument(
        "--access-log-file",
        metavar="PATH",
        default=None,
        help="append the access log to PATH (reopened on SIGHUP) instead of stderr",
    )
    o.add_argument("--log-level", choices=LOG_LEVELS, default=_D.log_level, help="error log level")
    _add_site_rules(p)
    _add_operations(p)
    return p


def _add_site_rules(p: argparse.ArgumentParser) -> None:
    """Options of docs/cli.md "Site rules" (the TOML tables hold the rest)."""
    r = p.add_argument_group("site rules")
    r.add_argument(
        "-H",
        "--header",
        action="append",
        metavar="'NAME: VALUE'",
        help="add a header to every response (repeatable; 'NAME VALUE' as two "
        "arguments, http.server's form, works too)",
    )
    r.add_argument(
        "--cors", action="store_true", help="Access-Control-Allow-Origin: * on every response"
    )
    r.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="allow this origin (repeatable; echoed with Vary: Origin)",
    )
    r.add_argument(
        "--clean-urls",
        action="store_true",
        help="serve /about from about.html and redirect /about.html to /about",
    )
    r.add_argument(
        "--trailing-slash",
        choices=("add", "remove", "keep"),
        default=_D.trailing_slash,
        help="add or remove a trailing slash by redirect (default keep: directories get one)",
    )
    r.add_argument(
        "--auth-file",
        metavar="FILE",
        default=None,
        help="basic authentication for the whole site from this htpasswd-style file",
    )


def _add_operations(p: argparse.ArgumentParser) -> None:
    """Options of docs/cli.md "Operations options" (TLS, processes, admin, config)."""
    t = p.add_argument_group("TLS")
    # --tls-cert / --tls-key / --tls-password-file: http.server's names (3.14).
    t.add_argument(
        "--certfile", "--tls-cert", metavar="PATH", default=None, help="PEM certificate chain"
    )
    t.add_argument("--keyfile", "--tls-key", metavar="PATH", default=None, help="PEM private key")
    t.add_argument(
        "--tls-password-file",
        metavar="PATH",
        default=None,
        help="file holding the key's password (first line)",
    )
    t.add_argument(
        "--keyfile-password-env",
        metavar="NAME",
        default=None,
        help="environment variable holding the key's password (never pass it in argv)",
    )
    g = p.add_argument_group("deployment")
    g.add_argument(
        "--workers",
        type=_workers,
        default=_D.workers,
        metavar="N",
        help="processes, each with its own SO_REUSEPORT listener (default 1); "
        "auto = one per CPU available (affinity, cgroup quota)",
    )
    g.add_argument(
        "--listen",
        action="append",
        metavar="HOST:PORT",
        help="plaintext listener (repeatable; IPv6 as [::1]:8080; /h1 or /h2 after it picks "
        "its protocol); replaces -b and the port",
    )
    g.add_argument(
        "--listen-tls",
        action="append",
        metavar="HOST:PORT",
        help="TLS listener with --certfile/--keyfile (repeatable; /h1 or /h2 as for --listen); "
        "replaces -b and the port",
    )
    g.add_argument(
        "--fd",
        type=int,
        action="append",
        metavar="N",
        help="serve on inherited listening socket N instead of binding (repeatable); "
        "systemd's LISTEN_FDS is used automatically",
    )
    g.add_argument(
        "--admin-bind",
        metavar="HOST:PORT",
        default=None,
        help="serve GET /metrics and /healthz there (off by default; never the public port)",
    )
    g.add_argument(
        "--hsts",
        type=int,
        metavar="SECONDS",
        default=None,
        help="send Strict-Transport-Security: max-age=SECONDS on TLS responses "
        "(never over plain HTTP; off by default; needs --certfile)",
    )
    g.add_argument(
        "--hsts-include-subdomains",
        action="store_true",
        help="with --hsts: add includeSubDomains (every subdomain must serve HTTPS)",
    )
    g.add_argument(
        "--trusted-proxies",
        type=_cidr,
        nargs="+",
        action="extend",
        metavar="CIDR",
        help="reverse proxies (addresses or networks) whose Forwarded / X-Forwarded-For "
        "name the client, for the access log and the auth limiter (default: trust no one)",
    )
    g.add_argument(
        "--check",
        metavar="URL",
        default=None,
        help="probe URL (http, loopback only) and exit 0 if it answers 2xx, else 1 "
        "(container HEALTHCHECK without curl)",
    )
    w = p.add_argument_group("development")
    w.add_argument(
        "--watch",
        action="store_true",
        help="development mode: watch the directory and live-reload browsers on change "
        "(injects a script into HTML; not for production)",
    )
    w.add_argument(
        "--watch-prefix",
        metavar="PATH",
        default=_D.watch_prefix,
        help="reserved path of the live-reload event stream and script (default /.serverio)",
    )
    w.add_argument(
        "--watch-poll",
        action="store_true",
        help="with --watch: poll for changes instead of inotify (network filesystems)",
    )
    w.add_argument(
        "--watch-max-streams",
        type=int,
        default=_D.watch_max_streams,
        metavar="N",
        help="with --watch: event streams open at once, apart from --max-connections "
        "(past it: 503; default 32)",
    )
    c = p.add_argument_group("configuration file")
    c.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML file: each option as a key (max-connections = 100); the command line wins",
    )
    c.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective configuration as TOML and exit",
    )


def _cidr(text: str) -> str:
    """One ``--trusted-proxies`` value, canonical (``10.0.0.1/8`` -> ``10.0.0.0/8``)."""
    try:
        (net,) = parse_networks([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(net)


def _workers(text: str) -> int:
    """``N`` or ``auto`` (one per CPU this process may use)."""
    if text.strip().lower() == "auto":
        return available_cpus()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'auto'") from None


def config_from_args(args: argparse.Namespace) -> Config:
    index: tuple[str, ...] = _D.index
    if args.index:
        index = tuple(n.strip() for item in args.index for n in item.split(",") if n.strip())
    if args.protocol not in ("HTTP/1.0", "HTTP/1.1"):
        raise ConfigError(f"--protocol must be HTTP/1.0 or HTTP/1.1, got {args.protocol!r}")
    if (args.listen or args.listen_tls) and (args.port != _D.port or args.bind != _D.host):
        raise ConfigError("--listen/--listen-tls replace -b and the port: give every address there")
    if args.listen and args.certfile and not args.listen_tls:
        raise ConfigError("--certfile with --listen: TLS listeners are given with --listen-tls")
    if args.http2 and args.no_http2:
        raise ConfigError("--http2 and --no-http2 contradict each other")
    cfg = Config(
        directory=args.directory,
        host=args.bind,
        port=args.port,
        max_connections=args.max_connections,
        head_timeout=args.head_timeout,
        keepalive_timeout=args.keepalive_timeout,
        write_timeout=args.write_timeout,
        max_requests=args.max_requests,
        shutdown_timeout=args.shutdown_timeout,
        shutdown_delay=args.shutdown_delay,
        max_head_size=args.max_head_size,
        http2=not args.no_http2,
        h2_max_streams=args.h2_max_streams,
        h2_max_resets=args.h2_max_resets,
        h2_max_control=args.h2_max_control,
        h2_max_open_files=args.h2_max_open_files,
        index=index,
        hidden=args.hidden,
        follow_symlinks=args.follow_symlinks,
        cache_control=args.cache_control,
        small_file_size=args.small_file_size,
        max_ranges=args.max_ranges,
        etag=args.etag,
        sendfile=not args.no_sendfile,
        fs_workers=args.fs_workers,
        file_cache_size=args.file_cache_size,
        fs_cache_valid=args.fs_cache_valid,
        fs_queue=args.fs_queue,
        work_workers=args.work_workers,
        work_queue=args.work_queue,
        listing=not args.no_listing,
        listing_max_entries=args.listing_max_entries,
        listing_cache_size=args.listing_cache_size,
        download=tuple(args.download or ()),
        spa=args.spa_file if args.spa_file is not None else ("index.html" if args.spa else None),
        precompressed=not args.no_precompressed,
        compress_max_size=args.compress_max_size,
        compress_cache_size=args.compress_cache_size,
        digest=args.digest,
        access_log="off" if args.quiet else args.access_log,
        quiet=args.quiet,
        certfile=args.certfile,
        keyfile=args.keyfile,
        keyfile_password_env=args.keyfile_password_env,
        keyfile_password_file=args.tls_password_file,
        workers=args.workers,
        fds=tuple(args.fd or ()),
        listen=tuple(args.listen or ()),
        listen_tls=tuple(args.listen_tls or ()),
        admin_bind=args.admin_bind,
        hsts=args.hsts,
        hsts_include_subdomains=args.hsts_include_subdomains,
        access_log_file=args.access_log_file,
        log_level=args.log_level,
        watch=args.watch,
        watch_prefix=args.watch_prefix,
        watch_poll=args.watch_poll,
        watch_max_streams=args.watch_max_streams,
        headers=tuple(args.header or ()),
        cors=args.cors,
        cors_origins=tuple(args.cors_origin or ()),
        clean_urls=args.clean_urls,
        trailing_slash=args.trailing_slash,
        auth_file=args.auth_file,
        trusted_proxies=tuple(args.trusted_proxies or ()),
        header_rules=tuple(getattr(args, "header_rules", ())),
        redirects=tuple(getattr(args, "redirects", ())),
        rewrites=tuple(getattr(args, "rewrites", ())),
        error_pages=tuple(getattr(args, "error_pages", ())),
        auth=tuple(getattr(args, "auth_rules", ())),
        rules_source=getattr(args, "config", None) or "",
    ).validate()
    # Compile the site rules now, so a bad rule is a one-line error (exit 2)
    # before anything is bound; the server compiles its own copy.
    load_site(cfg)
    return cfg


def hash_password_main(argv: Sequence[str]) -> int:
    """``serverio hash-password [--iterations N]``: print a users-file hash.

    The password is read from a prompt on a terminal, else one line of
    standard input; never from argv (visible to every local user in ``ps``).
    """
    p = _Parser(prog="serverio hash-password", description=hash_password_main.__doc__)
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N")
    p.add_argument("--user", metavar="NAME", help="print NAME:HASH, a users-file line")
    args = p.parse_args(list(argv))
    if not 1000 <= args.iterations <= 10_000_000:
        print("serverio: error: --iterations must be from 1000 to 10000000", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("serverio: error: the passwords differ", file=sys.stderr)
            return 2
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("serverio: error: empty password", file=sys.stderr)
        return 2
    h = hash_password(password, args.iterations)
    print(f"{args.user}:{h}" if args.user else h)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["hash-password"]:
        return hash_password_main(argv[1:])
    try:
        args = parse_with_config(parser, argv)
        if args.check is not None:
            return check_url(args.check)
        if not args.fd and not args.print_config:
            # systemd socket activation (consumes LISTEN_FDS/LISTEN_PID).
            args.fd = systemd_fds() or None
        cfg = config_from_args(args)
        if args.print_config:
            sys.stdout.write(dump(parser, args))
            return 0
        ssl_context = make_ssl_context(cfg)
    except ConfigError as exc:
        print(f"serverio: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level.upper(), format="serverio: %(levelname)s: %(message)s")
    # Before any worker starts: they inherit the raised limit and the config.
    cfg, note = fit_fd_limit(cfg)
    if note is not None:
        print(note, file=sys.stderr, flush=True)
    if cfg.workers > 1:
        from .workers import supervise

        return supervise(cfg)
    return trio.run(functools.partial(run_server, cfg, ssl_context=ssl_context))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
