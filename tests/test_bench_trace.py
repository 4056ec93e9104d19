"""bench trace (issue 42's first gate): the counting of package steps on
plain data, the profiler hook on synthetic modules, and one real run on
the working tree."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import cli, commits, trace
from bench.trace import Step, Summary, summarize
from serverio.model.decide import SHARE_AFTER


def _bench(*argv: str) -> int:
    return cli.dispatch(cli.build_parser().parse_args(argv))


# ------------------------------------------------------------ counting


def test_no_steps_count_nothing() -> None:
    assert summarize([]) == Summary((), 0, 0, 0, 0)


def test_a_return_is_entering_a_package_entered_before_and_left() -> None:
    # net calls wire, wire returns to net, net calls http, http returns.
    steps: list[Step] = [
        ("call", "net"),
        ("call", "wire"),
        ("return", "net"),
        ("call", "http"),
        ("return", "net"),
    ]
    got = summarize(steps)
    assert got.packages == ("net", "wire", "net", "http", "net")
    assert (got.distinct, got.returns, got.call_returns, got.calls) == (3, 2, 0, 3)


def test_steps_within_a_package_and_steps_into_trio_do_not_break_the_sequence() -> None:
    steps: list[Step] = [
        ("call", "net"),
        ("call", "net"),  # a helper of the same package
        ("return", "net"),
        ("return", None),  # the task suspends: back into trio
        ("call", "net"),  # trio resumes it
        ("call", "pipeline"),
        ("return", None),  # a callback's return into trio's frame
        ("call", "pipeline"),
    ]
    got = summarize(steps)
    assert got.packages == ("net", "pipeline")
    assert (got.distinct, got.returns, got.call_returns, got.calls) == (2, 0, 0, 5)


def test_call_returns_count_a_package_called_again_not_the_return_to_the_caller() -> None:
    # pipeline calls fs, fs returns, pipeline calls fs again, then model;
    # model calls back up into pipeline.
    steps: list[Step] = [
        ("call", "pipeline"),
        ("call", "fs"),
        ("return", "pipeline"),
        ("call", "fs"),
        ("return", "pipeline"),
        ("call", "model"),
        ("call", "pipeline"),
        ("return", "model"),
        ("return", "pipeline"),
    ]
    got = summarize(steps)
    assert got.packages == (
        *("pipeline", "fs", "pipeline", "fs", "pipeline"),
        *("model", "pipeline", "model", "pipeline"),
    )
    # Over call and return steps: every position after the sixth's model
    # but that model itself comes back.
    assert got.returns == 6
    # Over the calls alone: pipeline, fs, model, pipeline -> one re-entry.
    assert got.call_returns == 1
    assert (got.distinct, got.calls) == (3, 5)


def test_reentries_of_a_collapsed_sequence() -> None:
    assert trace.reentries(["a", "b", "a", "c", "b", "a"]) == 3
    assert trace.reentries(["a", "b", "c"]) == 0
    assert trace.entered([("call", "a"), ("return", "a"), ("call", None), ("call", "b")]) == [
        "a",
        "b",
    ]


@pytest.mark.parametrize(
    ("module", "modules", "package"),
    [
        ("serverio.net.emit", False, "net"),
        ("serverio.net.emit", True, "net.emit"),
        ("serverio.fs.walk.deep", True, "fs.walk"),
        ("serverio.model", False, "model"),
        ("serverio.model", True, "model"),
        ("serverio", False, "serverio"),
        ("serverio_extra.net", False, None),
        ("trio._core._run", False, None),
        ("bench.pair", True, None),
    ],
)
def test_package_of_a_module(module: str, modules: bool, package: str | None) -> None:
    assert trace.package_of(module, modules) == package


# ------------------------------------------------------------ the hook


def _module(name: str, source: str, **names: Any) -> dict[str, Any]:
    """The namespace of a synthetic module called ``name``."""
    namespace: dict[str, Any] = {"__name__": name, **names}
    exec(textwrap.dedent(source), namespace)
    return namespace


def _profiled(recorder: trace.Recorder, fn: Callable[[], object]) -> None:
    sys.setprofile(recorder)
    try:
        fn()
    finally:
        sys.setprofile(None)


def test_recorder_steps_skip_foreign_frames_and_land_in_the_caller_package() -> None:
    fs = _module("serverio.fs.cache", "def get():\n    return len('x')\n")
    trio_like = _module("trio._fake", "def call_soon(fn):\n    return fn()\n")
    pipeline = _module(
        "serverio.pipeline.request",
        "def start():\n    return call_soon(get)\n",
        call_soon=trio_like["call_soon"],
        get=fs["get"],
    )
    net = _module(
        "serverio.net.conn",
        """\
        def emit():
            return None
        def serve():
            start()
            emit()
        """,
        start=pipeline["start"],
    )
    recorder = trace.Recorder()
    _profiled(recorder, net["serve"])
    assert recorder.steps == [
        ("call", "net"),
        ("call", "pipeline"),
        ("call", "fs"),  # through trio's frame: skipped, not a break
        ("return", "pipeline"),  # past trio's frame to the nearest serverio one
        ("return", "net"),
        ("call", "net"),
        ("return", "net"),
        ("return", None),  # into this test: no serverio frame below
    ]
    got = recorder.summaries()
    assert got["packages"] == ["net", "pipeline", "fs", "pipeline", "net"]
    assert (got["distinct"], got["returns"], got["call_returns"], got["calls"]) == (3, 2, 1, 4)
    assert got["respond_now"] is None


def test_recorder_scope_is_the_span_of_handler_respond_now() -> None:
    fs = _module("serverio.fs.cache", "def get():\n    return 1\n")
    handler = _module(
        "serverio.pipeline.handler",
        """\
        class Handler:
            def respond_now(self):
                return get() + get()
        """,
        get=fs["get"],
    )
    net = _module(
        "serverio.net.conn",
        "def serve():\n    Handler().respond_now()\n    Handler().respond_now()\n",
        Handler=handler["Handler"],
    )
    recorder = trace.Recorder(modules=True)
    _profiled(recorder, net["serve"])
    got = recorder.summaries()
    twice = ["pipeline.handler", "fs.cache", "pipeline.handler", "fs.cache", "pipeline.handler"]
    assert got["packages"] == ["net.conn", *twice, "net.conn", *twice, "net.conn"]
    scoped = got["respond_now"]
    # The first call only, up to its return: respond_now, get, back, get, back.
    assert scoped["packages"] == twice
    assert (scoped["calls"], scoped["returns"], scoped["call_returns"]) == (3, 3, 0)


# ------------------------------------------------------------ a real run


@pytest.fixture(scope="module")
def traced() -> dict[str, Any]:
    """``python -m bench trace --json --warm N`` on the working tree, N
    the answers before the GET's first warm one (the resolution,
    SHARE_AFTER answers of its own, the shared one:
    serverio.model.decide.serve_cached)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _bench("trace", "--json", "--warm", str(SHARE_AFTER + 2)) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_every_request_type_is_traced_with_its_status(traced: dict[str, Any]) -> None:
    assert list(traced) == list(trace.KINDS)
    assert {kind: r["status"] for kind, r in traced.items()} == {
        "get": 200,
        "404": 404,
        "listing": 200,
        "put": 204,
        "proxy": 200,
    }
    assert traced["get"]["request"] == "GET /1k.bin"
    assert traced["put"]["request"] == "PUT /put.bin"


