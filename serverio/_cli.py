"""``python -m serverio``: a drop-in for ``python -m http.server``'s flags."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

import trio

from ._config import ACCESS_LOG_FORMATS, Config
from ._errors import ConfigError
from ._server import Server

__all__ = ["build_parser", "config_from_args", "main"]

_D = Config()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One clear line and exit status 2, like every other invalid input.
        self.exit(2, f"serverio: error: {message}\n")


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
    g.add_argument("--max-head-size", type=int, default=_D.max_head_size, metavar="BYTES")
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
        "--download",
        action="append",
        metavar="GLOB",
        help="serve matching files as attachments (repeatable; '*.zip', 'releases/*')",
    )
    c.add_argument(
        "--spa",
        nargs="?",
        const="index.html",
        default=None,
        metavar="FILE",
        help="answer missing extension-less paths with FILE (default index.html)",
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
    b.add_argument("--work-workers", type=int, default=_D.work_workers, metavar="N")
    b.add_argument("--work-queue", type=int, default=_D.work_queue, metavar="N")
    o = p.add_argument_group("output")
    o.add_argument("--access-log", choices=ACCESS_LOG_FORMATS, default=_D.access_log)
    o.add_argument("-q", "--quiet", action="store_true", help="no access log")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    index: tuple[str, ...] = _D.index
    if args.index:
        index = tuple(n.strip() for item in args.index for n in item.split(",") if n.strip())
    if args.protocol not in ("HTTP/1.0", "HTTP/1.1"):
        raise ConfigError(f"--protocol must be HTTP/1.0 or HTTP/1.1, got {args.protocol!r}")
    return Config(
        directory=args.directory,
        host=args.bind,
        port=args.port,
        max_connections=args.max_connections,
        head_timeout=args.head_timeout,
        keepalive_timeout=args.keepalive_timeout,
        write_timeout=args.write_timeout,
        max_requests=args.max_requests,
        shutdown_timeout=args.shutdown_timeout,
        max_head_size=args.max_head_size,
        index=index,
        hidden=args.hidden,
        follow_symlinks=args.follow_symlinks,
        cache_control=args.cache_control,
        small_file_size=args.small_file_size,
        max_ranges=args.max_ranges,
        sendfile=not args.no_sendfile,
        fs_workers=args.fs_workers,
        fs_queue=args.fs_queue,
        work_workers=args.work_workers,
        work_queue=args.work_queue,
        listing=not args.no_listing,
        listing_max_entries=args.listing_max_entries,
        download=tuple(args.download or ()),
        spa=args.spa,
        precompressed=not args.no_precompressed,
        compress_max_size=args.compress_max_size,
        compress_cache_size=args.compress_cache_size,
        digest=args.digest,
        access_log="off" if args.quiet else args.access_log,
        quiet=args.quiet,
    ).validate()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _amain(cfg: Config) -> int:
    server = Server(cfg)
    try:
        await server.open_listeners()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"serverio: error: cannot listen on {cfg.host} port {cfg.port}: {reason}",
            file=sys.stderr,
        )
        return 2
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run(task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED) -> None:
                await server.serve(task_status=task_status)
                nursery.cancel_scope.cancel()

            await nursery.start(run)
            host, port = server.addresses()[0]
            print(f"Serving {cfg.root} at http://{_url_host(host)}:{port}/", flush=True)
            count = 0
            async for _ in signals:
                count += 1
                if count == 1:
                    server.shutdown()
                else:
                    server.abort()
    print(f"serverio: stopped: {server.stats.summary()}", file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        print(f"serverio: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="serverio: %(levelname)s: %(message)s")
    return trio.run(_amain, cfg)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
