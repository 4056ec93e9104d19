"""Containment and file identity on the real Windows API (the Wine run).

tests/wine/suite.py runs this file under the official Windows CPython in
Wine: real ``ntpath``, drive letters, ``\\`` separators, case-insensitive
lookups, 8.3 short names, alternate data streams, junctions and the
``CreateFileW`` / ``GetFinalPathNameByHandleW`` / ``GetFileInformationByHandleEx``
calls of serverio/fs/opener.py and serverio/fs/winstat.py.  The tests that
hold on every platform (a file replaced or deleted while it is open, a
same-size rewrite with a restored mtime) run everywhere; the others need
Windows itself and say so when skipped.
"""

from __future__ import annotations

import errno
import ntpath
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverio.fs import opener as _fsopen
from serverio.fs import winstat
from serverio.fs.filecache import identity
from serverio.fs.opener import RootOpener

WINDOWS = sys.platform == "win32"
needs_windows = pytest.mark.skipif(
    not WINDOWS, reason="needs the Windows API (runs in the Wine run, tests/wine/suite.py)"
)

SECRET = b"the bytes of a file that must not be served\r\n"
PUBLIC = b"public bytes\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_bytes(PUBLIC)
    (www / "sub").mkdir()
    (www / "sub" / "page.txt").write_bytes(PUBLIC)
    (www / ".hidden-dir").mkdir()
    (www / ".hidden-dir" / "secret.txt").write_bytes(SECRET)
    (www / ".env").write_bytes(SECRET)
    (tmp_path / "outside.txt").write_bytes(SECRET)
    return www


@pytest.fixture
def opener(root: Path) -> Iterator[RootOpener]:
    # No strategy forced: on Windows the platform picks "windows" itself.
    op = RootOpener(str(root), follow_symlinks=False, hidden=False)
    try:
        yield op
    finally:
        op.close()


def read_via(op: RootOpener, rel: str) -> bytes:
    fd = op.open(rel)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def refused(op: RootOpener, rel: str) -> int:
    """The errno the open fails with (the test fails if it opens)."""
    try:
        fd = op.open(rel)
    except OSError as exc:
        assert exc.errno is not None
        return exc.errno
    os.close(fd)
    raise AssertionError(f"{rel!r} was opened")


# ------------------------------------------------------------ every platform


def test_a_file_being_served_can_be_renamed_replaced_and_deleted(
    root: Path, opener: RootOpener
) -> None:
    """A deploy that swaps files while one is being sent must not fail:
    Windows refuses to rename or delete a file opened without
    FILE_SHARE_DELETE (``os.open``'s share mode), so the opener shares it
    for deleting too (found by the Wine run: PermissionError, WinError 32).
    Renaming the served file aside and moving the new one in works then;
    a direct ``os.replace`` over the open file is refused by Wine 8.0 and
    by ``MoveFileExW`` unless the renamer asks for POSIX semantics."""
    fd = opener.open("index.html")
    try:
        new = root / "index.html.new"
        new.write_bytes(b"the new version\n")
        os.replace(root / "index.html", root / "index.html.old")
        os.replace(new, root / "index.html")
        os.unlink(root / "index.html.old")
        assert os.read(fd, 100) == PUBLIC  # the open file is still the old one
    finally:
        os.close(fd)
    assert read_via(opener, "index.html") == b"the new version\n"
    fd = opener.open("sub/page.txt")
    try:
        os.unlink(root / "sub" / "page.txt")
        assert os.read(fd, 100) == PUBLIC
    finally:
        os.close(fd)
    assert refused(opener, "sub/page.txt") == errno.ENOENT


def test_a_same_size_rewrite_with_restored_mtime_changes_the_identity(
    root: Path, opener: RootOpener
) -> None:
    """The caches' identity includes the change time (POSIX ctime; Windows
    ChangeTime through winstat), never the creation time Windows' os.stat
    reports as st_ctime: found by the Wine run."""
    path = root / "sub" / "page.txt"
    fd = opener.open("sub/page.txt")
    try:
        before = winstat.fstat(fd)
    finally:
        os.close(fd)
    assert identity(opener.stat("sub/page.txt")) == identity(before)  # path and handle agree
    time.sleep(0.05)
    path.write_bytes(b"X" * len(PUBLIC))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = opener.stat("sub/page.txt")
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert identity(after) != identity(before)
    fd = opener.open("sub/page.txt")
    try:
        assert identity(winstat.fstat(fd)) == identity(after)
    finally:
        os.close(fd)


def test_bytes_are_read_untranslated(root: Path, opener: RootOpener) -> None:
    """CRLF, a lone LF and Ctrl+Z (text mode's end of file on Windows) come
    back as written: the descriptor is binary on every platform."""
    data = b"a\r\nb\nc\x1ad\r\r\n" * 100
    (root / "sub" / "bin.dat").write_bytes(data)
    assert read_via(opener, "sub/bin.dat") == data


# --------------------------------------------------------------- Windows only


