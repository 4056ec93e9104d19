"""Windows-shaped launcher: a SIMULATION, used only by tests.

Runs ``python -m serverio`` (same arguments) after removing from ``os``,
``signal`` and ``socket`` what CPython on Windows lacks: the ``O_NONBLOCK``,
``O_DIRECTORY``, ``O_NOFOLLOW``, ``O_CLOEXEC``, ``O_NOCTTY`` flags; ``sendfile``,
``pread``, ``pwrite``, ``readv``, ``writev``; ``SIGHUP``, ``SIGUSR1/2``;
``SO_REUSEPORT`` and ``AF_UNIX``; the ``resource`` and ``fcntl`` modules.
Every ``dir_fd=`` raises NotImplementedError (``os.supports_dir_fd`` is
empty), ``os.scandir`` refuses descriptors, and ``os.read``/``os.write``
refuse sockets (a Windows socket is not a C runtime descriptor).
serverio is imported only after all that, so a POSIX-only name looked up
at import time fails here.

What this does NOT simulate: ``ntpath`` (paths are still POSIX), case
folding, drive letters, reparse-point attributes, directories that
``os.open`` refuses, ``os.name == "nt"`` (only serverio's own switch on it,
``SOCKET_FD_IO``, is flipped), and trio's IOCP backend (trio still runs on
epoll).  Before serving it prints ``simulation: windows-shaped strategy=...``
on stderr.
"""

from __future__ import annotations

import os
import runpy
import signal
import socket
import stat
import sys
from typing import Any

import h11  # noqa: F401 - third-party imports keep the host platform's view
import trio  # noqa: F401

_OS = ("O_NONBLOCK", "O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "O_NOCTTY", "O_ASYNC")
_OS_CALLS = ("sendfile", "pread", "pwrite", "readv", "writev", "preadv", "pwritev")


# Set on the os module once shaped (the launcher and sitecustomize may both
# run in one interpreter, as two module objects).
_MARK = "_serverio_windows_shaped"


def _no_dir_fd(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dir_fd") is not None:
            raise NotImplementedError(f"{fn.__name__}: dir_fd unavailable on this platform")
        return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    return wrapper


def _not_a_socket(fn: Any) -> Any:
    def wrapper(fd: int, *args: Any) -> Any:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(9, "Bad file descriptor")  # EBADF: not a CRT descriptor
        return fn(fd, *args)

    return wrapper


def shape() -> None:
    """Make this interpreter Windows-shaped (see the module docstring);
    a second call changes nothing."""
    if getattr(os, _MARK, False):
        return
    setattr(os, _MARK, True)
    for name in (*_OS, *_OS_CALLS):
        if hasattr(os, name):
            delattr(os, name)
    for name in ("SIGHUP", "SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            delattr(signal, name)
    # socketpair() keeps working (trio's wake-up pair; CPython on Windows
    # emulates it over loopback TCP), with the family it had.
    real_socketpair, af_unix = socket.socketpair, socket.AF_UNIX

    def socketpair(family: Any = None, *args: Any) -> Any:
        return real_socketpair(af_unix if family is None else family, *args)

    socket.socketpair = socketpair  # type: ignore[assignment]
    for name in ("SO_REUSEPORT", "AF_UNIX"):
        if hasattr(socket, name):
            delattr(socket, name)
    for name in ("open", "stat", "lstat", "readlink", "mkdir", "unlink", "rename", "chmod"):
        setattr(os, name, _no_dir_fd(getattr(os, name)))
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, int):
            raise TypeError("scandir: path should be string, bytes, os.PathLike or None, not int")
        return real_scandir(path)

    os.scandir = scandir
    os.supports_dir_fd = set()
    os.supports_fd = {os.stat}
    os.read = _not_a_socket(os.read)
    os.write = _not_a_socket(os.write)
    for mod in ("resource", "fcntl"):
        sys.modules[mod] = None  # type: ignore[assignment]
    if hasattr(os, "fwalk"):
        del os.fwalk  # it walks by descriptor
    # Modules imported before the shape decided by what os offered then;
    # shutil.rmtree would still walk by descriptor.
    shutil = sys.modules.get("shutil")
    if shutil is not None:
        shutil._use_fd_functions = False  # type: ignore[attr-defined]


def socket_io_through_trio() -> None:
    """What ``os.name == "nt"`` selects in serverio: socket I/O through
    trio's socket methods, never through the descriptor."""
    from serverio.net import emit as connection

    setattr(connection, "SOCKET_FD_IO", False)  # noqa: B010 - a Final flipped for the simulation


def main() -> None:
    shape()
    socket_io_through_trio()
    from serverio.fs.opener import RootOpener

    directory = sys.argv[sys.argv.index("-d") + 1] if "-d" in sys.argv else "."
    probe = RootOpener(directory, follow_symlinks=False)
    print(f"simulation: windows-shaped strategy={probe.strategy}", file=sys.stderr, flush=True)
    probe.close()
    sys.argv = ["serverio", *sys.argv[1:]]
    runpy.run_module("serverio", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
