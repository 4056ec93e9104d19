"""Server registry and process management: start on a loopback port, wait, tear down.

A server entry (``ServerSpec``) names a *kind* (how to build its command
line) plus extra arguments, so variants such as another serverio
``--fs-workers`` setting are one more entry. Every server is started in its
own process group and the whole group is killed when its ``with`` block exits.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from bench.commits import serverio_launch

BENCH_DIR = Path(__file__).resolve().parent
BASELINES = BENCH_DIR / "baselines"
CONFIGS = BENCH_DIR / "configs"
DEFAULT_PEERS_VENV = BENCH_DIR / ".peers-venv"
LOOPBACK = "127.0.0.1"

# serverio (and the baselines that mimic it) print "Serving DIR at http://HOST:PORT/".
READY_RE = re.compile(rb"https?://(?P<host>\[[^\]]*\]|[^\s/:]+):(?P<port>\d+)")


class ServerStartError(RuntimeError):
    """A server exited or did not become ready in time."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    kind: str
    extra_args: tuple[str, ...] = ()
    description: str = ""
    tags: frozenset[str] = frozenset()
    # When set, the server only takes part in these workloads.
    only_workloads: frozenset[str] | None = None
    # serverio kind only: run the serverio of this commit (full id), exported
    # to ``tree`` by bench.commits, instead of the current checkout's.
    commit: str = ""
    tree: str = ""
    # Proxy workloads only: the upstream's http://HOST:PORT, set by the
    # runner once it has started the upstream (bench/proxyrun.py).
    upstream: str = ""


@dataclass(frozen=True)
class HarnessEnv:
    repo: Path
    python: str
    peers_python: Path
    nginx: str | None


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    cwd: Path
    # A port chosen by the harness, or None to read it from the ready line.
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    # "http": ready once it answers an HTTP/1.1 GET; "tcp": once it accepts
    # a connection (servers that speak only HTTP/2, or only TLS, here).
    ready: str = "http"
    # URLs are SCHEME://127.0.0.1:PORT PREFIX PATH (granian serves files under a route).
    scheme: str = "http"
    prefix: str = ""
    # serverio's --admin-bind port (/metrics), when the workload asks for it.
    admin_port: int | None = None


@dataclass(frozen=True)
class Kind:
    """How to start one kind of server."""

    unavailable: Callable[[HarnessEnv], str | None]
    # (spec, env, root dir, the workload's file or None, private work dir) -> plan or skip reason
    plan: Callable[[ServerSpec, HarnessEnv, Path, Path | None, Path], LaunchPlan | str]


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


# --- kinds -----------------------------------------------------------------


def _serverio_unavailable(env: HarnessEnv) -> str | None:
    spec = importlib.util.find_spec("serverio")
    if spec is None or not spec.submodule_search_locations:
        return (
            "serverio is not importable by this interpreter (pip install -e . from the repo root)"
        )
    if not any((Path(p) / "__main__.py").exists() for p in spec.submodule_search_locations):
        return "serverio has no __main__ module yet"
    return None


def _serverio_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    # Another commit's serverio runs under this interpreter (same trio and
    # h11) with its tree on PYTHONPATH and as cwd; see bench/commits.py.
    launch = serverio_launch(env.python, Path(spec.tree) if spec.tree else None)
    cwd = launch.cwd if spec.tree else env.repo
    tls: list[str] = []
    if "tls" in spec.tags:
        made = self_signed(workdir)
        if isinstance(made, str):
            return made
        tls = ["--certfile", str(made[0]), "--keyfile", str(made[1])]
    argv = [
        *launch.argv(),
        "0",
        "-b",
        LOOPBACK,
        "-d",
        str(root),
        "-q",
        *tls,
        *spec.extra_args,
    ]
    admin = free_port() if "admin" in spec.tags else None
    if admin is not None:
        argv += ["--admin-bind", f"{LOOPBACK}:{admin}"]
    if tls:
        return LaunchPlan(
            argv=argv, cwd=cwd, env=launch.env, ready="tcp", scheme="https", admin_port=admin
        )
    return LaunchPlan(argv=argv, cwd=cwd, env=launch.env, admin_port=admin)


