"""The warm path: a plain request for a warm file is answered by a precomputed
Final (serverio/pipeline/warm.py, issue 42: "a cache hit may be a
precomputed Final"), and only when that answer is still the one the
handler would give."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from serverio.http.core import RequestFacts
from serverio.model.decide import SHARE_AFTER
from serverio.pipeline import warm as _warm
from serverio.pipeline.warm import WARM_IGNORED, WARM_KEY_FIELDS

from .conftest import WARM_NOW, make_config, memory_connection
from .h2client import h2_memory

NOW = WARM_NOW  # the second the clock fixture freezes (tests/conftest.py)
# The requests of a file in one second until its answer is kept: the
# resolution, SHARE_AFTER answers of its own, the shared one
# (serverio.model.decide.serve_cached).
KEPT_AT = SHARE_AFTER + 2


def test_the_key_and_the_ignored_facts_are_every_request_fact() -> None:
    facts = {f.name for f in dataclasses.fields(RequestFacts)}
    keyed = {name.split(".")[0] for name in WARM_KEY_FIELDS}
    assert keyed.isdisjoint(WARM_IGNORED)
    # A new request fact must be put in the key or named, with its reason,
    # as one that cannot change a warm file's answer.
    assert keyed | set(WARM_IGNORED) == facts


@pytest.mark.usefixtures("clock")
async def test_a_warm_get_is_the_precomputed_answer_byte_for_byte(
    root: Path, asked: list[bytes]
) -> None:
    async with memory_connection(make_config(root)) as (client, srv, _):
        first = await client.get("/hello.txt")  # resolved, put in the cache
        # The entry's first SHARE_AFTER answers in this second are their
        # own (a file asked for once leaves no warm answer); the next is
        # shared and kept (serverio.model.decide.serve_cached).
        for _ in range(SHARE_AFTER):
            await client.get("/hello.txt")
        assert len(srv.handler.warm) == 0
        second = await client.get("/hello.txt")
        assert len(srv.handler.warm) == 1
        hits = srv.files.stats.hits
        asked.clear()
        for _ in range(3):
            got = await client.get("/hello.txt")
            assert (got.status, got.raw_headers, got.body) == (
                200,
                second.raw_headers,
                b"hello world\n",
            )
        heads = [await client.get("/hello.txt", method="HEAD") for _ in range(3)]
    assert first.raw_headers == second.raw_headers
    # The HEAD's first answer only: shared at once, as the entry has
    # answered in this second (``asked`` is the entry's, for every method).
    assert asked == [b"hello.txt"]
    assert all(h.raw_headers == heads[0].raw_headers and h.body == b"" for h in heads)
    assert srv.files.stats.hits == hits + 6  # still counted as cache hits
    assert len(srv.handler.warm) == 2  # GET and HEAD


async def test_a_changed_file_is_never_answered_from_it(
    root: Path, clock: list[float], asked: list[bytes]
) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        for _ in range(3):
            assert (await client.get("/hello.txt")).body == b"hello world\n"
        (root / "hello.txt").write_text("HELLO WORLD\n")  # same size, same second
        assert (await client.get("/hello.txt")).body == b"HELLO WORLD\n"
        (root / "hello.txt").unlink()
        assert (await client.get("/hello.txt")).status == 404


async def test_a_new_second_asks_the_handler_again(
    root: Path, clock: list[float], asked: list[bytes]
) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        for _ in range(KEPT_AT):
            before = (await client.get("/hello.txt")).header("date")
        asked.clear()
        clock[0] += 1.0
        answers = [await client.get("/hello.txt") for _ in range(KEPT_AT)]
    # The new second's Date: redated for the first SHARE_AFTER requests
    # alone (a file asked for once in a second keeps nothing), then
    # memoised, shared and kept; the last is the warm answer.
    assert asked == [b"hello.txt"] * (SHARE_AFTER + 1)
    assert answers[0].header("date") != before
    assert {a.header("date") for a in answers} == {answers[0].header("date")}


@pytest.mark.usefixtures("clock")
async def test_what_differs_in_the_key_is_asked_of_the_handler(
    root: Path, asked: list[bytes]
) -> None:
    async with memory_connection(make_config(root)) as (client, _, _):
        for _ in range(KEPT_AT - 1):
            await client.get("/data.bin")
        plain = await client.get("/data.bin")
        etag = plain.header("etag")
        assert etag is not None
        asked.clear()
        variants: list[tuple[str, str, int]] = [
            ("/data.bin", f"If-None-Match: {etag}\r\n", 304),
            ("/data.bin", "Range: bytes=0-9\r\n", 206),
            ("/data.bin", 'If-Match: "other"\r\n', 412),
            ("/data.bin", "If-Modified-Since: Sun, 29 Nov 2037 00:00:00 GMT\r\n", 304),
            ("/data.bin?x=1", "", 200),
            ("/data.bin/", "", 404),
            ("/data.bin", "Want-Repr-Digest: sha-256=1\r\n", 200),
        ]
        for target, headers, status in variants:
            assert (await client.get(target, headers)).status == status, (target, headers)
        assert len(asked) == len(variants)  # none of them answered from the warm Final
        asked.clear()
        assert (await client.get("/data.bin")).body == bytes(range(256)) * 4
        assert asked == []


@pytest.mark.usefixtures("clock")
async def test_the_warm_answers_are_bounded(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_warm, "WARM_MAX", 8)
    async with memory_connection(make_config(root)) as (client, srv, _):
        for i in range(30):  # distinct keys: each Accept-Encoding is its own
            r = await client.get("/hello.txt", f"Accept-Encoding: x-{i}\r\n")
            assert r.status == 200
            assert len(srv.handler.warm) <= 8


@pytest.mark.usefixtures("clock")
async def test_nothing_is_kept_without_the_file_cache(root: Path, asked: list[bytes]) -> None:
    async with memory_connection(make_config(root, file_cache_size=0)) as (client, srv, _):
        for _ in range(3):
            assert (await client.get("/hello.txt")).body == b"hello world\n"
    assert len(srv.handler.warm) == 0 and len(asked) == 3


@pytest.mark.usefixtures("clock")
async def test_http2_gets_the_same_warm_answer(root: Path, asked: list[bytes]) -> None:
    # The exchange is the transports' one: the answer an HTTP/1.1 request
    # made is given to an HTTP/2 stream of the same server.
    async with memory_connection(make_config(root)) as (client, srv, _):
        for _ in range(KEPT_AT - 1):
            await client.get("/hello.txt")
        h1 = await client.get("/hello.txt")
        asked.clear()
        async with h2_memory(srv.config, server=srv) as (h2, _, _):
            r = await h2.get("/hello.txt")
    assert r.status == 200 and bytes(r.body) == b"hello world\n"
    assert r.headers["etag"] == h1.header("etag")
    assert asked == []
