"""An answer in the making is a value; what the handler waits for is data
(issue 42 item 1: "``Prepared``'s mutation, ``Waiting``, ``Deferred``,
``Ticket`` and the ``Answer`` tuple give way to" the exchange as data).

* :class:`~serverio.model.Prepared` is immutable: a follow-up (a coding
  made on the fly, a digest, a listing) makes a new value and leaves the
  one it started from as it was;
* what it holds open is its :class:`~serverio.model.Opened`, handed on
  from value to value and closed once however many of them are closed;
* the handler's waits are needs of the exchange that name what to do
  (the request, the cache candidate, the resolved answer), not closures:
  the driver fulfils them through ``Handler.fulfil``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import serverio
from serverio import RequestFacts, Server, parse_target
from serverio import model as model_mod
from serverio.http.core import Plan
from serverio.model import FollowUps, Opened, Prepared
from serverio.pipeline import exchange as exchange_mod
from serverio.pipeline import handler as handler_mod
from serverio.pipeline.exchange import Coding, Listing, Resolve

from .conftest import make_config

LATER = float(int(time.time()) + 3600)  # every file is settled by then


def _request(target: str, **fields: str) -> RequestFacts:
    return RequestFacts(
        method=b"GET",
        target=parse_target(b"GET", target.encode()),
        **fields,  # type: ignore[arg-type]
    )


def test_a_prepared_answer_cannot_be_changed() -> None:
    prepared = Prepared(Plan(200, (), (b"x",)), todo=FollowUps(digest="sha-256"))
    with pytest.raises(AttributeError):
        prepared.plan = Plan(500, (), ())  # type: ignore[misc]
    with pytest.raises(AttributeError):
        prepared.todo = None  # type: ignore[misc]
    assert prepared.todo is not None
    with pytest.raises(AttributeError):
        prepared.todo.digest = ""  # type: ignore[misc]


def test_what_it_holds_open_is_closed_once_whichever_value_closes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[int] = []
    real_close = model_mod.close_fd

    def counting(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(model_mod, "close_fd", counting)
    read, write = os.pipe()
    os.close(write)
    first = Prepared(Plan(200, (), ()), Opened(read), todo=FollowUps(digest="sha-256"))
    finished = first._replace(todo=None)  # a follow-up's new value: the same Opened
    assert finished.opened is first.opened and finished.fd == read
    first.close()
    finished.close()
    first.close()
    assert closed == [read]
    assert finished.fd == -1 and not finished.holds


def test_a_follow_up_from_the_caches_makes_a_new_value(root: Path) -> None:
    # A gzip coding made on the fly, its bytes in the compression cache: the
    # cache answer is a new Prepared; the one it was made from still says
    # what was to do.
    (root / "page.html").write_bytes(b"<p>hello</p>\n" * 200)
    srv = Server(make_config(root, precompressed=False))
    try:
        req = _request("/page.html", accept_encoding="gzip")
        got = srv.handler.respond_now(req, LATER)
        assert isinstance(got, Coding)  # a compression miss waits: a need, as data
        assert got.req is req and got.prepared.todo is not None
        start = got.prepared
        assert start.todo is not None and start.todo.compress == "gzip"
        facts = start.facts
        assert facts is not None
        srv.content.compressed.put((facts.key, "gzip"), b"GZIP-BYTES")
        done = srv.content.finish_cached(start, req, LATER)
        assert done is not start and done.todo is None
        assert done.plan.body == (b"GZIP-BYTES",)
        assert dict(done.plan.headers)[b"content-encoding"] == b"gzip"
        # The value it started from is unchanged: its placeholder, its todo.
        assert start.plan.status == 500 and start.todo.compress == "gzip"
        done.close()
        start.close()
    finally:
        srv.opener.close()


async def test_the_handlers_waits_are_needs_that_name_what_to_do(root: Path) -> None:
    # Pooled mode with a cold cache: the answer must wait for a pool hop.
    # What comes back is the exchange's Resolve need holding the request
    # (no closure); the driver fulfils it through Handler.fulfil.
    srv = Server(make_config(root, fs_workers=1))
    try:
        req = _request("/hello.txt")
        got = srv.handler.respond_now(req, LATER)
        assert type(got) is Resolve
        assert got.req is req and got.base is None and not got.holds
        got.close()  # nothing to release: idempotent and harmless
        got.close()
    finally:
        srv.opener.close()


def test_a_listing_waits_as_a_listing_need_that_owns_the_directory(root: Path) -> None:
    (root / "folder").mkdir()
    srv = Server(make_config(root))
    try:
        req = _request("/folder/")
        got = srv.handler.respond_now(req, LATER)
        assert type(got) is Listing
        prepared = got.prepared
        assert prepared.todo is not None and prepared.todo.listing
        assert got.holds and prepared.fd >= 0
        got.close()
        assert prepared.fd == -1 and not prepared.holds
    finally:
        srv.opener.close()


def test_no_deferred_step_is_left() -> None:
    # The pending answer shapes the issue names are gone from the pipeline:
    # the handler returns needs; the needs carry data, not a step to run.
    assert not hasattr(handler_mod, "Deferred")
    assert not hasattr(handler_mod, "FollowUp")
    assert not hasattr(serverio, "Deferred")
    assert not hasattr(exchange_mod, "Pending")
    for need in (Resolve, Listing, Coding):
        assert "deferred" not in need.__slots__
        assert "deferred" not in getattr(need.__mro__[1], "__slots__", ())
