"""The reverse-proxy workloads (issue 30): one upstream for every proxy.

The upstream is nginx (the harness's own generated configuration: one
worker, ``sendfile``, keep-alive 75 s with no request cap) serving the
fixture, pinned to the load generator's CPU so that the proxy under test
has CPU 0 to itself: nginx answers a 1 KiB request in ~20 µs of CPU, a
fraction of any proxy's cost, so it is never the bottleneck, and its CPU
per request is recorded beside the proxy's (``upstream_cpu_us_per_req``)
to show it.  serverio runs as ``--proxy /=UPSTREAM`` with its default
proxy limits, Caddy as ``reverse_proxy UPSTREAM`` with its default
transport, nginx as ``proxy_pass`` to an ``upstream`` block with
``keepalive 32`` (bench/servers.py ``NGINX_PROXY``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from bench.fixtures import Fixture
from bench.servers import (
    KINDS,
    HarnessEnv,
    RunningServer,
    ServerSpec,
    ServerStartError,
    running,
)
from bench.trials import Placement
from bench.workloads import Workload


class UpstreamRun(Protocol):
    """What :func:`upstream` uses of the run (bench.runner.Run has it)."""

    @property
    def tmp(self) -> Path: ...
    @property
    def fixture(self) -> Fixture: ...
    @property
    def placement(self) -> Placement: ...


UPSTREAM = ServerSpec("upstream-nginx", "nginx", description="the proxy workloads' upstream")


def with_upstream(spec: ServerSpec, url: str) -> ServerSpec:
    """``spec`` pointed at the upstream ``url`` (``http://127.0.0.1:PORT``):
    serverio gets ``--proxy /=URL``; the Caddy and nginx proxy kinds read
    ``spec.upstream`` when they write their configuration."""
    if spec.kind == "serverio":
        spec = replace(spec, extra_args=(*spec.extra_args, "--proxy", f"/={url}"))
    return replace(spec, upstream=url)


@contextmanager
def upstream(
    run: UpstreamRun, env: HarnessEnv, workload: Workload
) -> Iterator[RunningServer | str]:
    """The upstream, started for ``workload`` and stopped after it; or the
    reason it cannot run (nginx missing or not starting)."""
    kind = KINDS[UPSTREAM.kind]
    reason = kind.unavailable(env)
    if reason is not None:
        yield f"no upstream: {reason}"
        return
    workdir = run.tmp / "upstreams" / workload.name
    workdir.mkdir(parents=True, exist_ok=True)
    plan = kind.plan(UPSTREAM, env, run.fixture.root, None, workdir)
    if isinstance(plan, str):
        yield f"no upstream: {plan}"
        return
    with ExitStack() as stack:
        try:
            # The load generator's CPU: the proxy has the server CPU to itself.
            rs = stack.enter_context(
                running(UPSTREAM, plan, workdir / "server.log", cpu=run.placement.wrk_cpu)
            )
        except ServerStartError as exc:
            yield f"the upstream did not start: {exc}"
            return
        yield rs
