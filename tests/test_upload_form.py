"""The upload form's POST (serverio.upload.form) through the write step
(serverio.upload.service.Uploads.write), without a transport, and the
CSRF rule (serverio.upload.decide.cross_site).

Every write test ends with :func:`tests.test_upload_writer.clean`: no
temporary anywhere under the root, no descriptor more than before, no
pool token held.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from serverio.fs import writer
from serverio.http.core import Plan, RequestFacts
from serverio.http.target import parse_target
from serverio.upload.decide import cross_site
from serverio.writes.multipart import MultipartParser

from .conftest import extra, open_fd_count
from .test_upload_writer import CancelAt, Chunks, Rig, clean, header

BOUNDARY = "----serverioFormBoundary7MA4YWxkTrZu0gW"
ORIGIN = "http://t:8000"


def form_body(*parts: tuple[str, str | None, bytes]) -> bytes:
    """(field name, filename or None, content) -> a multipart/form-data body."""
    out = []
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"'
        if filename is not None:
            disp += f'; filename="{filename}"'
        head = f"--{BOUNDARY}\r\nContent-Disposition: {disp}\r\n"
        if filename is not None:
            head += "Content-Type: application/octet-stream\r\n"
        out.append(head.encode("utf-8") + b"\r\n" + data + b"\r\n")
    return b"".join(out) + f"--{BOUNDARY}--\r\n".encode()


def post(path: str = "/", *, accept: str | None = None, **given: Any) -> RequestFacts:
    fields: dict[str, Any] = {
        "content_type": f"multipart/form-data; boundary={BOUNDARY}",
        "origin": ORIGIN,
        "host": "t:8000",
    }
    fields.update(given)
    return RequestFacts(
        method=b"POST",
        target=parse_target(b"POST", path.encode()),
        accept=accept,
        extra=extra(**fields),
    )


def pieces(body: bytes, size: int = 7000) -> Chunks:
    return Chunks([body[i : i + size] for i in range(0, len(body), size)])


@pytest.fixture
def rig(root: Path) -> Any:
    r = Rig(root)
    yield r
    r.close()


async def send(rig: Rig, req: RequestFacts, body: bytes, size: int = 7000) -> Plan:
    return await rig.run(req, pieces(body, size))


# ------------------------------------------------------------------ basics


async def test_two_files_are_written_and_the_browser_is_sent_back(rig: Rig) -> None:
    fds = open_fd_count()
    a, b = os.urandom(50_000), b"second file\n"
    plan = await send(rig, post("/noindex/"), form_body(("file", "a.bin", a), ("file", "b.txt", b)))
    assert plan.status == 303  # See Other: the reload is a GET, never a repost
    assert header(plan, b"location") == b"/noindex/"
    assert (rig.root / "noindex" / "a.bin").read_bytes() == a
    assert (rig.root / "noindex" / "b.txt").read_bytes() == b
    assert rig.stats.writes.files == 2 and rig.stats.writes.bytes == len(a) + len(b)
    assert rig.stats.writes.aborted == 0
    await clean(rig, fds)


async def test_json_is_asked_for_and_given_201_with_a_summary(rig: Rig) -> None:
    fds = open_fd_count()
    body = form_body(("file", "caf\u00e9 #1.txt", b"x"), ("mkdir", None, b"new dir"))
    plan = await send(rig, post("/", accept="application/json"), body)
    assert plan.status == 201
    summary = json.loads(b"".join(p for p in plan.body if isinstance(p, bytes)))
    assert summary == {
        "files": [{"name": "caf\u00e9 #1.txt", "href": "/caf%C3%A9%20%231.txt", "size": 1}],
        "directories": [{"name": "new dir", "href": "/new%20dir/"}],
    }
    assert header(plan, b"location") == b"/caf%C3%A9%20%231.txt"
    assert (rig.root / "new dir").is_dir()
    await clean(rig, fds)


async def test_an_empty_file_input_and_other_fields_are_ignored(rig: Rig) -> None:
    fds = open_fd_count()
    before = sorted(os.listdir(rig.root))
    body = form_body(("file", "", b""), ("note", None, b"hello"))
    plan = await send(rig, post("/"), body)
    assert plan.status == 303
    assert sorted(os.listdir(rig.root)) == before
    await clean(rig, fds)


async def test_a_post_to_a_file_is_405_and_without_multipart_415(rig: Rig) -> None:
    assert (await send(rig, post("/hello.txt"), form_body(("file", "a", b"x")))).status == 405
    plain = post("/", content_type="text/plain")
    assert (await send(rig, plain, b"x")).status == 415
    assert (await send(rig, post("/", content_type=None), b"x")).status == 415
    assert (await send(rig, post("/missing/"), form_body(("file", "a", b"x")))).status == 409


# ------------------------------------------------------------ duplicates


@pytest.mark.parametrize(
    ("policy", "status", "name", "old"),
    [
        ("error", 409, None, b"hello world\n"),
        ("rename", 303, "hello (1).txt", b"hello world\n"),
        ("overwrite", 303, "hello.txt", b"NEW"),
    ],
)
async def test_on_duplicate(
    root: Path, policy: str, status: int, name: str | None, old: bytes
) -> None:
    rig = Rig(root, on_duplicate=policy)
    fds = open_fd_count()
    plan = await send(rig, post("/"), form_body(("file", "hello.txt", b"NEW")))
    assert plan.status == status
    assert (root / "hello.txt").read_bytes() == old
    if name is not None:
        assert (root / name).read_bytes() == b"NEW"
    if policy == "rename":  # and again: the next free variant
        await send(rig, post("/"), form_body(("file", "hello.txt", b"NEW2")))
        assert (root / "hello (2).txt").read_bytes() == b"NEW2"
    await clean(rig, fds)
    rig.close()


async def test_a_directory_of_the_name_is_never_replaced(root: Path) -> None:
    rig = Rig(root, on_duplicate="overwrite")
    fds = open_fd_count()
    plan = await send(rig, post("/"), form_body(("file", "sub", b"x")))
    assert plan.status == 409
    assert (root / "sub").is_dir()
    await clean(rig, fds)
    rig.close()


# ------------------------------------------------------------ hostile names

# RFC 7578 §4.2: the directory part a sender includes is dropped.
REDUCED = [
    ("../../escape.txt", "escape.txt"),
    ("..\\..\\win.txt", "win.txt"),
    ("C:\\Users\\me\\report.pdf", "report.pdf"),
    ("/etc/passwd", "passwd"),
    ("e\u0301t\u00e9.txt", "\u00e9t\u00e9.txt"),  # NFD -> NFC
]
REFUSED = [
    "..",
    ".",
    "../..",
    ".htaccess",
    ".serverio-tmp-0123",
    "con",
    "NUL.txt",
    "com1.log",
    "trailing.",
    "trailing ",
    "a:b",
    "a*b",
    "tab\tname",
    "bell\x07",
    "del\x7f",
    "x" * 256,
    "\u00e9" * 128,  # 256 bytes of UTF-8
    "dir/",
    "invoice\u202efdp.exe",  # bidi override: would display as invoiceexe.pdf
    "a\u2066b\u2069.txt",  # bidi isolates
]


@pytest.mark.parametrize(("raw", "name"), REDUCED)
async def test_file_names_are_reduced_to_a_base_name(rig: Rig, raw: str, name: str) -> None:
    fds = open_fd_count()
    plan = await send(rig, post("/noindex/"), form_body(("file", raw, b"data")))
    assert plan.status == 303
    assert (rig.root / "noindex" / name).read_bytes() == b"data"
    assert not (rig.root.parent / "escape.txt").exists()
    await clean(rig, fds)


@pytest.mark.parametrize("raw", REFUSED)
async def test_hostile_file_names_are_400_and_write_nothing(rig: Rig, raw: str) -> None:
    fds = open_fd_count()
    before = sorted(str(p) for p in rig.root.parent.rglob("*"))
    plan = await send(rig, post("/"), form_body(("file", raw, b"data")))
    assert plan.status == 400
    assert sorted(str(p) for p in rig.root.parent.rglob("*")) == before
    await clean(rig, fds)


@pytest.mark.parametrize("raw", ["..", ".x", "a/b", "con", "bad\x01", "", "rtl\u202e"])
async def test_hostile_directory_names_are_400(rig: Rig, raw: str) -> None:
    fds = open_fd_count()
    before = sorted(str(p) for p in rig.root.rglob("*"))
    plan = await send(rig, post("/"), form_body(("mkdir", None, raw.encode())))
    assert plan.status == 400
    assert sorted(str(p) for p in rig.root.rglob("*")) == before
    assert (await send(rig, post("/"), form_body(("mkdir", None, b"sub")))).status == 409
    await clean(rig, fds)


# ------------------------------------------------------------ bounds, failures


async def test_a_file_past_the_limit_is_413_and_leaves_nothing(root: Path) -> None:
    rig = Rig(root, max_upload_size=10_000)
    fds = open_fd_count()
    plan = await send(rig, post("/"), form_body(("file", "huge.bin", b"x" * 10_001)))
    assert plan.status == 413 and plan.close
    assert not (root / "huge.bin").exists()
    # The request's body counts too: two files each under the limit.
    body = form_body(("file", "a.bin", b"a" * 6000), ("file", "b.bin", b"b" * 6000))
    chunked = Chunks([body[i : i + 1000] for i in range(0, len(body), 1000)], declared=None)
    assert (await rig.run(post("/"), chunked)).status == 413
    assert (root / "a.bin").read_bytes() == b"a" * 6000  # complete before the limit: kept
    assert not (root / "b.bin").exists()
    assert rig.stats.writes.aborted == 2
    await clean(rig, fds)
    rig.close()


async def test_a_declared_length_past_the_limit_is_413_before_reading(root: Path) -> None:
    rig = Rig(root, max_upload_size=100)
    content = Chunks([b"never read"], declared=101)
    plan = await rig.run(post("/"), content)
    assert plan.status == 413
    assert content.parts == [b"never read"]
    rig.close()


async def test_a_truncated_form_removes_the_file_in_progress(rig: Rig) -> None:
    fds = open_fd_count()
    body = form_body(("file", "done.txt", b"complete"), ("file", "cut.txt", b"y" * 30_000))
    cut = body[: body.index(b"y" * 100) + 20_000]
    plan = await send(rig, post("/"), cut, size=4096)
    assert plan.status == 400  # the body ended before the close delimiter
    assert (rig.root / "done.txt").read_bytes() == b"complete"  # its part had ended: committed
    assert not (rig.root / "cut.txt").exists()
    assert rig.stats.writes.aborted == 1 and rig.stats.writes.temps_removed >= 1
    await clean(rig, fds)


@pytest.mark.parametrize(
    ("call", "code", "status"),
    [("write", errno.ENOSPC, 507), ("fsync", errno.EIO, 500), ("open", errno.EACCES, 403)],
)
async def test_a_failing_file_layer_leaves_nothing(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, call: str, code: int, status: int
) -> None:
    fds = open_fd_count()
    real = getattr(writer.SYS, call)
    calls = [0]

    def failing(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        if call == "open" and kw.get("dir_fd") is None and not args[0].startswith(".serverio"):
            return real(*args, **kw)  # containment's own opens
        if calls[0] >= 2 or call != "write":
            raise OSError(code, os.strerror(code))
        return real(*args, **kw)

    monkeypatch.setattr(writer.SYS, call, failing)
    plan = await send(rig, post("/"), form_body(("file", "f.bin", b"z" * 30_000)), size=5000)
    assert plan.status == status
    assert not (rig.root / "f.bin").exists()
    await clean(rig, fds)


async def test_memory_is_bounded_by_the_chunk(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 MiB file fed in 16 KiB pieces: no write is larger than a piece
    (the parser keeps at most a delimiter's length between pieces)."""
    fds = open_fd_count()
    sizes: list[int] = []
    real = writer.SYS.write

    def write(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return real(fd, data)

    monkeypatch.setattr(writer.SYS, "write", write)
    data = os.urandom(2 << 20)
    plan = await send(rig, post("/"), form_body(("file", "huge.bin", data)), size=16384)
    assert plan.status == 303
    assert (rig.root / "huge.bin").read_bytes() == data
    assert len(sizes) > 100 and max(sizes) <= 16384 + len(BOUNDARY) + 4
    parser = MultipartParser(BOUNDARY.encode())
    parser.feed(form_body(("file", "x", data))[:-100])
    assert parser.buffered < len(BOUNDARY) + 8
    await clean(rig, fds)


# ------------------------------------------------------------ cancellation


async def test_a_form_cancelled_at_any_checkpoint_leaves_no_temporary(rig: Rig) -> None:
    a, b = b"A" * 9000, b"B" * 9000
    body = form_body(("file", "a.bin", a), ("mkdir", None, b"made"), ("file", "b.bin", b))
    fds = open_fd_count()
    k = 0
    while True:
        k += 1
        assert k < 600, "the form never completed"
        for name in ("a.bin", "b.bin"):
            if (rig.root / name).exists():
                os.unlink(rig.root / name)
        if (rig.root / "made").exists():
            os.rmdir(rig.root / "made")
        with trio.CancelScope() as scope:
            inst = CancelAt(trio.lowlevel.current_task(), scope, k)
            trio.lowlevel.add_instrument(inst)
            try:
                plan = await send(rig, post("/"), body, size=3000)
            finally:
                trio.lowlevel.remove_instrument(inst)
        await clean(rig, fds)
        for name, data in (("a.bin", a), ("b.bin", b)):
            p = rig.root / name
            assert not p.exists() or p.read_bytes() == data  # whole or absent
        if not scope.cancelled_caught:
            assert plan.status == 303
            break
    assert k > 15  # every pull, every pool hop, both commits, the mkdir
    assert rig.stats.writes.aborted >= k - 3


# ------------------------------------------------------------ the CSRF rule


@pytest.mark.parametrize(
    ("origin", "host", "tls", "fetch", "cross"),
    [
        ("http://t:8000", "t:8000", False, None, False),
        ("http://T:8000", "t:8000", False, None, False),  # host case folded
        ("http://t", "t:80", False, None, False),  # default port folded
        ("https://t", "t", True, None, False),
        ("http://t:8000", "t:8001", False, None, True),
        ("http://evil.example", "t:8000", False, None, True),
        ("https://t:8000", "t:8000", False, None, True),  # another scheme
        ("http://t:8000", "t:8000", True, None, True),
        ("null", "t:8000", False, None, True),
        ("http://t:8000/path", "t:8000", False, None, True),
        ("http://t:8000", None, False, None, True),  # no Host to compare with
        ("http://[::1]:8000", "[::1]:8000", False, None, False),
        ("http://t:bad", "t:8000", False, None, True),
        (None, "t", False, "cross-site", True),
        (None, "t", False, "same-site", True),
        (None, "t", False, "same-origin", False),
        (None, "t", False, "none", False),
        (None, "t", False, None, False),  # curl: no browser, no ambient credentials
    ],
)
def test_cross_site(
    origin: str | None, host: str | None, tls: bool, fetch: str | None, cross: bool
) -> None:
    req = RequestFacts(
        method=b"POST",
        target=parse_target(b"POST", b"/"),
        tls=tls,
        extra=extra(origin=origin, host=host, sec_fetch_site=fetch),
    )
    assert cross_site(req) is cross


async def test_a_cross_site_form_is_403_and_reads_nothing(rig: Rig) -> None:
    content = pieces(form_body(("file", "a.txt", b"x")))
    plan = await rig.run(post("/", origin="http://evil.example"), content)
    assert plan.status == 403
    assert content.parts and not (rig.root / "a.txt").exists()
