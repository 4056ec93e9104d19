"""The stage list (serverio.pipeline.stages): the routing precedence as one
ordered list, a feature's own stage, and the decisions stages make before
any transport is involved.

Run without a connection: :func:`begin` and :func:`step` are synchronous,
so a test drives the exchange by hand, feeding each need the event a
driver would (the point of issue 42's "exchange as data").
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from serverio.app.server import Server
from serverio.config import Config
from serverio.fs.body import Body
from serverio.http.access import Ticket
from serverio.http.core import Plan, RequestFacts, common_fields
from serverio.http.target import parse_target
from serverio.pipeline.exchange import (
    Authenticate,
    Exchange,
    Final,
    Stage,
    Step,
    Upstream,
    Write,
    step,
)
from serverio.pipeline.handler import Handler
from serverio.pipeline.hooks import Hooks, Marks
from serverio.pipeline.stages import ReservedStage, WriteStage, begin, onward
from serverio.resumable import service as resumable_service
from serverio.resumable.protocol import classify

from .conftest import make_config


def _req(target: str, method: bytes = b"GET", **kw: object) -> RequestFacts:
    facts = RequestFacts(method, parse_target(method, target.encode()))
    return replace(facts, **kw)  # type: ignore[arg-type]


def _names(srv: Server) -> list[str]:
    env = srv.env
    begin(env, _req("/"), 0.0)  # the list is built on the first request
    stages = env.handler.stages
    assert stages is not None
    return [stage.name for stage in stages]


def test_the_list_is_the_precedence_rule(root: Path) -> None:
    plain = Server(make_config(root))
    assert _names(plain) == []  # a plain static server: the files alone
    many = make_config(root, upload=True, watch=True, proxy=("/api=http://127.0.0.1:9",))
    # Ahead of the uploads' step: the page's moves, resumable uploads.
    assert _names(Server(many)) == ["page-moves", "resumable", "write", "reserved", "proxy"]
    # Site rules (a header rule): the site routes before the proxy, and
    # runs the reserved paths itself (before its access rules).
    sited = make_config(root, upload=True, watch=True, proxy=("/api=http://127.0.0.1:9",))
    sited = sited.evolve(headers=("X-A: 1",))
    assert _names(Server(sited)) == ["page-moves", "resumable", "write", "site", "proxy"]


def test_a_write_under_a_proxy_prefix_is_the_proxys(root: Path) -> None:
    cfg = make_config(root, upload=True, proxy=("/api=http://127.0.0.1:9",))
    env = Server(cfg).env
    state, need = begin(env, _req("/api/x", b"PUT"), 0.0)
    assert type(need) is Upstream and state is not None and state.stage is not None
    assert state.stage.name == "proxy"
    state, need = begin(env, _req("/x", b"PUT"), 0.0)
    assert type(need) is Write and state is not None and state.stage is not None
    assert state.stage.name == "write"


def test_the_site_stage_hands_on_to_the_proxy_after_its_rules(root: Path) -> None:
    cfg = make_config(root, proxy=("/api=http://127.0.0.1:9",)).evolve(headers=("X-A: 1",))
    env = Server(cfg).env
    req = _req("/api/x")
    state, need = begin(env, req, 0.0)
    assert type(need) is Authenticate and state is not None
    # The event a driver would feed: the site's routing passed the request.
    state, need = step(state, Ticket(None, req, protected=True, authed=True))
    assert type(need) is Upstream and need.authed


def test_an_event_stream_past_its_budget_is_refused_by_the_stage(root: Path) -> None:
    cfg = make_config(root, watch=True, watch_max_streams=1)
    srv = Server(cfg)
    events = srv.handler.hooks.events
    assert events is not None
    first = begin(srv.env, _req("/.serverio/events"), 0.0)[1]
    assert type(first) is Final and first.plan.stream  # the transport's to stream
    assert events.slots.take(object())  # the one slot, held by some stream
    refused = events.slots.refused
    got = begin(srv.env, _req("/.serverio/events"), 0.0)[1]
    assert type(got) is Final and got.plan.status == 503 and not got.plan.stream
    assert events.slots.refused == refused + 1
    head = begin(srv.env, _req("/.serverio/events", b"HEAD"), 0.0)[1]
    assert type(head) is Final and head.plan.stream  # a HEAD streams nothing


class _Hello(Stage):
    """A feature's own stage: answers GET /.hello, hands on GET /.hello/more."""

    __slots__ = ()
    name = "hello"

    def takes(self, req: RequestFacts, now: float) -> object | None:
        segments = req.target.segments
        return True if segments[:1] == (".hello",) else None

    def enter(self, state: Exchange, claim: object) -> Step:
        if len(state.req.target.segments) > 1:
            return onward(state)
        fields = (*common_fields(state.now), (b"content-length", b"2"))
        plan = Plan(200, fields, (b"hi",))
        return state, Final(plan, Body.of(plan), None)


