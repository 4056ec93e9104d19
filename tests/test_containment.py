"""Containment: symlinks that leave the root are refused without opening
anything outside it, and the dotfile policy holds for resolved paths.

Every test runs under each strategy of :class:`serverio.fs.opener.RootOpener`
(the ``strategy`` fixture forces it): openat2, the component walk, and the
by-path ``windows`` strategy (simulated on Linux).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from serverio import Server
from serverio.fs import opener as _fsopen
from serverio.fs.opener import MAX_SYMLINKS, RootOpener
from serverio.http.target import MAX_SEGMENTS

from .conftest import make_config, memory_connection


@contextmanager
def opens_outside(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record the real path of every descriptor ``os.open`` returns that is
    neither inside ``root`` nor the root itself (Linux: through /proc)."""
    real_root = os.path.realpath(root)
    seen: list[str] = []
    real_open = os.open

    def recording_open(*args: object, **kwargs: object) -> int:
        fd = real_open(*args, **kwargs)  # type: ignore[arg-type]
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path != real_root and not path.startswith(real_root + "/"):
            seen.append(path)
        return fd

    monkeypatch.setattr(os, "open", recording_open)
    try:
        yield seen
    finally:
        monkeypatch.setattr(os, "open", real_open)


class BlockedWriter:
    """A thread blocked in ``open(fifo, O_WRONLY)``: it returns only when
    some reader opens the FIFO (Linux wakes writers on the reader count, so
    even an open immediately followed by a close releases it)."""

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        self.released = threading.Event()
        self.fd = -1
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.fd = os.open(self.fifo, os.O_WRONLY)
        self.released.set()

    def __enter__(self) -> BlockedWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Release the writer ourselves (a reader of our own), then clean up.
        reader = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join(5)
        os.close(reader)
        if self.fd >= 0:
            os.close(self.fd)


@pytest.fixture
def outside(root: Path) -> Path:
    return root.parent / "outside"