def self_signed(workdir: Path) -> tuple[Path, Path] | str:
    """A throwaway P-256 certificate for 127.0.0.1 in ``workdir`` (openssl), or a skip reason."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return "openssl not found: no certificate for the TLS entry"
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    argv = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    argv += ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2"]
    argv += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    done = subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        return f"openssl could not make a certificate: {done.stderr.decode()[-200:]}"
    return cert, key


def _module_unavailable(*modules: str) -> Callable[[HarnessEnv], str | None]:
    def check(env: HarnessEnv) -> str | None:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        return f"not importable here: {', '.join(missing)}" if missing else None

    return check


def _bare_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if file is None:
        return "the bare control serves a single file; this workload requests several"
    argv = [env.python, str(BASELINES / "bare_trio_h11.py"), str(file), "0", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir)


def _relay_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if not spec.upstream:
        return "the relay floor needs the proxy workloads' upstream"
    if file is None:
        return "the relay floor relays a single file; this workload requests several"
    upstream = spec.upstream.removeprefix("http://")
    path = "/" + file.relative_to(root).as_posix()
    argv = [env.python, str(BASELINES / "relay_floor.py"), upstream, path, "0", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir)


def _h11_floor_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if not spec.upstream:
        return "the h11 proxy floor needs the proxy workloads' upstream"
    upstream = spec.upstream.removeprefix("http://")
    argv = [env.python, str(BASELINES / "h11_proxy_floor.py"), upstream, "0", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir)


def _tls_floor_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if file is None:
        return "the TLS floor answers with a single file; this workload requests several"
    made = self_signed(workdir)
    if isinstance(made, str):
        return made
    cert, key = made
    argv = [env.python, str(BASELINES / "tls_floor.py"), str(cert), str(key), str(file), "0"]
    return LaunchPlan(argv=[*argv, *spec.extra_args], cwd=workdir, ready="tcp", scheme="https")


def _h2_floor_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if file is None:
        return "the HTTP/2 floor answers with a single file; this workload requests several"
    argv = [env.python, str(BASELINES / "h2_floor.py"), str(file), "0", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir, ready="tcp")


def _files_floor_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if file is not None:
        return "the files floor serves a tree (many-files, few-files)"
    argv = [env.python, str(BASELINES / "files_floor.py"), str(root), "0", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir)


def _stdlib_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    # ThreadingHTTPServer; --protocol exists since Python 3.11 (HTTP/1.0 is the default).
    argv = [env.python, "-u", "-m", "http.server", "0", "-b", LOOPBACK, "-d", str(root)]
    argv += ["--protocol", "HTTP/1.1", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir)


def _peers_unavailable(env: HarnessEnv) -> str | None:
    if not env.peers_python.exists():
        return f"peers venv missing ({env.peers_python.parent.parent}): run `python -m bench setup`"
    return None


def _peer_env(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(BASELINES), "BENCH_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}


def _aiohttp_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    port = free_port()
    argv = [str(env.peers_python), str(BASELINES / "aiohttp_static.py"), str(root), str(port)]
    return LaunchPlan(argv=[*argv, *spec.extra_args], cwd=workdir, port=port, env=_peer_env(root))


def _uvicorn_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    port = free_port()
    argv = [str(env.peers_python), "-m", "uvicorn", "starlette_static:app"]
    argv += ["--host", LOOPBACK, "--port", str(port), "--no-access-log", "--log-level", "warning"]
    argv += ["--timeout-keep-alive", "75", "--backlog", "2048", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir, port=port, env=_peer_env(root))


HYPERCORN_TOML = """\
# Written by bench: one in-process trio worker, no request cap per connection.
worker_class = "trio"
workers = 0
keep_alive_timeout = 75
keep_alive_max_requests = 1000000000
backlog = 2048
"""


def _hypercorn_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    port = free_port()
    config = workdir / "hypercorn.toml"
    config.write_text(HYPERCORN_TOML)
    argv = [str(env.peers_python), "-m", "hypercorn", "--config", str(config)]
    argv += ["--worker-class", "trio", "--workers", "0", "--bind", f"{LOOPBACK}:{port}"]
    argv += ["--keep-alive", "75", "--backlog", "2048", *spec.extra_args, "starlette_static:app"]
    return LaunchPlan(argv=argv, cwd=workdir, port=port, env=_peer_env(root))


NGINX_CONF = """\
# Written by bench for one run; everything lives in {d}.
worker_processes {workers};
daemon off;
master_process on;
{user}pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 20000; }}
http {{
    {mime}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    access_log off;
    keepalive_timeout 75s;
    keepalive_requests 1000000000;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
{site}
}}
"""

NGINX_FILES = """\
    gzip on;
    gzip_static on;
    gzip_types text/plain;
    server {{
        # backlog: nginx's default of 511 would make most of 4,096 clients
        # connecting at once wait for SYN retransmits.
        listen {host}:{port}{listen_opts} backlog=4096;
        root {root};
        location / {{ autoindex on; }}
    }}"""

# nginx as the reverse proxy of the proxy workloads: a keep-alive pool to
# the upstream (`keepalive` idle connections, as many as Caddy's default
# keepalive_idle_conns_per_host, with its request cap lifted like the
# client side's), HTTP/1.1 upstream with the hop-by-hop Connection
# cleared (so the pool is used), and no temp files: proxy_max_temp_file_size
# 0 streams a response larger than the buffers through them, as the other
# proxies stream, instead of spooling 8 MiB to disk.
NGINX_PROXY = """\
    upstream bench_upstream {{
        server {upstream};
        keepalive 32;
        keepalive_requests 1000000000;
        keepalive_timeout 75s;
    }}
    server {{
        listen {host}:{port} backlog=4096;
        location / {{
            proxy_pass http://bench_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_max_temp_file_size 0;
        }}
    }}"""


def find_nginx() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def _nginx_unavailable(env: HarnessEnv) -> str | None:
    return None if env.nginx else "nginx not found (apt-get install -y nginx-light)"


def _nginx_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    return _nginx_conf_plan(spec, env, root, workdir, "")


def _nginx_h2c_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    # nginx 1.22 (Debian bookworm): a cleartext `listen ... http2` port
    # speaks h2c with prior knowledge only, so readiness is a TCP connect.
    return replace(_nginx_conf_plan(spec, env, root, workdir, " http2"), ready="tcp")


def _nginx_proxy_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    if not spec.upstream:
        return "a reverse proxy needs the proxy workloads' upstream"
    upstream = spec.upstream.removeprefix("http://")
    return _nginx_conf_plan(spec, env, root, workdir, "", NGINX_PROXY, upstream)


def _nginx_conf_plan(
    spec: ServerSpec,
    env: HarnessEnv,
    root: Path,
    workdir: Path,
    listen_opts: str,
    site: str = NGINX_FILES,
    upstream: str = "",
) -> LaunchPlan:
    assert env.nginx is not None
    port = free_port()
    mime = Path("/etc/nginx/mime.types")
    conf = workdir / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            d=workdir,
            workers=2 if "cores2" in spec.tags else 1,
            site=site.format(
                host=LOOPBACK, port=port, listen_opts=listen_opts, root=root, upstream=upstream
            ),
            # Workers must read the fixture under a private temp dir.
            user="user root;\n" if os.geteuid() == 0 else "",
            mime=f"include {mime};"
            if mime.exists()
            else "types { text/plain txt; text/html html; }",
        )
    )
    argv = [env.nginx, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log")]
    return LaunchPlan(argv=[*argv, *spec.extra_args], cwd=workdir, port=port)


CADDYFILE = """\
# Written by bench for one run, over {protocols}.
{{
    admin off
    auto_https off
    servers {{
        protocols {protocols}
        timeouts {{
            idle 75s
        }}
    }}
}}
http://{host}:{port} {{
{site}
}}
"""
CADDY_FILES = """\
    root * {root}
    file_server"""
# `encode zstd gzip`: Caddy compresses every response whose client accepts
# one of them (the no-sidecar workloads' caddy-encode entry).
CADDY_ENCODE = """\
    root * {root}
    encode zstd gzip
    file_server"""
# The proxy workloads: Caddy's reverse_proxy with its default transport
# (keep-alive on, 32 idle connections per upstream host).
CADDY_PROXY = """\
    reverse_proxy {upstream}"""


def _caddy_unavailable(env: HarnessEnv) -> str | None:
    return None if shutil.which("caddy") else "caddy not found (apt-get install -y caddy)"


# Committed, so the compressed workloads always run Caddy with the same
# file: the generated Caddyfile's HTTP/1.1 server plus `precompressed br gzip`.
CADDYFILE_PRECOMPRESSED = CONFIGS / "Caddyfile.precompressed"


def _caddy_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan | str:
    port = free_port()
    # Caddy keeps its state under $HOME / XDG dirs: give it the work dir.
    run_env = {"HOME": str(workdir), "XDG_DATA_HOME": str(workdir), "XDG_CONFIG_HOME": str(workdir)}
    if "h2" not in spec.tags and "precompressed" in spec.tags:
        # The committed file reads its address and root from the environment
        # ({$VAR} is substituted when Caddy adapts the Caddyfile).
        conf = CADDYFILE_PRECOMPRESSED
        run_env |= {"BENCH_HOST": LOOPBACK, "BENCH_PORT": str(port), "BENCH_ROOT": str(root)}
    elif "tls" in spec.tags:
        made = self_signed(workdir)
        if isinstance(made, str):
            return made
        conf = workdir / "Caddyfile"
        site = CADDY_FILES.format(root=root) + f"\n    tls {made[0]} {made[1]}"
        text = CADDYFILE.format(host=LOOPBACK, port=port, protocols="h1", site=site)
        conf.write_text(text.replace(f"http://{LOOPBACK}:{port}", f"https://{LOOPBACK}:{port}"))
        caddy = shutil.which("caddy") or "caddy"
        argv = [caddy, "run", "--config", str(conf), "--adapter", "caddyfile", *spec.extra_args]
        return LaunchPlan(
            argv=argv, cwd=workdir, port=port, env=run_env, ready="tcp", scheme="https"
        )
    else:
        conf = workdir / "Caddyfile"
        protocols = "h1 h2c" if "h2" in spec.tags else "h1"
        site = CADDY_ENCODE if "encode" in spec.tags else CADDY_FILES
        if spec.kind == "caddy-proxy":
            if not spec.upstream:
                return "a reverse proxy needs the proxy workloads' upstream"
            site = CADDY_PROXY
        text = site.format(root=root, upstream=spec.upstream.removeprefix("http://"))
        conf.write_text(CADDYFILE.format(host=LOOPBACK, port=port, protocols=protocols, site=text))
    if "cores2" in spec.tags:
        run_env["GOMAXPROCS"] = "2"
    caddy = shutil.which("caddy") or "caddy"
    argv = [caddy, "run", "--config", str(conf), "--adapter", "caddyfile", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir, port=port, env=run_env)


GRANIAN_STATIC_ROUTE = "/static"


def _granian_unavailable(env: HarnessEnv) -> str | None:
    reason = _peers_unavailable(env)
    if reason is None and not (env.peers_python.parent / "granian").exists():
        reason = "granian missing from the peers venv: run `python -m bench setup`"
    return reason


def _granian_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    # Granian's static files are served by Rust under a route of their own
    # (a route of "/" hands every request to the Python app instead), so the
    # harness requests /static/<path>; the ASGI app only answers misses.
    # Entries tagged "h2" speak HTTP/2 (h2c prior knowledge), the others HTTP/1.1.
    h2 = "h2" in spec.tags
    port = free_port()
    http = "2" if h2 else "1"
    argv = [str(env.peers_python.parent / "granian"), "--interface", "asgi", "--http", http]
    argv += ["--host", LOOPBACK, "--port", str(port), "--workers", "1", "--runtime-threads", "1"]
    argv += ["--no-ws", "--static-path-route", GRANIAN_STATIC_ROUTE]
    argv += ["--static-path-mount", str(root), "--log-level", "warning"]
    if not h2:
        # The default backlog (1024) would leave clients of the 4,096-connection
        # workload waiting for SYN retransmits; granian's backpressure follows it.
        argv += ["--backlog", "4096"]
    argv += [*spec.extra_args, "starlette_static:app"]
    return LaunchPlan(
        argv=argv,
        cwd=workdir,
        port=port,
        env=_peer_env(root),
        ready="tcp" if h2 else "http",
        prefix=GRANIAN_STATIC_ROUTE,
    )


KINDS: dict[str, Kind] = {
    "serverio": Kind(_serverio_unavailable, _serverio_plan),
    "bare": Kind(_module_unavailable("trio", "h11"), _bare_plan),
    "relay-floor": Kind(_module_unavailable("trio"), _relay_plan),
    "h11-proxy-floor": Kind(_module_unavailable("trio", "h11"), _h11_floor_plan),
    "tls-floor": Kind(_module_unavailable("trio"), _tls_floor_plan),
    "h2-floor": Kind(_module_unavailable("trio", "h2"), _h2_floor_plan),
    "files-floor": Kind(_module_unavailable("trio"), _files_floor_plan),
    "http.server": Kind(lambda env: None, _stdlib_plan),
    "aiohttp": Kind(_peers_unavailable, _aiohttp_plan),
    "uvicorn": Kind(_peers_unavailable, _uvicorn_plan),
    "hypercorn": Kind(_peers_unavailable, _hypercorn_plan),
    "nginx": Kind(_nginx_unavailable, _nginx_plan),
    "nginx-h2c": Kind(_nginx_unavailable, _nginx_h2c_plan),
    "caddy": Kind(_caddy_unavailable, _caddy_plan),
    "caddy-proxy": Kind(_caddy_unavailable, _caddy_plan),
    "nginx-proxy": Kind(_nginx_unavailable, _nginx_proxy_plan),
    "granian": Kind(_granian_unavailable, _granian_plan),
}

# The HTTP/2 workloads (bench/workloads.py): entries that speak only HTTP/2
# here are restricted to them.
H2_WORKLOADS = ("1k-h2", "64k-h2", "64k-h2-c256", "assets-h2", "8m-h2")
# The wrk many-assets workloads (bench/workloads.py ASSETS_WORKLOADS).
ASSETS_WORKLOADS = ("assets-c512", "assets-c4096")
# The no-sidecar many-assets workloads and the reverse-proxy workloads
# (bench/workloads.py; tests/test_bench_proxy.py checks the lists agree).
NOSIDECAR_WORKLOADS = ("assets-nosidecar-c512", "assets-nosidecar-c64")
PROXY_WORKLOADS = ("proxy-1k-c64", "proxy-8m-c16", "proxy-1k-c512")
TREE_WORKLOADS = ("many-files", "few-files")
# serverio-bigcache's --file-cache-size: 100,000 files of 1 KiB plus the
# cache's accounting overhead per entry (512 B) fit with room to spare.
BIGCACHE_BYTES = 256 * 1024 * 1024

# Benchmark settings applied to every server where its default would distort a
# measurement: keep-alive >= 75 s and connection caps above the idle workload's
# 10,000 (the idle workload), no per-connection request cap (keep-alive
# workloads would otherwise reconnect every 1,000 requests).
SERVERIO_COMMON = (
    "--access-log",
    "off",
    "--max-connections",
    "20000",
    "--keepalive-timeout",
    "75",
    "--max-requests",
    "1000000000",
)


def serverio_entry(
    name: str,
    *extra_args: str,
    description: str = "",
    only_workloads: tuple[str, ...] | None = None,
    tags: tuple[str, ...] = (),
) -> ServerSpec:
    """A serverio variant: ``python -m serverio 0 -b 127.0.0.1 -d DIR -q`` plus ``extra_args``."""
    return ServerSpec(
        name=name,
        kind="serverio",
        extra_args=(*extra_args, *SERVERIO_COMMON),
        description=description or f"serverio {' '.join(extra_args)}",
        tags=frozenset({"serverio", *tags}),
        only_workloads=frozenset(only_workloads) if only_workloads is not None else None,
    )


SERVERS: dict[str, ServerSpec] = {
    s.name: s
    for s in (
        serverio_entry(
            "serverio-inline",
            "--fs-workers",
            "0",
            description="serverio, filesystem work inline (h2c with prior knowledge on the "
            "same port)",
            # h1-vs-h2: its own HTTP/1.1 is the reference of the 8 MiB h2 figure;
            # nosidecar: negotiated answers without sidecars (cached br);
            # two-core: takes part in 1k-cores2 (with --workers 2).
            tags=("h2", "h1-vs-h2", "nosidecar", "two-core"),
        ),
        serverio_entry(
            "serverio-identity",
            "--fs-workers",
            "0",
            description="serverio-inline asked with Accept-Encoding: identity (no-sidecar "
            "workloads only)",
            only_workloads=NOSIDECAR_WORKLOADS,
            tags=("nosidecar", "identity"),
        ),
        serverio_entry(
            "serverio-pool",
            "--fs-workers",
            "4",
            "--fs-queue",
            "1024",
            # The queue covers the largest workload's 256 connections, so the
            # comparison measures the hop's cost, not admission 503s.
            description="serverio, 4 fs workers + 1024 queue",
        ),
        serverio_entry(
            "serverio-pool16",
            "--fs-workers",
            "16",
            "--fs-queue",
            "64",
            description="serverio, 16 fs workers + 64 queue (slow-storage workload only)",
            only_workloads=("slow",),
        ),
        ServerSpec(
            "bare", "bare", description="bare trio+h11 loop serving one file (ceiling control)"
        ),
        ServerSpec(
            "http.server", "http.server", description="CPython ThreadingHTTPServer, HTTP/1.1"
        ),
        ServerSpec("aiohttp", "aiohttp", description="aiohttp web.static (asyncio loop)"),
        ServerSpec(
            "uvicorn-starlette", "uvicorn", description="uvicorn (1 worker) + Starlette StaticFiles"
        ),
        ServerSpec(
            "hypercorn-trio",
            "hypercorn",
            description="hypercorn trio worker + Starlette StaticFiles (h2c prior knowledge "
            "on the same port)",
            tags=frozenset({"h2"}),
        ),
        serverio_entry(
            "serverio-bigcache",
            "--fs-workers",
            "0",
            "--file-cache-size",
            str(BIGCACHE_BYTES),
            description="serverio-inline with a warm-file cache that holds every file of the "
            "many-files workloads (many-files and few-files only)",
            only_workloads=TREE_WORKLOADS,
        ),
        ServerSpec(
            "files-floor",
            "files-floor",
            description="open, fstat, read and close per request head over trio's SocketStream "
            "(bench/baselines/files_floor.py): the floor of an uncached small file on trio "
            "(many-files and few-files only)",
            only_workloads=frozenset(TREE_WORKLOADS),
        ),
        serverio_entry(
            "serverio-nocache",
            "--fs-workers",
            "0",
            "--file-cache-size",
            "0",
            description="serverio-inline without the warm-file cache (many-assets workloads only)",
            only_workloads=ASSETS_WORKLOADS,
        ),
        # h1-vs-h2: their HTTP/1.1 with h2load --h1 (8m-h1) is the reference
        # for their own 8 MiB h2 figure (nginx-h2c, caddy-h2c).
        ServerSpec(
            "nginx",
            "nginx",
            description="nginx, 1 worker (1k-cores2: 2), sendfile, gzip_static",
            tags=frozenset({"h1-vs-h2", "nosidecar", "two-core"}),
        ),
        ServerSpec(
            "caddy",
            "caddy",
            description="Caddy file_server over HTTP/1.1 (compressed workloads: "
            "bench/configs/Caddyfile.precompressed; 1k-cores2: GOMAXPROCS=2)",
            tags=frozenset({"h1-vs-h2", "nosidecar", "two-core"}),
        ),
        ServerSpec(
            "caddy-encode",
            "caddy",
            description="Caddy file_server with encode zstd gzip (no-sidecar workloads only)",
            tags=frozenset({"nosidecar", "encode"}),
            only_workloads=frozenset(NOSIDECAR_WORKLOADS),
        ),
        serverio_entry(
            "serverio-proxy",
            "--fs-workers",
            "0",
            description="serverio --proxy /=UPSTREAM, default proxy limits (proxy workloads only)",
            only_workloads=PROXY_WORKLOADS,
            tags=("proxy",),
        ),
        serverio_entry(
            "serverio-proxy-wide",
            "--fs-workers",
            "0",
            "--proxy-keepalive",
            "512",
            "--proxy-max-inflight",
            "1024",
            description="serverio-proxy with its pool (idle connections kept) and in-flight cap "
            "opened to the workloads' connections: what the defaults cost (proxy workloads only)",
            only_workloads=PROXY_WORKLOADS,
            tags=("proxy",),
        ),
        ServerSpec(
            "caddy-proxy",
            "caddy-proxy",
            description="Caddy reverse_proxy UPSTREAM, default transport (proxy workloads only)",
            tags=frozenset({"proxy"}),
            only_workloads=frozenset(PROXY_WORKLOADS),
        ),
        ServerSpec(
            "relay-floor",
            "relay-floor",
            description="a trio relay with no HTTP in it (bench/baselines/relay_floor.py): "
            "the floor of a trio proxy (proxy-1k-c64 only)",
            tags=frozenset({"proxy"}),
            only_workloads=frozenset({"proxy-1k-c64"}),
        ),
        ServerSpec(
            "h11-proxy-floor",
            "h11-proxy-floor",
            description="the least a trio proxy on h11 does per request "
            "(bench/baselines/h11_proxy_floor.py; proxy-1k-c64 only)",
            tags=frozenset({"proxy"}),
            only_workloads=frozenset({"proxy-1k-c64"}),
        ),
        ServerSpec(
            "nginx-proxy",
            "nginx-proxy",
            description="nginx proxy_pass, upstream keepalive 32, HTTP/1.1 (proxy workloads only)",
            tags=frozenset({"proxy"}),
            only_workloads=frozenset(PROXY_WORKLOADS),
        ),
        ServerSpec(
            "granian",
            "granian",
            description="granian --http 1, Rust static route (1 worker, 1 runtime thread)",
        ),
        serverio_entry(
            "serverio-tls",
            "--fs-workers",
            "0",
            description="serverio-inline over TLS, HTTP/2 by ALPN (self-signed P-256)",
            only_workloads=(*H2_WORKLOADS, "1k-tls"),
            tags=("h2", "tls", "tls-h1"),
        ),
        ServerSpec(
            "caddy-tls",
            "caddy",
            description="Caddy file_server over TLS, HTTP/1.1 (self-signed P-256; 1k-tls only)",
            tags=frozenset({"tls", "tls-h1"}),
            only_workloads=frozenset({"1k-tls"}),
        ),
        ServerSpec(
            "tls-floor",
            "tls-floor",
            description="a canned 1 KiB response per request head over trio's SSLStream "
            "(bench/baselines/tls_floor.py): the floor of HTTP/1.1 over TLS on trio (1k-tls only)",
            tags=frozenset({"tls-h1"}),
            only_workloads=frozenset({"1k-tls"}),
        ),
        ServerSpec(
            "h2-floor",
            "h2-floor",
            description="a canned 1 KiB response per stream through the h2 library's public "
            "calls on trio (bench/baselines/h2_floor.py): the floor of HTTP/2 with h2 (1k-h2 only)",
            tags=frozenset({"h2"}),
            only_workloads=frozenset({"1k-h2"}),
        ),
        ServerSpec(
            "caddy-h2c",
            "caddy",
            description="Caddy file_server, protocols h1 h2c",
            tags=frozenset({"h2"}),
            only_workloads=frozenset(H2_WORKLOADS),
        ),
        ServerSpec(
            "granian-h2",
            "granian",
            description="granian --http 2, Rust static route (1 worker, 1 runtime thread)",
            tags=frozenset({"h2"}),
            only_workloads=frozenset(H2_WORKLOADS),
        ),
        ServerSpec(
            "nginx-h2c",
            "nginx-h2c",
            description="nginx, 1 worker, listen ... http2 (h2c prior knowledge)",
            tags=frozenset({"h2"}),
            only_workloads=frozenset(H2_WORKLOADS),
        ),
    )
}

SMOKE_SERVERS = ("serverio-inline", "serverio-pool", "bare", "http.server", "serverio-proxy")


def commit_entry(like: ServerSpec, commit: str, tree: Path, name: str = "") -> ServerSpec:
    """``like`` (a serverio entry), but running the serverio of ``commit`` from ``tree``.

    Same arguments, tags and workload restrictions, so it takes part in
    exactly the workloads ``like`` does, pinned the same way.
    """
    return replace(
        like,
        name=name or f"serverio@{commit[:7]}",
        description=f"{like.description} at commit {commit[:12]}",
        commit=commit,
        tree=str(tree),
    )


# --- process management ----------------------------------------------------


@dataclass
class RunningServer:
    spec: ServerSpec
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    argv: list[str]
    startup_s: float
    scheme: str = "http"
    prefix: str = ""
    admin_port: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, path: str) -> str:
        return f"{self.scheme}://{LOOPBACK}:{self.port}{self.prefix}{path}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        return tail(self.log_path, lines)


def tail(path: Path, lines: int = 15) -> str:
    try:
        data = path.read_bytes()[-8192:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _pump(stream: IO[bytes], log: IO[bytes], found: list[int], ready: threading.Event) -> None:
    """Copy the server's stdout to its log; note the port of the first ready line."""
    for line in iter(stream.readline, b""):  # ends at EOF, when the server exits
        log.write(line)
        log.flush()
        if not found and (m := READY_RE.search(line)):
            found.append(int(m["port"]))
            ready.set()
    ready.set()


