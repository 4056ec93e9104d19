"""serverio.fs.writer.make_directory: a directory made under containment,
in the write path's fault seam (serverio.fs.writer.SYS).

Every test checks that no descriptor is left open (the parent's is closed
on every path) and that nothing appears outside the root.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from serverio.fs import writer
from serverio.fs.opener import RootOpener
from serverio.fs.writer import Refusal, WriteRefused, make_directory

from .conftest import open_fd_count


@pytest.fixture
def opener(root: Path, strategy: str) -> Any:
    o = RootOpener(str(root), follow_symlinks=False, strategy=strategy)
    yield o
    o.close()


def test_a_directory_is_made_and_its_parent_synced(
    opener: RootOpener, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = open_fd_count()
    synced: list[int] = []
    real = writer.SYS.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(writer.SYS, "fsync", fsync)
    st = make_directory(opener, ("sub", "new"), False)
    assert stat.S_ISDIR(st.st_mode)
    assert (root / "sub" / "new").is_dir()
    assert st.st_ino == os.lstat(root / "sub" / "new").st_ino
    if opener.strategy != "windows":
        assert len(synced) == 1  # the parent directory's entry made durable
    assert open_fd_count() == fds


@pytest.mark.parametrize(
    ("segments", "refusal"),
    [
        (("hello.txt",), Refusal.EXISTS),  # a file there
        (("sub",), Refusal.EXISTS),  # a directory there
        (("missing", "new"), Refusal.NO_PARENT),  # no intermediate directory made
        (("hello.txt", "new"), Refusal.NO_PARENT),  # the parent is a file
        ((".hidden",), Refusal.NAME),
        ((".serverio-tmp-x",), Refusal.NAME),
        (("..",), Refusal.NAME),
        (("a\\b",), Refusal.NAME),
        (("con",), Refusal.NAME),
        (("nul.txt",), Refusal.NAME),
        (("tab\there",), Refusal.NAME),
        (("trailing.",), Refusal.NAME),
        (("e\u0301",), Refusal.NAME),  # not NFC: another name than the one asked for
        (("x" * 256,), Refusal.NAME),
    ],
)
def test_refusals_are_reasons_and_make_nothing(
    opener: RootOpener, root: Path, segments: tuple[str, ...], refusal: Refusal
) -> None:
    fds = open_fd_count()
    before = sorted(str(p) for p in root.rglob("*"))
    with pytest.raises(WriteRefused) as info:
        make_directory(opener, segments, False)
    assert info.value.refusal is refusal
    assert sorted(str(p) for p in root.rglob("*")) == before
    assert open_fd_count() == fds


def test_never_through_or_onto_a_symlink(opener: RootOpener, root: Path, tmp_path: Path) -> None:
    fds = open_fd_count()
    outside = tmp_path / "outside"
    os.symlink(outside, root / "out")
    with pytest.raises(WriteRefused) as info:
        make_directory(opener, ("out", "new"), False)
    assert info.value.refusal is Refusal.NAME
    with pytest.raises(WriteRefused) as info:
        make_directory(opener, ("out",), False)  # a symlink at the name is "something there"
    assert info.value.refusal is Refusal.EXISTS
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert open_fd_count() == fds


def test_hidden_names_with_hidden(opener: RootOpener, root: Path) -> None:
    make_directory(opener, (".config",), True)
    assert (root / ".config").is_dir()
    with pytest.raises(WriteRefused):
        make_directory(opener, (".serverio-tmp-1",), True)  # never a temporary's name


def test_a_directory_that_appears_meanwhile_is_exists(
    opener: RootOpener, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fds = open_fd_count()
    real = writer.SYS.mkdir

    def racing(path: str, mode: int, **kw: Any) -> None:
        real(path, mode, **kw)  # another writer got there first
        real(path, mode, **kw)

    monkeypatch.setattr(writer.SYS, "mkdir", racing)
    with pytest.raises(WriteRefused) as info:
        make_directory(opener, ("race",), False)
    assert info.value.refusal is Refusal.EXISTS
    assert open_fd_count() == fds


@pytest.mark.parametrize(
    ("call", "code"),
    [("mkdir", errno.ENOSPC), ("mkdir", errno.EROFS), ("fsync", errno.EIO), ("lstat", errno.EIO)],
)
def test_a_failing_file_layer_is_an_oserror_and_holds_nothing(
    opener: RootOpener, monkeypatch: pytest.MonkeyPatch, call: str, code: int
) -> None:
    if call == "fsync" and opener.strategy == "windows":
        pytest.skip("no directory fsync under the windows strategy")
    fds = open_fd_count()
    real = getattr(writer.SYS, call)
    calls = [0]

    def failing(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        # lstat: the first call is open_target's look at the name; fail the second.
        if call != "lstat" or calls[0] == 2:
            raise OSError(code, os.strerror(code))
        return real(*args, **kw)

    monkeypatch.setattr(writer.SYS, call, failing)
    with pytest.raises(OSError) as info:
        make_directory(opener, ("d",), False)
    assert info.value.errno == code
    assert open_fd_count() == fds