async def test_outside_fifo_is_never_opened(
    root: Path, outside: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO outside the root, reached through relative and absolute links,
    as a file, a directory entry in a listing and a precompressed sidecar:
    the writer blocked on it is never released and nothing outside is opened."""
    fifo = outside / "fifo"
    os.mkfifo(fifo)
    (root / "rel-pipe").symlink_to("../outside/fifo")
    (root / "abs-pipe").symlink_to(fifo)
    (root / "page.txt").write_text("p" * 1000)
    (root / "page.txt.gz").symlink_to("../outside/fifo")
    (root / "sub" / "deep-pipe").symlink_to("../../outside/fifo")
    cfg = make_config(root, index=(), compress_max_size=0)  # gzip only from a sidecar
    with BlockedWriter(fifo) as writer, opens_outside(root, monkeypatch) as seen:
        async with memory_connection(cfg) as (client, _, _):
            with trio.fail_after(10):
                rel = await client.get("/rel-pipe")
                absolute = await client.get("/abs-pipe")
                deep = await client.get("/sub/deep-pipe")
                side = await client.get("/page.txt", "Accept-Encoding: gzip\r\n")
                listing = await client.get("/?format=json")
                sub_listing = await client.get("/sub/?format=json")
        # Give a released writer every chance to show it.
        released = writer.released.wait(0.3)
    assert (rel.status, absolute.status, deep.status) == (404, 404, 404)
    assert side.status == 200 and side.header("content-encoding") is None
    assert side.body == b"p" * 1000
    names = {e["name"] for e in json.loads(listing.body)["entries"]}
    assert "rel-pipe" not in names and "abs-pipe" not in names
    assert "deep-pipe" not in {e["name"] for e in json.loads(sub_listing.body)["entries"]}
    assert not released
    assert seen == []


async def test_outside_errno_never_picks_the_status(
    root: Path, outside: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outside socket (open: ENXIO), an outside missing file (ENOENT) and
    an outside file: the same 404, without looking at them."""
    if os.name == "nt":
        pytest.skip("needs an AF_UNIX socket file and symlinks to it (POSIX)")
    monkeypatch.chdir(outside)  # AF_UNIX paths are short: bind by relative name
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("sock")
    try:
        (root / "to-socket").symlink_to("../outside/sock")
        (root / "to-missing").symlink_to("../outside/missing")
        (root / "to-file").symlink_to(outside / "secret.txt")
        async with memory_connection(make_config(root)) as (client, srv, _):
            rs = [await client.get(t) for t in ("/to-socket", "/to-missing", "/to-file")]
    finally:
        sock.close()
    assert [r.status for r in rs] == [404, 404, 404]
    assert srv.stats.conns.internal_errors == 0


async def test_links_back_inside_are_served(root: Path, strategy: str) -> None:
    (root / "abs-file").symlink_to(root / "hello.txt")
    (root / "abs-dir").symlink_to(root / "sub")
    (root / "sub" / "up").symlink_to("../hello.txt")
    (root / "sub" / "abs-up").symlink_to(root / "noindex")
    (root / "chain1").symlink_to("chain2")
    (root / "chain2").symlink_to("sub/up")
    (root / "self-root").symlink_to(".")
    async with memory_connection(make_config(root)) as (client, _, _):
        a = await client.get("/abs-file")
        b = await client.get("/abs-dir/index.html")
        c = await client.get("/sub/up")
        d = await client.get("/sub/abs-up/a.txt")
        e = await client.get("/chain1")
        f = await client.get("/self-root/hello.txt")
        g = await client.get("/abs-dir/")
    assert a.body == c.body == e.body == f.body == b"hello world\n"
    assert b.body == g.body == b"<p>sub</p>\n"
    assert d.body == b"a\n"


async def test_dotfiles_reached_through_links_are_hidden(root: Path, strategy: str) -> None:
    (root / ".env").write_text("SECRET=1\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pub").mkdir()
    (root / "env.txt").symlink_to(".env")
    (root / "repo").symlink_to(".git")
    (root / "pub" / "settings").symlink_to("../.env")
    (root / "abs-env").symlink_to(root / ".env")
    (root / "wk").symlink_to(".well-known/security.txt")
    (root / "via-git").symlink_to(".git/../hello.txt")
    targets = ("/env.txt", "/repo/config", "/pub/settings", "/abs-env", "/via-git", "/wk")
    async with memory_connection(make_config(root, index=())) as (client, _, _):
        hidden = [await client.get(t) for t in targets]
        listing = await client.get("/?format=json")
        pub = await client.get("/pub/?format=json")
    assert [r.status for r in hidden] == [404, 404, 404, 404, 404, 200]
    assert all(b"SECRET" not in r.body and b"[core]" not in r.body for r in hidden)
    names = {e["name"] for e in json.loads(listing.body)["entries"]}
    assert names.isdisjoint({"env.txt", "repo", "abs-env", "via-git"}) and "wk" in names
    assert json.loads(pub.body)["entries"] == []
    async with memory_connection(make_config(root, index=(), hidden=True)) as (client, _, _):
        shown = [await client.get(t) for t in targets]
        listing = await client.get("/?format=json")
    assert [r.status for r in shown] == [200] * 6
    assert shown[0].body == b"SECRET=1\n" and shown[1].body == b"[core]\n"
    names = {e["name"] for e in json.loads(listing.body)["entries"]}
    assert {"env.txt", "repo", "abs-env"} <= names


# ------------------------------------------------------- the opener itself


@pytest.fixture
def opener(root: Path, strategy: str) -> Iterator[RootOpener]:
    op = RootOpener(str(root), follow_symlinks=False, strategy=strategy)
    yield op
    op.close()


def _errno_of(op: RootOpener, rel: str) -> int:
    try:
        fd = op.open(rel)
    except OSError as exc:
        return exc.errno or 0
    os.close(fd)
    return 0


def test_symlink_budget(root: Path, opener: RootOpener) -> None:
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    for i in range(MAX_SYMLINKS + 1):
        (root / f"l{i}").symlink_to(f"l{i + 1}" if i < MAX_SYMLINKS else "hello.txt")
    assert _errno_of(opener, "loop-a") == errno.ELOOP
    assert _errno_of(opener, "l1") == 0  # exactly MAX_SYMLINKS links
    assert _errno_of(opener, "l0") == errno.ELOOP  # one more


def test_escapes_are_exdev_and_missing_is_enoent(root: Path, opener: RootOpener) -> None:
    (root / "sub" / "esc").symlink_to("../../outside/secret.txt")
    (root / "sub" / "back").symlink_to("../sub/../hello.txt")
    (root / "abs-out").symlink_to("/etc/passwd")
    (root / "abs-dotdot").symlink_to(f"{root}/../outside/secret.txt")
    (root / "dangling").symlink_to("nowhere")
    assert _errno_of(opener, "sub/esc") == errno.EXDEV
    assert _errno_of(opener, "abs-out") == errno.EXDEV
    assert _errno_of(opener, "abs-dotdot") == errno.EXDEV
    assert _errno_of(opener, "sub/back") == 0
    assert _errno_of(opener, "dangling") == errno.ENOENT
    assert _errno_of(opener, "hello.txt/x") == errno.ENOTDIR
    assert _errno_of(opener, "missing/deeper") == errno.ENOENT
    assert _errno_of(opener, ".") == 0


def test_walk_leaks_no_descriptors(root: Path, opener: RootOpener) -> None:
    (root / "sub" / "esc").symlink_to("../../outside/secret.txt")
    (root / "sub" / "deep").mkdir()
    (root / "sub" / "deep" / "up").symlink_to("../../hello.txt")
    before = len(os.listdir("/proc/self/fd"))
    for rel in ("sub/esc", "sub/deep/up", "sub/deep/missing", "sub/deep/up/x", "sub/deep"):
        try:
            os.close(opener.open(rel))
        except OSError:
            pass
    assert len(os.listdir("/proc/self/fd")) == before


def test_directory_swapped_for_a_link_mid_open_never_escapes(
    root: Path, outside: Path, opener: RootOpener
) -> None:
    """A thread keeps swapping directory ``d`` for a symlink to an outside
    directory holding a file of the same name, and back: opening
    ``d/file.txt`` never yields the outside file (the ``windows`` strategy
    resolves by name, so this is the race its handle check must catch)."""
    real = root / "d.real"
    real.mkdir()
    (real / "file.txt").write_text("inside\n")
    (outside / "file.txt").write_text("OUTSIDE\n")
    link = root / "d.link"
    link.symlink_to(outside)
    d = root / "d"
    real.rename(d)
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            d.rename(real)  # d gone
            link.rename(d)  # d -> outside
            d.rename(link)
            real.rename(d)  # d real again

    t = threading.Thread(target=flipper, daemon=True)
    t.start()
    served = escaped = 0
    try:
        for i in range(30000):
            if i >= 3000 and served:
                break
            try:
                fd = opener.open("d/file.txt")
            except OSError:
                continue
            try:
                data = os.read(fd, 100)
            finally:
                os.close(fd)
            served += 1
            escaped += data == b"OUTSIDE\n"
    finally:
        stop.set()
        t.join()
    assert escaped == 0
    assert served > 0


def test_directory_swapped_between_the_checks_and_the_open_is_refused(
    root: Path, outside: Path, opener: RootOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst interleaving, made deterministic: ``d`` is a real directory
    when checked, a link to the outside when its file is looked up and
    opened, and real again when the ancestors are re-checked.  The opened
    handle's own path gives it away (``GetFinalPathNameByHandleW`` on
    Windows; ``/proc/self/fd`` stands in for it where the strategy is
    simulated)."""
    d = root / "d"
    d.mkdir()
    (d / "file.txt").write_text("inside\n")
    (outside / "file.txt").write_text("OUTSIDE\n")
    real_lstat, real_open = os.lstat, os.open
    parked = root / "d.parked"

    def lstat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).endswith("/d/file.txt") and not parked.exists():
            d.rename(parked)
            d.symlink_to(outside)
        return real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]

    def open_(path: object, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)  # type: ignore[arg-type]
        if parked.exists():
            d.unlink()
            parked.rename(d)
        return fd

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "open", open_)
    try:
        fd = opener.open("d/file.txt")
    except OSError as exc:
        assert exc.errno == errno.EXDEV
        return
    finally:
        monkeypatch.undo()
    try:
        data = os.read(fd, 100)
    finally:
        os.close(fd)
    assert data == b"inside\n"


# ---- deep paths: the segment cap and bounded opens


@dataclass
class OpenCounts:
    calls: int = 0  # RootOpener.open
    syscalls: int = 0  # openat / openat2 / readlinkat made by the opener


@contextmanager
def counting(srv: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenCounts]:
    counts = OpenCounts()
    opener = srv.opener
    real_open = opener.open

    def counted_open(rel: str) -> int:
        counts.calls += 1
        return real_open(rel)

    def counted(fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            counts.syscalls += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(opener, "open", counted_open)
    monkeypatch.setattr(os, "open", counted(os.open))
    monkeypatch.setattr(os, "readlink", counted(os.readlink))
    if _fsopen._syscall is not None:
        monkeypatch.setattr(_fsopen, "_syscall", counted(_fsopen._syscall))
        # The per-request openat2 (RootOpener._openat2) goes through this one.
        monkeypatch.setattr(_fsopen, "_syscall_bare", counted(_fsopen._syscall_bare))
    yield counts


async def test_spa_deep_missing_path_costs_a_bounded_number_of_opens(
    root: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing path just under the segment cap: the target's open and the
    SPA file's, not one open per missing level."""
    path = "/a" * MAX_SEGMENTS
    async with memory_connection(make_config(root, spa="index.html")) as (client, srv, _):
        _ = srv.opener
        with counting(srv, monkeypatch) as counts:
            r = await client.get(path)
    assert r.status == 200 and r.body == b"<h1>home</h1>\n"
    assert counts.calls == 2
    assert counts.syscalls <= 4


async def test_deep_existing_prefix_is_walked_once(
    root: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deep existing prefix, then missing levels: at most one open per
    segment of the target (a walk), never one per level and prefix."""
    deep = root.joinpath(*["d"] * 60)
    deep.mkdir(parents=True)
    path = "/d" * 60 + "/x" * (MAX_SEGMENTS - 60)
    async with memory_connection(make_config(root, spa="index.html")) as (client, srv, _):
        _ = srv.opener
        with counting(srv, monkeypatch) as counts:
            r = await client.get(path)
    assert r.status == 200
    assert counts.calls == 2
    assert counts.syscalls <= 61 + 2


@pytest.mark.parametrize("spa", [None, "index.html"])
async def test_too_many_segments_is_414(
    root: Path, strategy: str, spa: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_config(root, spa=spa)
    statuses = []
    for path in ("/a" * (MAX_SEGMENTS + 1), "/a" * 2040):
        # A bad target ends its connection (like every request-target error).
        async with memory_connection(cfg) as (client, srv, _):
            _ = srv.opener
            with counting(srv, monkeypatch) as counts:
                statuses.append((await client.get(path)).status)
            assert counts.calls == 0  # refused before any filesystem work
    assert statuses == [414, 414]