def _http_ready(port: int, timeout_s: float) -> bool:
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout_s)
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def _tcp_ready(port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def terminate(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """Stop a server's whole process group: SIGTERM, then SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    # Anything left in the group (a straggling worker, or a leader that ignored SIGTERM).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(5.0)
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def running(
    spec: ServerSpec, plan: LaunchPlan, log_path: Path, *, cpu: int | None, timeout_s: float = 30.0
) -> Iterator[RunningServer]:
    """Start ``plan`` pinned to ``cpu``; wait until it answers HTTP; yield; kill its group."""
    argv = ([] if cpu is None else ["taskset", "-c", str(cpu)]) + plan.argv
    env = {**os.environ, **plan.env}
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=plan.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if plan.port is None else log,
            stderr=log,
            start_new_session=True,
        )
        pump: threading.Thread | None = None
        try:
            deadline = started + timeout_s
            port = plan.port
            if port is None:
                assert proc.stdout is not None
                found: list[int] = []
                ready = threading.Event()
                pump = threading.Thread(
                    target=_pump, args=(proc.stdout, log, found, ready), daemon=True
                )
                pump.start()
                ready.wait(timeout_s)
                if not found:
                    raise ServerStartError(
                        f"{spec.name}: no 'Serving ... at http://HOST:PORT/' line "
                        f"(exit code {proc.poll()}):\n{tail(log_path)}"
                    )
                port = found[0]
            answers = _tcp_ready if plan.ready == "tcp" else _http_ready
            while not answers(port, 1.0):  # bounded by the deadline
                if proc.poll() is not None:
                    raise ServerStartError(
                        f"{spec.name} exited with {proc.returncode}:\n{tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise ServerStartError(
                        f"{spec.name} did not answer on port {port} within {timeout_s:.0f}s"
                    )
                time.sleep(0.05)
            yield RunningServer(
                spec,
                proc,
                port,
                log_path,
                argv,
                time.monotonic() - started,
                scheme=plan.scheme,
                prefix=plan.prefix,
                admin_port=plan.admin_port,
            )
        finally:
            terminate(proc)
            if pump is not None:
                pump.join(timeout=5.0)
            if proc.stdout is not None:
                proc.stdout.close()
