"""HTML listings of a folder of N files over ``bench/pair.py``'s socketpair,
for any tree (``python listingpair.py MODE --entries N -n R`` from the
tree's root; ``bench callgrind --listing N`` copies this checkout's file out
of the tree and runs it in each tree, as ``--rules`` does rulespair.py).

Each of the R requests is ``GET /big/`` with ``Accept: text/html`` (a
browser's listing of a folder ``big/`` holding N files of a few bytes),
on a server with ``--listing-cache-size 0``: the rendered-listings cache
(the only memo of a listing: the scan is never cached) keeps nothing, so
every request is a real scan, rights decision and render, as the first
request after a change of the folder is.  The tree's own ``pair.py``
connection (``connected``) and response reader are used; only its
``Config.of`` is given the settings, so an older tree is measured on its
own code.

Modes: ``plain`` (serverio's defaults apart from the cache: no rules, no
uploads) and ``rules`` (``--upload``, ``--allow 'anonymous:read,list@/'
--allow 'alice:upload,delete@/'`` and alice in ``--auth-file``; the
request is anonymous: the page asks the access hook, per folder and per
entry, which write controls to show, and there are none to show it).  A
tree from before ``--allow`` refuses ``rules``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["MODES", "main", "request", "settings"]

MODES = ("plain", "rules")


def settings(mode: str, users: Path) -> dict[str, Any]:
    """The Config settings of ``mode`` (``users``: a users file to write)."""
    base: dict[str, Any] = {"listing_cache_size": 0}
    if mode == "plain":
        return base
    from serverio.site.passwords import hash_password

    users.write_text(f"alice:{hash_password('bench-password', 1000)}\n")
    return {
        **base,
        "upload": True,
        "auth_file": str(users),
        "allow": ("anonymous:read,list@/", "alice:upload,delete@/"),
    }


def request() -> bytes:
    """The listing request: a browser's GET of the folder."""
    return (
        b"GET /big/ HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: bench\r\n"
        b"Accept: text/html,application/xhtml+xml;q=0.9,*/*;q=0.8\r\n\r\n"
    )


def fill(folder: Path, entries: int) -> None:
    """``entries`` small files in ``folder`` (names of varied shape, as a
    natural sort and the type icons see them)."""
    folder.mkdir()
    kinds = (".txt", ".bin", ".jpg", ".md", ".py")
    for i in range(entries):
        (folder / f"file_{i}{kinds[i % len(kinds)]}").write_bytes(b"x" * (i % 97))


async def run(n: int, root: Path) -> tuple[float, int]:
    """N listing requests on one connection (after one, uncounted, that
    imports what a listing needs); microseconds per request and the body
    length of the last response."""
    from bench import pair
    from serverio import Config

    req = request()
    cfg = Config.of(directory=str(root), access_log="off", max_requests=10**9)
    async with pair.connected(cfg) as client:
        await client.send(req)
        head = await pair.read_response(client)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"listing: {head.splitlines()[0]!r}")
        start = time.perf_counter()
        for _ in range(n):
            await client.send(req)
            head = await pair.read_response(client)
            assert head.startswith(b"HTTP/1.1 200"), head
        elapsed = time.perf_counter() - start
    length = int(head.lower().partition(b"content-length: ")[2].split(b"\r\n", 1)[0] or 0)
    return elapsed / max(n, 1) * 1e6, length


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=MODES)
    p.add_argument("-n", type=int, default=10)
    p.add_argument("--entries", type=int, default=10_000)
    args = p.parse_args()
    sys.path.insert(0, os.getcwd())
    import trio

    from bench import pair
    from serverio import Config

    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as other:
        extra = settings(args.mode, Path(other) / "users")
        real = Config.of

        def of(**kw: Any) -> Config:
            return real(**{**kw, **extra})

        Config.of = of  # type: ignore[method-assign]  # the class pair.py builds with
        root = Path(tmp)
        fill(root / "big", args.entries)
        time.sleep(2.1)  # settled, as pair.py's files are
        pair.freeze_wall_clock()
        us, length = trio.run(run, args.n, root)
    print(
        f"serverio listing ({args.mode}, {args.entries} entries): {us:.1f} us per request, "
        f"{length} bytes (client and server, one process)"
    )


if __name__ == "__main__":
    main()
