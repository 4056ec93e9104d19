"""The WebDAV write benchmark's pieces (bench/davclient.py, bench/davrun.py,
bench/davservers.py): the response parser, the answer checks, the litmus
summary, the targets, and one small real run against serverio (loopback,
port 0, bounded) that must verify what it measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import davclient, davrun
from bench.davclient import ClientError, ResponseParser
from bench.davservers import APACHE_CONF, DAV_KINDS, DAV_SERVERS, PUT_ONLY
from bench.servers import HarnessEnv

# ------------------------------------------------------------------ parser


def parse_all(data: bytes, split: int = 7) -> list[davclient.Response]:
    """Feed ``data`` in pieces of ``split`` bytes; every complete answer."""
    p = ResponseParser()
    out: list[davclient.Response] = []
    for i in range(0, len(data), split):
        p.feed(data[i : i + split])
        while (r := p.next()) is not None:
            out.append(r)
    return out


def test_the_parser_reads_length_and_chunked_bodies_in_any_pieces() -> None:
    data = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello"
        b"HTTP/1.1 207 Multi-Status\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\n"
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
    )
    for split in (1, 7, len(data)):
        got = parse_all(data, split)
        assert [r.status for r in got] == [201, 207, 204]
        assert got[0].body == b"hello" and got[0].headers["x-a"] == "1, 2"
        assert got[1].body == b"abc0123456789abcdef"
        assert got[2].body == b""


def test_the_parser_refuses_a_cut_answer() -> None:
    p = ResponseParser()
    p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert p.next() is None
    p.feed(b"")  # EOF
    with pytest.raises(ClientError):
        p.next()
    q = ResponseParser()
    q.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    assert q.next() is None
    q.feed(b"")
    with pytest.raises(ClientError):
        q.next()
    r = ResponseParser()
    r.feed(b"garbage\r\n\r\n")
    with pytest.raises(ClientError):
        r.next()


def test_a_body_framed_by_the_close_ends_at_eof() -> None:
    p = ResponseParser()
    p.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc")
    assert p.next() is None
    p.feed(b"")
    r = p.next()
    assert r is not None and r.body == b"abc" and r.closes


# ------------------------------------------------------------------ checks


def multistatus(names: list[str], collection: str = "/big/") -> bytes:
    rows = [f"<D:response><D:href>{collection}</D:href></D:response>"]
    rows += [f"<D:response><D:href>{collection}{n}</D:href></D:response>" for n in names]
    return ('<D:multistatus xmlns:D="DAV:">' + "".join(rows) + "</D:multistatus>").encode()


def test_the_multistatus_check_wants_every_member_once() -> None:
    names = {f"e{i:05d}.txt" for i in range(50)}
    assert davrun.check_multistatus(multistatus(sorted(names)), "big", names) == ""
    # Absolute hrefs and percent-encoding are read as paths.
    absolute = multistatus(sorted(names), "http://127.0.0.1:1/big/").replace(
        b"e00001", b"%65%300001"
    )
    assert davrun.check_multistatus(absolute, "big", names) == ""
    missing = multistatus(sorted(names)[:-1])
    assert "49 of 50" in davrun.check_multistatus(missing, "big", names)
    doubled = multistatus([*sorted(names), "e00000.txt"])
    assert davrun.check_multistatus(doubled, "big", names) != ""
    assert davrun.check_multistatus(b"<html/>", "big", names).startswith("not a DAV")
    assert davrun.check_multistatus(b"<<", "big", names).startswith("not XML")


def test_the_litmus_summary_counts_suites_and_failures() -> None:
    out = (
        "-> running `basic':\n 0. init.................. pass\n"
        "<- summary for `basic': of 16 tests run: 16 passed, 0 failed. 100.0%\n"
        " 7. propget............... FAIL (bad)\n"
        "<- summary for `props': of 30 tests run: 29 passed, 1 failed. 96.7%\n"
    )
    got = davrun.litmus_summary(out)
    assert got["suites"] == {"basic": [16, 16, 0], "props": [30, 29, 1]}
    assert got["run"] == 46 and got["passed"] == 45
    assert got["failed_tests"] == ["7. propget............... FAIL (bad)"]


def result(value: float, growth: float = 1.0) -> dict[str, object]:
    return {"status": "ok", "value": value, "rss_growth_mib": growth}


def test_targets_compare_with_the_named_peers() -> None:
    artifact = {
        "results": {
            "put-1g": {
                "serverio-dav": result(90.0, 70.0),
                "serverio-dav-nofsync": result(200.0),
                "apache-dav": result(100.0),
            },
            "put-4k-c16": {"serverio-dav": result(500.0), "wsgidav": result(400.0)},
            "propfind-10k": {"serverio-dav": result(1.0)},
        },
        "litmus": {"serverio-dav": {"run": 88, "passed": 88}},
    }
    got = {t["target"]: t for t in davrun.targets(artifact)}
    assert got["put-1g: serverio-dav >= 0.8x apache-dav"]["met"] is True
    assert got["put-1g: serverio-dav-nofsync >= 0.8x apache-dav"]["ratio"] == 2.0
    assert got["put-1g: serverio-dav RSS growth < 64 MiB"]["met"] is False
    assert got["put-4k-c16: serverio-dav >= 1.0x wsgidav"]["met"] is True
    assert got["propfind-10k: serverio-dav >= 1.0x wsgidav"]["met"] is None  # no peer figure
    assert got["litmus: serverio-dav passes every test"]["met"] is True
    artifact["results"]["put-1g"]["serverio-dav"] = result(70.0)  # type: ignore[index]
    low = {t["target"]: t for t in davrun.targets(artifact)}
    assert low["put-1g: serverio-dav >= 0.8x apache-dav"]["met"] is False


# ------------------------------------------------------------------ servers


def test_every_dav_server_plans_a_loopback_instance(tmp_path: Path) -> None:
    env = HarnessEnv(Path.cwd(), sys.executable, tmp_path / "python", None)
    for spec in DAV_SERVERS.values():
        work = tmp_path / spec.name
        work.mkdir()
        kind = DAV_KINDS[spec.kind]
        if kind.unavailable(env) is not None and spec.kind != "wsgidav":
            continue  # not installed here (apache2, rclone)
        plan = kind.plan(spec, env, tmp_path, None, work)
        assert not isinstance(plan, str)
        text = " ".join(plan.argv) + "".join(p.read_text() for p in work.glob("*.*"))
        assert "0.0.0.0" not in text
        if spec.kind == "serverio":
            assert "--webdav" in plan.argv or "--upload" in plan.argv
    assert "Listen {host}:{port}" in APACHE_CONF and "LimitRequestBody 0" in APACHE_CONF
    assert PUT_ONLY <= set(DAV_SERVERS)


def test_the_4k_bodies_are_distinct_and_fixed() -> None:
    assert davrun.body_4k(1) == davrun.body_4k(1) != davrun.body_4k(2)
    assert len(davrun.body_4k(3)) == 4096


# ------------------------------------------------------------------ a real run


def test_a_small_run_against_serverio_measures_and_verifies(tmp_path: Path) -> None:
    """All three workloads, shrunk, against serverio --webdav: every check
    passes, and the artifact holds the figures."""
    sizes = davrun.Sizes(put_bytes=3 << 20, puts=40, connections=4, entries=30)
    opts = davrun.DavOptions(
        servers=[DAV_SERVERS["serverio-dav"], DAV_SERVERS["serverio-upload"]],
        workloads=list(davrun.WORKLOADS),
        sizes=sizes,
        rounds=1,
        litmus=False,
        pin=False,
        out_dir=tmp_path,
        mode="dav-test",
    )
    assert davrun.execute(opts) == 0
    (path,) = tmp_path.glob("*-dav-test.json")
    art = json.loads(path.read_text())
    for workload in davrun.WORKLOADS:
        got = art["results"][workload]["serverio-dav"]
        assert got["status"] == "ok" and got["value"] > 0, got
    assert "serverio-upload" not in art["results"]["propfind-10k"]  # PUT workloads only
    assert art["results"]["put-4k-c16"]["serverio-upload"]["status"] == "ok"
    trial = art["results"]["put-4k-c16:trials"]["serverio-dav"][0]
    assert trial["facts"]["statuses"] == {"201": 40}


def test_a_wrong_answer_fails_the_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness never measures a server that answers wrongly: with the
    expected names changed, the PROPFIND check fails the trial."""
    monkeypatch.setattr(davrun, "check_multistatus", lambda body, c, names: "wrong")
    opts = davrun.DavOptions(
        servers=[DAV_SERVERS["serverio-dav"]],
        workloads=["propfind-10k"],
        sizes=davrun.Sizes(entries=5),
        rounds=1,
        litmus=False,
        pin=False,
        out_dir=tmp_path,
        mode="dav-test",
    )
    assert davrun.execute(opts) == 1
    (path,) = tmp_path.glob("*-dav-test.json")
    got = json.loads(path.read_text())["results"]["propfind-10k"]["serverio-dav"]
    assert got["status"] == "failed" and got["error"] == "wrong"
