"""The pipeline's hooks (serverio.pipeline.hooks): a feature plugs in there.

Generic hooks (not live reload's) over an in-memory connection: the
router answers before the core's routing and the files, the transform
makes an answer from its base and may decline, the lifetime runs inside
the handler's.  Then the layout the hooks make possible: no class
subclasses the handler, ``http/`` imports nothing of ``live/``, and the
transports reach live reload only through the hooks.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import serverio
from serverio.app.server import Server
from serverio.config import Config
from serverio.http.core import Plan, RequestFacts, common_fields
from serverio.http.target import parse_target
from serverio.model import Prepared
from serverio.pipeline.handler import Handler
from serverio.pipeline.hooks import NO_HOOKS, Hooks

from .conftest import make_config, memory_connection
from .importgraph import build_graph

PACKAGE = Path(serverio.__file__).resolve().parent


def _with_hooks(cfg: Config, hooks: Hooks) -> Server:
    """A server whose handler has ``hooks`` (as Server builds live reload's)."""
    srv = Server(cfg)
    old = srv.handler
    srv.services.handler = srv.env.handler = Handler(
        cfg, lambda: srv.opener, fs=old.fs, files=old.files, content=old.content, hooks=hooks
    )
    return srv


def _pong(req: RequestFacts, now: float) -> Plan | None:
    if req.target.segments != (".x", "ping") or req.method not in (b"GET", b"HEAD"):
        return None
    hs = (*common_fields(now), (b"content-type", b"text/plain"), (b"content-length", b"4"))
    return Plan(200, hs, (b"pong",), send_body=req.method == b"GET")


async def test_the_router_answers_before_the_core_and_the_files(root: Path) -> None:
    (root / ".x").mkdir()
    (root / ".x" / "ping").write_text("file")
    cfg = make_config(root, hidden=True)
    async with memory_connection(cfg, server=_with_hooks(cfg, Hooks(route=_pong))) as (c, _, _):
        r = await c.get("/.x/ping")
        assert (r.status, r.body) == (200, b"pong")  # not the file, not a 404
        other = await c.get("/.x/other")
        assert other.status == 404  # declined: the file pipeline answers
        page = await c.get("/index.html")
        assert page.status == 200 and page.body == b"<h1>home</h1>\n"
        post = await c.get("/.x/ping", method="POST")
        assert post.status == 405  # declined: the core's routing answers


class _Upper:
    """Answers /a.txt with /b.txt's bytes upper-cased; declines the rest."""

    def __init__(self) -> None:
        self.declined = 0
        self.closed: list[Prepared] = []

    def base(self, req: RequestFacts) -> RequestFacts | None:
        if req.target.segments not in (("a.txt",), ("c.txt",)):
            return None
        return replace(req, target=parse_target(b"GET", b"/b.txt"))

    async def apply(
        self, req: RequestFacts, base: RequestFacts, prepared: Prepared, now: float
    ) -> Prepared | None:
        assert base.target.segments == ("b.txt",)
        if req.target.segments == ("c.txt",):
            self.declined += 1
            prepared.close()
            self.closed.append(prepared)
            return None
        body = b"".join(p for p in prepared.plan.body if isinstance(p, bytes)).upper()
        prepared.close()
        self.closed.append(prepared)
        hs = (*common_fields(now), (b"content-length", b"%d" % len(body)))
        return Prepared(Plan(200, hs, (body,)))


async def test_the_transform_makes_the_answer_from_its_base_or_declines(root: Path) -> None:
    (root / "a.txt").write_text("a")
    (root / "b.txt").write_text("bee")
    (root / "c.txt").write_text("sea")
    upper = _Upper()
    for workers in (0, 2):  # inline and pooled resolution
        cfg = make_config(root, fs_workers=workers)
        srv = _with_hooks(cfg, Hooks(transform=upper))
        async with memory_connection(cfg, server=srv) as (c, _, _):
            assert (await c.get("/a.txt")).body == b"BEE"
            assert (await c.get("/c.txt")).body == b"sea"  # declined: as sent
            assert (await c.get("/b.txt")).body == b"bee"  # not taken: untouched
    assert upper.declined == 2
    assert all(p.fd < 0 for p in upper.closed)


async def test_the_lifetime_hook_runs_inside_the_handler(root: Path) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifetime() -> AsyncIterator[None]:
        events.append("start")
        try:
            yield
        finally:
            events.append("stop")

    cfg = make_config(root)
    srv = _with_hooks(cfg, Hooks(running=lifetime))
    async with srv.handler.running():
        assert events == ["start"]
    assert events == ["start", "stop"]


def test_without_watch_no_hook_is_registered(root: Path) -> None:
    # The warm path then pays an attribute test and no call for the hooks.
    assert Server(make_config(root)).handler.hooks is NO_HOOKS
    live = Server(make_config(root, watch=True)).handler.hooks
    assert live.route is not None and live.transform is not None and live.events is not None


# ------------------------------------------------------------------ layout


def _classes_subclassing(name: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if name in bases:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    return found


def test_no_class_subclasses_the_handler() -> None:
    assert _classes_subclassing("Handler") == []


def test_live_reload_is_reached_only_through_the_hooks() -> None:
    graph = build_graph(PACKAGE)
    reaches = sorted(
        src
        for src in graph.modules
        if not src.startswith("serverio.live")
        and any(dst.startswith("serverio.live") for dst in graph.targets(src))
    )
    # The server's services build it (the composition root; Server.live is
    # its view of it); the site rules' CSP
    # lets its script through.  Not http/ (the core), pipeline/ or the
    # transports.
    assert reaches == ["serverio.app.server", "serverio.app.services", "serverio.site.service"]
