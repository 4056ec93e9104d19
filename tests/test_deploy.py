"""The Dockerfile, the Kubernetes manifests and the HttpArena entry, cross-checked.

Docker and a cluster cannot run here; these tests parse what can be parsed
(the manifests as YAML, the Dockerfile's instructions, the launch script)
and check that the pieces agree with each other and with serverio's own
command-line parser: ports, probe paths, the admin address, the grace
period against --shutdown-delay + --shutdown-timeout.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from serverio.config import parse_host_port
from serverio.ops.check import loopback_target
from serverio.ops.cli import build_parser

REPO = Path(__file__).resolve().parent.parent


def _args(argv: list[str]) -> Any:
    return build_parser().parse_args(argv)


def _dockerfile() -> dict[str, list[str]]:
    """Instruction -> its arguments (continuation lines joined)."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.setdefault(word.upper(), []).append(rest.strip())
    return out


def _exec_form(value: str) -> list[str]:
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed)
    return parsed


def test_dockerfile_is_slim_non_root_and_checks_its_own_admin_port() -> None:
    d = _dockerfile()
    assert len(d["FROM"]) == 1 and d["FROM"][0].startswith("python:3.11") and "slim" in d["FROM"][0]
    [user] = d["USER"]
    assert user.split(":")[0] not in ("root", "0")
    assert _exec_form(d["ENTRYPOINT"][0]) == ["python", "-m", "serverio"]
    args = _args(_exec_form(d["CMD"][0]))
    [listen] = args.listen
    _, port = parse_host_port(listen, "--listen")
    admin_host, admin_port = parse_host_port(args.admin_bind, "--admin-bind")
    exposed = {int(p.split("/")[0]) for p in d["EXPOSE"][0].split()}
    assert exposed == {port, admin_port}
    health = d["HEALTHCHECK"][0]
    cmd = _exec_form(health.split("CMD", 1)[1].strip())
    assert cmd[:4] == ["python", "-m", "serverio", "--check"]
    target = loopback_target(cmd[4])
    assert target is not None and target[1:] == (admin_port, "/healthz")
    assert admin_host in ("0.0.0.0", "::")  # reachable from the loopback probe and the host
    assert args.shutdown_delay > 0 and d["STOPSIGNAL"] == ["SIGTERM"]
    assert args.workers >= 1  # "auto" resolved by the parser


def _manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((REPO / "deploy" / "kubernetes").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_kubernetes_manifests_agree_with_the_flags() -> None:
    docs = {d["kind"]: d for d in _manifests()}
    assert set(docs) == {"Deployment", "Service"}
    dep, svc = docs["Deployment"], docs["Service"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    spec = pod["spec"]
    [c] = spec["containers"]
    args = _args(c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    [listen] = args.listen
    assert parse_host_port(listen, "--listen") == ("0.0.0.0", ports["http"])
    # The kubelet probes the pod IP: the admin port must bind beyond loopback.
    assert parse_host_port(args.admin_bind, "--admin-bind") == ("0.0.0.0", ports["admin"])
    for probe in ("readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert (get["path"], get["port"]) == ("/healthz", "admin")
    # SIGKILL only after the drain: delay + timeout, with a margin.
    grace = spec["terminationGracePeriodSeconds"]
    assert grace > args.shutdown_delay + args.shutdown_timeout
    # The readiness probe notices the 503 well within the delay.
    ready = c["readinessProbe"]
    assert ready["periodSeconds"] * ready["failureThreshold"] < args.shutdown_delay
    # Liveness must not kill a replica that is draining (503 on purpose).
    live = c["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= grace
    assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts  # --workers keeps its private sockets there
    [sport] = svc["spec"]["ports"]
    assert sport["targetPort"] == "http"  # the site only, never the admin port
    strategy = dep["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0


def test_httparena_entry_serves_its_static_profiles() -> None:
    entry = REPO / "bench" / "frameworks" / "serverio"
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["type"] == "infrastructure" and set(meta["tests"]) == {"static", "static-tls"}
    script = (entry / "launch.sh").read_text().replace("\\\n", " ")
    [line] = [ln for ln in script.splitlines() if ln.startswith("exec ")]
    argv = shlex.split(line)[1:]
    assert argv[:3] == ["python", "-m", "serverio"]
    args = _args(argv[3:])
    assert args.directory == "/data"
    assert [parse_host_port(a, "--listen")[1] for a in args.listen] == [8080]
    assert [parse_host_port(a, "--listen-tls")[1] for a in args.listen_tls] == [8081]
    assert (args.certfile, args.keyfile) == ("/certs/server.crt", "/certs/server.key")
    docker = (entry / "Dockerfile").read_text()
    assert "EXPOSE 8080 8081" in docker and "launch.sh" in docker
