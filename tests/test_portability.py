"""Portability pieces that run on Linux: Windows name rules, the
``windows`` containment strategy's own refusals (simulated: that strategy
runs here only because the test forces it), positional reads without
``pread``, listening-socket options, and the one-line refusals of what a
platform cannot do."""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from serverio.errors import ConfigError
from serverio.fs import reads
from serverio.fs.opener import RootOpener
from serverio.fs.winpath import may_be_short_name, windows_name_problem
from serverio.net import activation
from serverio.net.listen import listen_options
from serverio.ops import run as _run
from serverio.ops import workers

from .conftest import make_config


@pytest.mark.parametrize(
    ("segment", "refused"),
    [
        ("index.html", False),
        ("a.b.c", False),
        (".env", False),  # hidden names are the hidden policy's business
        ("..", False),
        ("console.log", False),
        ("nully", False),
        ("com10", False),
        ("a\\b", True),
        ("C:", True),
        ("file.txt::$DATA", True),
        ("a:stream", True),
        ("CON", True),
        ("con", True),
        ("nul.txt", True),
        ("NUL .tar.gz", True),
        ("aux", True),
        ("Prn.x", True),
        ("COM1", True),
        ("com9.log", True),
        ("LPT3", True),
        ("lpt\u00b9", True),
        ("CONIN$", True),
        ("secret.txt.", True),
        ("secret.txt ", True),
        (".env .", True),
        ("tab\there", True),
        ("what?", True),
        ("a*b", True),
        ('"q"', True),
        ("a<b>", True),
        ("pipe|x", True),
    ],
)
def test_windows_name_rules(segment: str, refused: bool) -> None:
    assert (windows_name_problem(segment) is not None) is refused


@pytest.mark.parametrize(
    ("segment", "shaped"),
    [
        ("PROGRA~1", True),
        ("SECRET~1.TXT", True),
        ("a~12", True),
        # Not NTFS's "~digit" shape, but other filesystems' short names:
        # Wine made "_HID~NSX" of ".hidden-dir" (found by the Wine run).
        ("_HID~NSX", True),
        ("~x", True),
        ("a~", True),
        ("plain.txt", False),
        ("PROGRA1", False),
    ],
)
def test_short_name_shape(segment: str, shaped: bool) -> None:
    assert may_be_short_name(segment) is shaped


@pytest.fixture
def windows_opener(root: Path) -> RootOpener:
    op = RootOpener(str(root), follow_symlinks=False, strategy="windows")
    assert op.root_fd == -1  # no directory descriptor: everything by path
    return op


def _errno(op: RootOpener, rel: str) -> int:
    try:
        os.close(op.open(rel))
    except OSError as exc:
        return exc.errno or 0
    return 0


@pytest.mark.skipif(
    sys.platform == "win32", reason="creates files named con, nul... (possible on POSIX only)"
)
def test_simulated_windows_strategy_refuses_reinterpreted_names(
    root: Path, windows_opener: RootOpener
) -> None:
    """Names Win32 would rewrite are refused even where they exist as
    plain files (here on Linux, where they are ordinary names)."""
    for name in ("nul.txt", "con", "secret.txt.", "trail ", "a:b", "back\\slash"):
        (root / name).write_text("x")
    (root / "link-to-con").symlink_to("con")
    for rel in ("nul.txt", "con", "secret.txt.", "trail ", "a:b", "back\\slash", "link-to-con"):
        assert _errno(windows_opener, rel) == errno.EXDEV, rel
    assert _errno(windows_opener, "hello.txt") == 0


def test_simulated_windows_strategy_serves_a_short_shaped_name_only_when_listed(
    root: Path, windows_opener: RootOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "REPORT~1.TXT").write_text("r")
    assert _errno(windows_opener, "REPORT~1.TXT") == 0
    # As Windows would: the name opens (an alias) but the directory lists
    # only the long name.
    real_listdir = os.listdir

    def listdir(path: str = ".") -> list[str]:
        names = real_listdir(path)
        return [".secret-report.txt" if n == "REPORT~1.TXT" else n for n in names]

    monkeypatch.setattr(os, "listdir", listdir)
    assert _errno(windows_opener, "REPORT~1.TXT") == errno.EXDEV


