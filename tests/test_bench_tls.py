"""The bench's HTTP/1.1-over-TLS workload (issue 47): the trio TLS floor
baseline, its server entry, Caddy's TLS entry and the probe over TLS."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench import fixtures
from bench.servers import KINDS, SERVERS, HarnessEnv, running
from bench.workloads import WORKLOADS, connection, probe

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="openssl makes the certificate")


def _env() -> HarnessEnv:
    return HarnessEnv(repo=Path.cwd(), python=sys.executable, peers_python=Path("/x"), nginx=None)


def test_tls_workload_and_its_entries() -> None:
    w = WORKLOADS["1k-tls"]
    assert w.tls and w.connections == 64 and w.file == "1k.bin"
    assert w.server_tags == frozenset({"tls-h1"})
    for name in ("serverio-tls", "caddy-tls", "tls-floor"):
        spec = SERVERS[name]
        assert "tls-h1" in spec.tags
        assert spec.only_workloads is not None and "1k-tls" in spec.only_workloads
    # serverio-tls keeps its HTTP/2 workloads.
    assert "1k-h2" in (SERVERS["serverio-tls"].only_workloads or ())


@needs_openssl
def test_caddy_tls_config_serves_https_with_the_certificate(tmp_path: Path) -> None:
    spec = replace(SERVERS["caddy-tls"])
    plan = KINDS["caddy"].plan(spec, _env(), tmp_path, tmp_path / "1k.bin", tmp_path)
    assert not isinstance(plan, str)
    assert plan.scheme == "https" and plan.ready == "tcp"
    text = (tmp_path / "Caddyfile").read_text()
    assert f"https://127.0.0.1:{plan.port} {{" in text
    assert f"tls {tmp_path / 'cert.pem'} {tmp_path / 'key.pem'}" in text
    assert "protocols h1" in text


@needs_openssl
def test_tls_floor_answers_every_head_with_the_file_and_passes_the_probe(
    tmp_path: Path,
) -> None:
    fixture = fixtures.create(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    spec = SERVERS["tls-floor"]
    plan = KINDS["tls-floor"].plan(spec, _env(), tmp_path, tmp_path / "1k.bin", work)
    assert not isinstance(plan, str)
    with running(spec, plan, work / "server.log", cpu=None, timeout_s=20) as rs:
        assert rs.scheme == "https"
        result = probe(WORKLOADS["1k-tls"], rs.port, fixture)
        assert result.ok, result.reason
        conn = connection(rs.port, tls=True)
        try:
            for _ in range(3):  # keep-alive: one response per head, in order
                conn.request("GET", "/anything")
                resp = conn.getresponse()
                assert resp.status == 200
                assert resp.read() == (tmp_path / "1k.bin").read_bytes()
        finally:
            conn.close()