@needs_windows
def test_the_platform_picks_the_windows_strategy_on_ntpath(opener: RootOpener) -> None:
    assert opener.strategy == "windows" and opener.root_fd == -1
    assert os.path is ntpath and ntpath.splitdrive(opener.root)[0][1:] == ":"
    assert read_via(opener, "sub/page.txt") == PUBLIC
    # A request's segments are split on "/" only: "\\" is a separator for
    # Windows, so a name containing one (an encoded %5C in a request) would
    # open another path than the one the site rules matched: refused.
    with pytest.raises(OSError):
        read_via(opener, "sub\\page.txt")


@needs_windows
def test_final_path_is_asked_of_every_open(
    opener: RootOpener, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: list[str | None] = []
    real = _fsopen._final_path

    def spy(fd: int) -> str | None:
        answers.append(real(fd))
        return answers[-1]

    monkeypatch.setattr(_fsopen, "_final_path", spy)
    assert read_via(opener, "sub/page.txt") == PUBLIC
    os.close(opener.open("sub"))
    assert len(answers) == 2 and all(a is not None for a in answers)
    assert [ntpath.normcase(a) for a in answers if a] == [
        ntpath.normcase(str(root / "sub" / "page.txt")),
        ntpath.normcase(str(root / "sub")),
    ]
    # No answer from GetFinalPathNameByHandleW: refused, not trusted.
    monkeypatch.setattr(_fsopen, "_final_path", lambda fd: None)
    assert refused(opener, "sub/page.txt") == errno.EXDEV


@needs_windows
def test_case_insensitive_lookups_reach_the_same_file(opener: RootOpener) -> None:
    assert read_via(opener, "SUB/PAGE.TXT") == PUBLIC
    assert read_via(opener, "Index.HTML") == PUBLIC
    # A hidden name is hidden in any case.
    assert refused(opener, ".HIDDEN-DIR/secret.txt") == errno.EXDEV
    assert refused(opener, ".ENV") == errno.EXDEV


# Device names, trailing dots and spaces, streams, drives, "\\" separators.
REINTERPRETED = (
    "CON", "NUL", "nul.txt", "COM1.txt", "sub/AUX", "LPT1", "CONOUT$",
    "index.html.", "index.html ", "index.html. .", ".env.", "sub./page.txt",
    "index.html::$DATA", "index.html:$DATA", "index.html:stream", "C:index.html",
    "sub\\..\\..\\outside.txt", "..\\outside.txt",
)  # fmt: skip


@needs_windows
def test_names_windows_would_reinterpret_are_refused(opener: RootOpener) -> None:
    got = {rel: refused(opener, rel) for rel in REINTERPRETED}
    assert {rel: e for rel, e in got.items() if e not in (errno.EXDEV, errno.ENOENT)} == {}


@needs_windows
def test_an_absolute_or_drive_path_never_leaves_the_root(opener: RootOpener, root: Path) -> None:
    outside = str(root.parent / "outside.txt")
    for rel in (outside, outside.replace("\\", "/"), "\\\\?\\" + outside, "/" + outside):
        assert refused(opener, rel) in (errno.EXDEV, errno.ENOENT)


def _short_name(path: Path) -> str | None:
    import ctypes

    buf = ctypes.create_unicode_buffer(32768)
    kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined, unused-ignore]
    n = kernel32.GetShortPathNameW(str(path), buf, len(buf))
    if n == 0 or n >= len(buf):
        return None
    short = ntpath.basename(buf.value)
    return short if short.casefold() != path.name.casefold() else None


@needs_windows
def test_short_names_of_any_form_are_refused(opener: RootOpener, root: Path) -> None:
    """The filesystem's own short name for a hidden directory (NTFS
    ``HIDDEN~1``; Wine makes ``_HID~NSX``) must not reach it, nor any other
    alias: found by the Wine run, where ``_HID~NSX`` served .hidden-dir."""
    long_dir = root / "a directory with a long name"
    long_dir.mkdir()
    (long_dir / "page.txt").write_bytes(PUBLIC)
    hidden_short = _short_name(root / ".hidden-dir")
    other_short = _short_name(long_dir)
    if hidden_short is None or other_short is None:
        pytest.skip("this volume makes no 8.3 short names (NTFS with 8dot3name off)")
    assert "~" in hidden_short
    assert refused(opener, f"{hidden_short}/secret.txt") == errno.EXDEV
    assert refused(opener, f"{other_short}/page.txt") == errno.EXDEV
    assert read_via(opener, "a directory with a long name/page.txt") == PUBLIC


@needs_windows
def test_a_junction_out_of_the_root_is_refused(opener: RootOpener, root: Path) -> None:
    import _winapi

    target = root.parent / "outside-dir"
    target.mkdir()
    (target / "secret.txt").write_bytes(SECRET)
    try:
        create_junction = getattr(_winapi, "CreateJunction")  # noqa: B009 - Windows only
        create_junction(str(target), str(root / "out"))
        create_junction(str(root / "sub"), str(root / "in"))
    except OSError as exc:
        pytest.skip(f"no junctions on this filesystem (Wine 8.0: {exc})")
    assert refused(opener, "out/secret.txt") == errno.EXDEV
    assert read_via(opener, "in/page.txt") == PUBLIC
