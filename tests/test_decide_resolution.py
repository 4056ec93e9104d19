"""The decision after resolution (serverio.model.decide.decide), as a
table over hand-built Resolution facts: no event loop, no filesystem
(descriptors are /dev/null, checked for who ends up owning them)."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.http.core import FileSpan, Plan, RequestFacts
from serverio.http.select import digest_algorithm, file_headers
from serverio.model import (
    DIRECTORY,
    ERROR,
    FILE,
    LISTING,
    UNAVAILABLE,
    Prepared,
    Reason,
    Rep,
    Resolution,
)
from serverio.model import decide as decide_mod

from .conftest import make_config, memory_connection
from .core_tables import CFG, DATA, NOW, file_facts, header_map, request

GZ = b"\x1f\x8b" + bytes(30)  # a sidecar's bytes (never decoded here)


@pytest.fixture
def fds() -> Iterator[list[int]]:
    """Descriptors handed to resolutions; each must end up closed exactly
    once by the decision or by the Prepared it returns."""
    opened: list[int] = []
    yield opened
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed


def _fd(fds: list[int]) -> int:
    fd = os.open(os.devnull, os.O_RDONLY)
    fds.append(fd)
    return fd


def _file(fds: list[int], data: bytes | None = DATA, **kw: object) -> Resolution:
    rep = Rep(_fd(fds), file_facts(ctype="text/plain"), data)
    return Resolution(FILE, relpath="f.txt", ctype="text/plain", file=rep, **kw)  # type: ignore[arg-type]


def decide(res: Resolution, req: RequestFacts, cfg: Config, now: float) -> Prepared:
    """The decision, on a resolution completed as :func:`serverio.fs.prepare.resolve`
    completes a FILE one: with the selection facts the hop computes."""
    if res.kind == FILE:
        res.extra, res.vary = file_headers(req, cfg, res.relpath, res.ctype)
        res.digest = digest_algorithm(req, cfg)
    return decide_mod.decide(res, req, cfg, now)


@pytest.mark.parametrize(
    ("res", "status"),
    [
        (Resolution(ERROR, Reason.NOT_FOUND, errno.ENOENT), 404),
        (Resolution(ERROR, Reason.FORBIDDEN_NAME, errno.EXDEV), 404),
        (Resolution(ERROR, Reason.NOT_REGULAR), 404),
        (Resolution(ERROR, Reason.DENIED, errno.EACCES), 403),
        (Resolution(ERROR, Reason.EXHAUSTED, errno.EMFILE), 503),
        (Resolution(ERROR, Reason.FAILED, errno.EIO), 500),
        (Resolution(DIRECTORY), 404),
        (Resolution(UNAVAILABLE), 503),
    ],
)
def test_kinds_without_a_file(res: Resolution, status: int) -> None:
    p = decide(res, request(raw=b"/d/"), CFG, NOW)
    assert p.plan.status == status and p.fd == -1 and p.todo is None


def test_directory_without_its_slash_is_redirected() -> None:
    p = decide(Resolution(DIRECTORY), request(raw=b"/d"), CFG, NOW)
    assert p.plan.status == 301 and header_map(p.plan)[b"location"] == b"/d/"


def test_listing_hands_the_directory_on(fds: list[int]) -> None:
    fd = _fd(fds)
    p = decide(Resolution(LISTING, fd=fd), request(raw=b"/d/"), CFG, NOW)
    assert p.todo is not None and p.todo.listing and p.fd == fd
    p.close()


def test_small_file_is_sliced_from_the_bytes_read_in_the_hop(fds: list[int]) -> None:
    p = decide(_file(fds), request(range="bytes=2-5"), CFG, NOW)
    assert p.plan.status == 206 and p.plan.body == (DATA[2:6],)
    assert p.fd == -1  # nothing left to read: closed by the decision


def test_large_file_keeps_its_descriptor_for_the_spans(fds: list[int]) -> None:
    res = _file(fds, data=None)
    fd = res.file.fd if res.file is not None else -1
    p = decide(res, request(), CFG, NOW)
    assert p.plan.status == 200 and p.plan.body == (FileSpan(0, len(DATA)),)
    assert p.fd == fd
    p.close()


@pytest.mark.parametrize(
    "req",
    [
        request(b"HEAD"),
        request(if_none_match='"1-2-14-abc", *'),
    ],
    ids=["head", "304"],
)
def test_no_body_no_descriptor(fds: list[int], req: object) -> None:
    p = decide(_file(fds, data=None), req, CFG, NOW)  # type: ignore[arg-type]
    assert p.fd == -1 and not p.plan.needs_file


def test_sidecar_chosen_over_identity(fds: list[int]) -> None:
    side = Rep(_fd(fds), replace(file_facts(size=len(GZ)), etag='"gz"'), GZ)
    cfg = CFG.evolve(compress_max_size=0)
    res = _file(fds, sidecars={"gzip": side})
    res = replace(res, ctype="text/javascript", relpath="app.js")
    p = decide(res, request(raw=b"/app.js", accept_encoding="gzip"), cfg, NOW)
    h = header_map(p.plan)
    assert p.plan.status == 200 and p.plan.body == (GZ,)
    assert h[b"content-encoding"] == b"gzip" and h[b"vary"] == b"Accept-Encoding"
    assert p.todo is None and p.fd == -1


def test_a_sidecar_that_shrank_is_a_503(fds: list[int]) -> None:
    side = Rep(_fd(fds), file_facts(), None, shrank=True)
    cfg = CFG.evolve(compress_max_size=0)
    res = replace(_file(fds, sidecars={"gzip": side}), ctype="text/javascript", relpath="a.js")
    p = decide(res, request(raw=b"/a.js", accept_encoding="gzip"), cfg, NOW)
    assert p.plan.status == 503 and p.fd == -1


def test_on_the_fly_coding_is_a_compression_follow_up_from_the_bytes(fds: list[int]) -> None:
    big = bytes(2000)
    rep = Rep(_fd(fds), file_facts(size=len(big), ctype="text/javascript"), big)
    res = Resolution(FILE, relpath="a.js", ctype="text/javascript", file=rep)
    p = decide(res, request(raw=b"/a.js", accept_encoding="gzip"), CFG, NOW)
    assert p.todo is not None and p.todo.compress == "gzip" and p.todo.source is big
    assert p.fd >= 0
    p.close()


def test_range_gets_identity_even_when_a_sidecar_exists(fds: list[int]) -> None:
    side = Rep(_fd(fds), replace(file_facts(size=len(GZ)), etag='"gz"'), GZ)
    res = replace(_file(fds, sidecars={"gzip": side}), ctype="text/javascript", relpath="a.js")
    p = decide(res, request(raw=b"/a.js", accept_encoding="gzip", range="bytes=0-1"), CFG, NOW)
    assert p.plan.status == 206 and p.plan.body == (DATA[:2],)
    assert b"content-encoding" not in header_map(p.plan)


# ---------------------------------------------------------------- the hop


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/big.bin", ""),
        ("/hello.txt", "Range: bytes=0-3\r\n"),
        ("/sub/", ""),
        ("/missing.txt", ""),
    ],
)
async def test_the_pool_hop_returns_facts_and_the_plan_is_made_on_the_trio_thread(
    root: Path, monkeypatch: pytest.MonkeyPatch, path: str, headers: str
) -> None:
    from serverio.pipeline import handler as handler_mod

    hops: list[object] = []
    from serverio.concurrency.blocking import run_blocking as real_run

    async def spy(pool: object, fn: Callable[..., object], *args: object, **kw: object) -> object:
        result = await real_run(pool, fn, *args, **kw)  # type: ignore[arg-type]
        hops.append(result)
        return result

    decided_on: list[bool] = []
    real_decide = decide_mod.decide

    def spy_decide(*args: object, **kw: object) -> object:
        decided_on.append(threading.current_thread() is threading.main_thread())
        return real_decide(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(handler_mod, "run_blocking", spy)
    monkeypatch.setattr(handler_mod, "decide", spy_decide)
    cfg = make_config(root, fs_workers=2)
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get(path, headers)
    assert r.status in (200, 206, 404)
    assert len(hops) == 1  # one hop, whatever the request
    assert isinstance(hops[0], Resolution)
    assert not any(isinstance(v, Plan) for v in vars_of(hops[0]))
    assert decided_on == [True]


def vars_of(res: Resolution) -> list[object]:
    return [getattr(res, name) for name in res.__slots__]
