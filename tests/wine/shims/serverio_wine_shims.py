"""Wine-only shims for the Windows CPython the tests run under Wine.

Installed by tests/wine/prefix.py into the prefix's ``Lib\\site-packages``
(with ``serverio_wine_shims.pth``, so every interpreter of a run, each
``python.exe -m serverio`` a test starts included, loads it at start-up).
Nothing here is part of serverio, and nothing here runs on real Windows.
Each shim names the Wine gap it covers and what real Windows does instead.

The third Wine-only shim is outside Python: ``bcryptprimitives.dll``
(see bcryptprimitives.c).  The fourth is a file move done by the setup:
``_wmi.pyd`` is renamed aside, because ``platform.uname()`` calls
``_wmi.exec_query`` and Wine 8.0's WMI service calls the unimplemented
``propsys.VariantToString``, which aborts the process (not an exception);
without ``_wmi`` CPython's ``platform`` falls back to
``sys.getwindowsversion()``.  On real Windows ``_wmi`` answers the query.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

# WSAEOPNOTSUPP: what Wine 8.0's ws2_32 answers WSAIoctl with for
# SIO_BASE_HANDLE and SIO_BSP_HANDLE_SELECT/_POLL (not implemented there).
_WSAEOPNOTSUPP = 10045
_TRIO_IOCP = "trio._core._io_windows"


def _patch_trio_iocp(module: ModuleType) -> None:
    """trio's IOCP backend asks WSAIoctl(SIO_BASE_HANDLE) for the base
    provider socket of every socket it polls (AFD polling needs the base
    handle), and at start-up checks SIO_BSP_HANDLE_SELECT against it.
    Wine 8.0 answers both with WSAEOPNOTSUPP although its AFD polling works
    on the socket handle itself.  On real Windows without a layered service
    provider both ioctls return the socket itself, which is what this
    returns when (and only when) Wine refuses the ioctl."""
    original = module.__dict__["_get_underlying_socket"]

    def _get_underlying_socket(sock: Any, **kwargs: Any) -> Any:
        try:
            return original(sock, **kwargs)
        except OSError as exc:
            if getattr(exc, "winerror", None) != _WSAEOPNOTSUPP:
                raise
            fd = sock.fileno() if hasattr(sock, "fileno") else sock
            return module.__dict__["_handle"](fd)

    module.__dict__["_get_underlying_socket"] = _get_underlying_socket


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches a module right after its own import finished (so trio is
    not imported by interpreters that never use it)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TRIO_IOCP:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module: ModuleType) -> None:
            exec_module(module)
            _patch_trio_iocp(module)

        loader.exec_module = patched  # type: ignore[method-assign]
        return spec


if sys.platform == "win32":
    sys.meta_path.insert(0, _AfterImport())
