"""``stat`` results whose ``st_ctime_ns`` is the change time on every platform.

The caches identify a file by (device, inode, size, mtime, ctime): a
same-size rewrite whose mtime was restored afterwards (``cp -p``, ``rsync
-t``, ``touch -r``, a deploy tool) still changes POSIX's ctime, the time of
the last data *or* metadata change, which no ordinary call can set.  On
Windows ``os.stat`` reports the *creation* time there (CPython documents
``st_ctime`` as creation time on Windows, also ``st_birthtime``), which such
a rewrite leaves alone: the caches would serve the old bytes.  NTFS, ReFS
and Wine keep the POSIX meaning as ``ChangeTime`` of ``FILE_BASIC_INFO``
(``GetFileInformationByHandleEx``): on Windows these functions put it in
``st_ctime_ns`` (and ``st_ctime``), so the identity means the same on
every platform.  Elsewhere they are ``os.fstat`` and ``os.stat``.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["fstat", "stat"]

if sys.platform == "win32":  # pragma: no cover - Windows only
    import ctypes
    import msvcrt
    from ctypes import wintypes

    # The kernel32 prototypes the fs package uses, declared once (the
    # opener's CreateFileW calls use these too).
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _GetFileInformationByHandleEx = kernel32.GetFileInformationByHandleEx
    _GetFileInformationByHandleEx.restype = wintypes.BOOL
    _GetFileInformationByHandleEx.argtypes = (
        wintypes.HANDLE,
        ctypes.c_int,
        ctypes.c_void_p,
        wintypes.DWORD,
    )
    CreateFileW = kernel32.CreateFileW
    CreateFileW.restype = wintypes.HANDLE
    CreateFileW.argtypes = (
        wintypes.LPCWSTR,
        wintypes.DWORD,
        wintypes.DWORD,
        ctypes.c_void_p,
        wintypes.DWORD,
        wintypes.DWORD,
        wintypes.HANDLE,
    )
    _CloseHandle = kernel32.CloseHandle
    _CloseHandle.argtypes = (wintypes.HANDLE,)
    _CloseHandle.restype = wintypes.BOOL
    INVALID_HANDLE: Final = wintypes.HANDLE(-1).value

    class _FileBasicInfo(ctypes.Structure):
        _fields_ = (
            ("CreationTime", ctypes.c_int64),
            ("LastAccessTime", ctypes.c_int64),
            ("LastWriteTime", ctypes.c_int64),
            ("ChangeTime", ctypes.c_int64),
            ("FileAttributes", wintypes.DWORD),
        )

    _FILE_BASIC_INFO: Final = 0  # FILE_INFO_BY_HANDLE_CLASS.FileBasicInfo
    # 100 ns ticks between 1601-01-01 (FILETIME) and 1970-01-01.
    _EPOCH_TICKS: Final = 116_444_736_000_000_000
    _VISIBLE: Final = os.stat_result.n_sequence_fields
    _HIDDEN: Final = tuple(
        name
        for name in dir(os.stat_result)
        if name.startswith("st_") and name not in os.stat_result.__match_args__
    )

    def _change_ns(handle: int) -> int:
        info = _FileBasicInfo()
        if not _GetFileInformationByHandleEx(
            handle, _FILE_BASIC_INFO, ctypes.byref(info), ctypes.sizeof(info)
        ):
            raise ctypes.WinError(ctypes.get_last_error())
        ticks: int = info.ChangeTime
        return (ticks - _EPOCH_TICKS) * 100

    def _with_change(st: os.stat_result, change_ns: int) -> os.stat_result:
        seq = list(st)[:_VISIBLE]
        seq[9] = change_ns // 1_000_000_000  # the integer st_ctime
        named = {name: getattr(st, name) for name in _HIDDEN}
        named["st_ctime"] = change_ns / 1e9
        named["st_ctime_ns"] = change_ns
        return os.stat_result(seq, named)

    def fstat(fd: int) -> os.stat_result:
        """``os.fstat`` with the change time as ``st_ctime_ns``."""
        st = os.fstat(fd)
        return _with_change(st, _change_ns(msvcrt.get_osfhandle(fd)))

    def stat(path: str) -> os.stat_result:
        """``os.stat`` (follows links) with the change time as ``st_ctime_ns``,
        both read from one handle (one open, as ``os.stat`` itself costs).
        The handle asks for attributes only and shares everything, so it
        never stands in the way of a writer, a rename or a delete."""
        # FILE_READ_ATTRIBUTES; FILE_SHARE_READ|WRITE|DELETE; OPEN_EXISTING;
        # FILE_FLAG_BACKUP_SEMANTICS (directories too).
        handle = CreateFileW(path, 0x80, 0x7, None, 3, 0x02000000, None)
        if handle is None or handle == INVALID_HANDLE:
            err = ctypes.get_last_error()
            raise OSError(None, ctypes.FormatError(err), path, err)
        try:
            fd = msvcrt.open_osfhandle(handle, os.O_RDONLY | os.O_BINARY)
        except BaseException:
            _CloseHandle(handle)
            raise
        try:
            return fstat(fd)
        finally:
            os.close(fd)

else:
    fstat = os.fstat

    def stat(path: str) -> os.stat_result:
        """``os.stat``: POSIX's ``st_ctime_ns`` is the change time already."""
        return os.stat(path)