def test_simulated_windows_strategy_never_opens_a_fifo(
    root: Path, windows_opener: RootOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without O_NONBLOCK (Windows has none) opening a FIFO could hang: the
    strategy refuses what lstat says is neither a file nor a directory."""
    os.mkfifo(root / "pipe")
    opened: list[object] = []
    real_open = os.open

    def recording_open(path: str, *args: int, **kwargs: int) -> int:
        opened.append(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    assert _errno(windows_opener, "pipe") == errno.ENOENT
    assert opened == []


def test_simulated_windows_strategy_stats_by_path(root: Path, windows_opener: RootOpener) -> None:
    assert windows_opener.stat("hello.txt").st_ino == os.stat(root / "hello.txt").st_ino


def test_emulated_pread_never_shares_an_offset_between_dups(tmp_path: Path) -> None:
    """Threads reading different offsets through dups of one descriptor (as
    the body, compression and digest readers do) each get their own bytes
    from the lseek+read emulation used where os.pread is missing."""
    data = bytes(range(256)) * 4096  # 1 MiB
    path = tmp_path / "blob"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))  # Windows: no text mode
    dups = [os.dup(fd) for _ in range(4)]
    bad: list[int] = []

    def reader(d: int, start: int) -> None:
        for i in range(300):
            off = (start + i * 4099) % (len(data) - 512)
            if reads.emulated_pread(d, 512, off) != data[off : off + 512]:
                bad.append(off)

    threads = [threading.Thread(target=reader, args=(d, n * 777)) for n, d in enumerate(dups)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in [*dups, fd]:
        os.close(d)
    assert bad == []


@pytest.mark.skipif(not hasattr(os, "pread"), reason="needs os.pread (POSIX)")
def test_pread_is_the_platform_call_where_it_exists() -> None:
    """No wrapper on POSIX: the hot path calls os.pread itself."""
    assert reads.HAS_PREAD and reads.pread is os.pread


@pytest.mark.skipif(
    not hasattr(socket, "SO_REUSEPORT"), reason="simulates Windows from a host with SO_REUSEPORT"
)
def test_listen_options_are_exclusive_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    assert listen_options() == [(socket.SO_REUSEADDR, 1)]
    assert listen_options(reuse_port=True) == [(socket.SO_REUSEADDR, 1), (socket.SO_REUSEPORT, 1)]
    monkeypatch.setattr(socket, "SO_EXCLUSIVEADDRUSE", -5, raising=False)
    monkeypatch.delattr(socket, "SO_REUSEPORT")
    assert listen_options() == [(-5, 1)]  # never SO_REUSEADDR there
    with pytest.raises(OSError):
        listen_options(reuse_port=True)


def test_workers_are_refused_where_reuseport_does_not_balance(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if sys.platform == "win32":
        assert workers.workers_unsupported() is not None  # no SO_REUSEPORT at all
        return
    assert workers.workers_unsupported() is None  # Linux balances
    monkeypatch.setattr(sys, "platform", "darwin")
    assert workers.supervise(make_config(root, workers=2)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "darwin" in err and err.startswith("serverio: error: ")
    monkeypatch.delattr(socket, "SO_REUSEPORT")
    assert workers.workers_unsupported() is not None


def test_inherited_fds_are_refused_without_posix_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "name", "nt")
    with pytest.raises(ConfigError, match="--fd"):
        activation.listeners_from_fds([3])
    assert activation.listeners_from_fds([]) == []


def test_signals_watched_are_the_platform_s() -> None:
    import signal

    if sys.platform == "win32":  # no SIGHUP; Ctrl+Break arrives as SIGBREAK
        assert _run.SIGHUP == -1
        assert set(_run.SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGBREAK}
        return
    assert _run.SIGHUP == signal.SIGHUP
    assert set(_run.SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this host")
async def test_bind_on_ipv6_any_is_dual_stack() -> None:
    """``-b ::`` accepts both families on one listener (like http.server)."""
    import trio

    from serverio.net.listen import _bind

    listener = await _bind("::", 0)
    try:
        port = listener.socket.getsockname()[1]
        for host in ("::1", "127.0.0.1"):
            with trio.fail_after(5):
                client = await trio.open_tcp_stream(host, port)
                server_side = await listener.accept()
                await client.send_all(b"x")
                assert await server_side.receive_some(1) == b"x"
                await client.aclose()
                await server_side.aclose()
    finally:
        await listener.aclose()