def test_the_measures_agree_with_the_packages_and_are_plausible(traced: dict[str, Any]) -> None:
    for kind, r in traced.items():
        packages = r["packages"]
        assert all(isinstance(p, str) and p for p in packages), kind
        assert all(a != b for a, b in itertools.pairwise(packages)), kind
        assert r["distinct"] == len(set(packages)), kind
        assert r["returns"] == trace.reentries(packages), kind
        # Every request is read and written by the transport.
        assert packages[0] == "net" and "pipeline" in packages, kind
        assert 3 <= r["distinct"] <= 20, kind
        assert 0 < r["call_returns"] <= r["returns"] < len(packages), kind
        assert r["distinct"] <= r["calls"] < 5000, kind


def test_each_request_type_enters_the_packages_of_its_work(traced: dict[str, Any]) -> None:
    entered = {kind: set(r["packages"]) for kind, r in traced.items()}
    assert {"net", "wire", "http", "fs"} <= entered["get"]
    assert {"fs", "errors"} <= entered["404"]
    assert "fs" in entered["listing"]
    assert {"upload", "fs"} <= entered["put"]
    assert "proxy" in entered["proxy"]
    assert "upload" not in entered["get"] and "proxy" not in entered["get"]


def test_the_respond_now_scope_is_part_of_the_request(traced: dict[str, Any]) -> None:
    # The warm GET is answered by a precomputed Final (serverio.pipeline.warm)
    # without Handler.respond_now; the 404 and the listing pass through it.
    assert traced["get"]["respond_now"] is None
    for kind in ("404", "listing"):
        r, scoped = traced[kind], traced[kind]["respond_now"]
        assert scoped is not None and scoped["packages"][0] == "pipeline", kind
        assert set(scoped["packages"]) <= set(r["packages"]), kind
        assert 0 < scoped["calls"] < r["calls"], kind
    # A PUT is answered without Handler.respond_now.
    assert traced["put"]["respond_now"] is None


def test_the_text_report_lists_each_type_packages_in_order(traced: dict[str, Any]) -> None:
    text = trace.render("this checkout", traced)
    get = traced["get"]
    assert text.splitlines()[0] == "serverio: this checkout"
    assert (
        f"get (GET /1k.bin, 200): {get['distinct']} distinct, {get['returns']} returns "
        f"({get['call_returns']} on calls), {get['calls']} calls"
    ) in text
    assert "  " + " > ".join(get["packages"]) in text.splitlines()


# ------------------------------------------------------------ errors


def test_a_tree_without_serverio_is_refused_not_traced_with_this_checkout(
    tmp_path: Path,
) -> None:
    with pytest.raises(trace.TraceError, match="serverio was imported from"):
        trace.trace(tmp_path, ["404"], 1, False)


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _bench("trace", "--requests", "get,nope")
    assert exc.value.code == 2
    assert "unknown request type nope" in capsys.readouterr().err
    assert _bench("trace", "--warm", "0") == 2
    assert _bench("trace", "--serverio-commit", "no-such-rev-xyz") == 2
    assert "not a commit" in capsys.readouterr().err
    assert commits.REPO.is_dir()