def _with_stages(cfg: Config, hooks: Hooks) -> Server:
    srv = Server(cfg)
    old = srv.handler
    srv.services.handler = srv.env.handler = Handler(
        cfg, lambda: srv.opener, fs=old.fs, files=old.files, content=old.content, hooks=hooks
    )
    return srv


def _pong(req: RequestFacts, now: float) -> Plan | None:
    if req.target.segments != (".x", "ping"):
        return None
    return Plan(200, tuple(common_fields(now)), (b"pong",))


def test_a_feature_registers_a_stage_and_an_old_router_ports_with_the_adapter(
    root: Path,
) -> None:
    cfg = make_config(root, hidden=True)
    # A Router written for the old hook slot, and a stage of its own.
    srv = _with_stages(cfg, Hooks(route=_pong, stages=(_Hello(),)))
    env = srv.env
    _, got = begin(env, _req("/.hello"), 0.0)
    assert type(got) is Final and got.plan.body == (b"hi",)
    # Handed on: the files answer (no file: 404), not the stage.
    _, got = begin(env, _req("/.hello/more"), 0.0)
    assert type(got) is Final and got.plan.status == 404
    got.body.close()
    _, got = begin(env, _req("/.x/ping"), 0.0)
    assert type(got) is Final and got.plan.body == (b"pong",)
    stages = env.handler.stages
    assert stages is not None
    assert [type(s) for s in stages] == [ReservedStage, _Hello]


async def _write(*_: object) -> Plan:
    raise AssertionError("not called: the exchange is driven by hand")


def test_a_write_stage_adapter_takes_its_methods_where_it_answers(root: Path) -> None:
    only_dav = WriteStage(_write, frozenset((b"PUT",)), lambda r: r.target.segments[:1] == ("d",))
    assert only_dav.takes(_req("/d/x", b"PUT"), 0.0)
    assert only_dav.takes(_req("/e/x", b"PUT"), 0.0) is None  # not where it answers
    assert only_dav.takes(_req("/d/x", b"DELETE"), 0.0) is None  # not its method
    preflight = _req("/d/x", b"OPTIONS")
    assert WriteStage(_write, frozenset((b"OPTIONS",))).takes(preflight, 0.0)
    cors = replace(preflight, extra=(("access-control-request-method", "PUT"),))
    assert WriteStage(_write, frozenset((b"OPTIONS",))).takes(cors, 0.0) is None


def test_a_write_stage_is_asked_only_of_a_request_with_its_marks() -> None:
    # Marks are data the stage list tests: a request without them costs
    # no call into the feature (its ``where``).
    asked: list[RequestFacts] = []

    def where(req: RequestFacts) -> bool:
        asked.append(req)
        return True

    marks = Marks(frozenset(("upload-complete",)), (".serverio", "uploads"))
    stage = WriteStage(_no_write, frozenset((b"PUT",)), where, None, marks, "ahead")
    assert stage.name == "ahead"
    assert stage.takes(_req("/a.bin", b"PUT"), 0.0) is None and asked == []
    assert stage.takes(_req("/a.bin", b"GET", extra=(("upload-complete", "?1"),)), 0.0) is None
    assert asked == []  # not one of its methods either
    marked = _req("/a.bin", b"PUT", extra=(("host", "h"), ("upload-complete", "?1")))
    assert stage.takes(marked, 0.0) is True
    assert stage.takes(_req("/.serverio/uploads/t", b"PUT"), 0.0) is True
    assert len(asked) == 2


async def _no_write(req: RequestFacts, content: object, now: float, admit: object) -> Plan:
    raise AssertionError("not run here")


def test_a_plain_put_never_calls_into_resumable_uploads(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[RequestFacts] = []
    real = classify

    def counted(req: RequestFacts) -> object:
        calls.append(req)
        return real(req)

    monkeypatch.setattr(resumable_service, "classify", counted)
    env = Server(make_config(root, upload=True)).env
    state, need = begin(env, _req("/x.bin", b"PUT"), 0.0)
    assert type(need) is Write and state is not None and state.stage is not None
    assert state.stage.name == "write" and calls == []
    marked = _req("/x.bin", b"PUT", extra=(("upload-complete", "?0"),))
    state, need = begin(env, marked, 0.0)
    assert type(need) is Write and state is not None and state.stage is not None
    assert state.stage.name == "resumable" and len(calls) == 1
