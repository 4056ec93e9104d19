"""The WebDAV servers of the write workloads (bench/davrun.py).

Each one serves its own root directory (writable) on a free loopback
port, started with bench.servers.running (own process group, pinned,
torn down in ``finally``):

- serverio ``--webdav`` (fsync on commit, its default), the same with
  ``--no-fsync``, and ``--upload`` alone (PUT workloads only);
- WsgiDAV 4.x on cheroot (peers venv), a generated JSON configuration:
  anonymous, in-memory locks and dead properties (``lock_storage``,
  ``property_manager``: litmus's ``props`` and ``locks`` need them),
  verbose 1 (no request log);
- ``rclone serve webdav`` (Debian rclone) of the directory, ``GOMAXPROCS=1``
  (one core, as pinned), an empty rclone config;
- Apache httpd (Debian ``apache2``) with ``mod_dav``/``mod_dav_fs``: an
  unprivileged foreground instance with its own configuration in the
  server's work dir (``mpm_event``, one child process, 64 threads,
  keep-alive without a request cap, ``LimitRequestBody 0``); as root it
  switches to ``www-data``, so the root and the lock database's directory
  are handed to that user.  The system's apache service is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bench.servers import (
    KINDS,
    LOOPBACK,
    HarnessEnv,
    Kind,
    LaunchPlan,
    ServerSpec,
    free_port,
    serverio_entry,
)

__all__ = [
    "APACHE_CONF",
    "DAV_KINDS",
    "DAV_SERVERS",
    "PUT_ONLY",
    "apache_binary",
    "hand_over",
]

APACHE_MODULES = Path("/usr/lib/apache2/modules")

APACHE_CONF = """\
# Written by bench for one run; everything lives in {d}.
ServerRoot "{d}"
ServerName 127.0.0.1
Listen {host}:{port}
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
LogLevel warn
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule dav_module {mods}/mod_dav.so
LoadModule dav_fs_module {mods}/mod_dav_fs.so
{user}TypesConfig /etc/mime.types
# One child process (pinned with the parent), threads enough for the
# 16-connection workload; keep-alive as the other servers have it.
StartServers 1
ServerLimit 1
ThreadsPerChild 64
MaxRequestWorkers 64
MinSpareThreads 16
MaxSpareThreads 64
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 75
LimitRequestBody 0
DavLockDB {d}/lock/davlock
DocumentRoot "{root}"
<Directory />
    AllowOverride None
</Directory>
<Directory "{root}">
    Dav On
    AllowOverride None
    Require all granted
</Directory>
"""


def apache_binary() -> str | None:
    return shutil.which("apache2") or shutil.which("httpd")


def hand_over(path: Path, user: str = "www-data") -> None:
    """As root: give ``path`` (recursively) to ``user``, whom Apache's
    child runs as; a no-op for anyone else (then Apache keeps the uid)."""
    if os.geteuid() != 0:
        return
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return
    for top, dirs, files in os.walk(path):
        os.chown(top, pw.pw_uid, pw.pw_gid)
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)


def _apache_unavailable(env: HarnessEnv) -> str | None:
    if apache_binary() is None:
        return "apache2 not found (apt-get install -y apache2)"
    if not (APACHE_MODULES / "mod_dav_fs.so").exists():
        return f"mod_dav_fs not in {APACHE_MODULES}"
    return None


def _apache_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    binary = apache_binary()
    assert binary is not None
    port = free_port()
    (workdir / "lock").mkdir(exist_ok=True)
    root_user = os.geteuid() == 0
    conf = workdir / "httpd.conf"
    conf.write_text(
        APACHE_CONF.format(
            d=workdir,
            host=LOOPBACK,
            port=port,
            mods=APACHE_MODULES,
            root=root,
            user="User www-data\nGroup www-data\n" if root_user else "",
        )
    )
    hand_over(workdir / "lock")
    hand_over(root)
    argv = [binary, "-d", str(workdir), "-f", str(conf), "-DFOREGROUND", *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir, port=port)


def _wsgidav_unavailable(env: HarnessEnv) -> str | None:
    if not (env.peers_python.parent / "wsgidav").exists():
        return "wsgidav not in the peers venv: run `python -m bench setup`"
    return None


def _wsgidav_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    port = free_port()
    conf = {
        "host": LOOPBACK,
        "port": port,
        "server": "cheroot",
        "provider_mapping": {"/": str(root)},
        "simple_dc": {"user_mapping": {"*": True}},  # anonymous
        "http_authenticator": {"domain_controller": None},
        "property_manager": True,  # in memory: dead properties (litmus props)
        "lock_storage": True,  # in memory
        "verbose": 1,
        "dir_browser": {"enable": False},
    }
    path = workdir / "wsgidav.json"
    path.write_text(json.dumps(conf, indent=1))
    argv = [str(env.peers_python.parent / "wsgidav"), "--config", str(path), *spec.extra_args]
    return LaunchPlan(argv=argv, cwd=workdir, port=port)


def _rclone_unavailable(env: HarnessEnv) -> str | None:
    return None if shutil.which("rclone") else "rclone not found (apt-get install -y rclone)"


def _rclone_plan(
    spec: ServerSpec, env: HarnessEnv, root: Path, file: Path | None, workdir: Path
) -> LaunchPlan:
    port = free_port()
    conf = workdir / "rclone.conf"
    conf.write_text("")
    argv = ["rclone", "serve", "webdav", str(root), "--addr", f"{LOOPBACK}:{port}"]
    argv += ["--config", str(conf), "--log-level", "ERROR", *spec.extra_args]
    # One core, as pinned (Caddy's entry does the same).
    run_env = {"GOMAXPROCS": "1", "HOME": str(workdir), "XDG_CACHE_HOME": str(workdir)}
    return LaunchPlan(argv=argv, cwd=workdir, port=port, env=run_env)


DAV_KINDS: dict[str, Kind] = {
    "serverio": KINDS["serverio"],
    "wsgidav": Kind(_wsgidav_unavailable, _wsgidav_plan),
    "rclone": Kind(_rclone_unavailable, _rclone_plan),
    "apache": Kind(_apache_unavailable, _apache_plan),
}

# 1 GiB must fit under --max-upload-size (its default is exactly 1 GiB).
# The load is one client with 16 connections (put-4k-c16): the fair-use
# share of the write slots (--max-uploads-per-client, half of --max-uploads
# by default) would answer half of them 503, so it gets every slot, as the
# peers give it.
_SERVERIO_DAV = ("--max-upload-size", "2GiB", "--max-uploads-per-client", "16")

DAV_SERVERS: dict[str, ServerSpec] = {
    s.name: s
    for s in (
        serverio_entry(
            "serverio-dav",
            "--webdav",
            *_SERVERIO_DAV,
            description="serverio --webdav (fsync of file and directory on every commit)",
        ),
        serverio_entry(
            "serverio-dav-nofsync",
            "--webdav",
            "--no-fsync",
            *_SERVERIO_DAV,
            description="serverio --webdav --no-fsync (atomic rename, no fsync)",
        ),
        serverio_entry(
            "serverio-upload",
            "--upload",
            *_SERVERIO_DAV,
            description="serverio --upload (PUT and DELETE only; fsync on commit)",
        ),
        ServerSpec(
            "apache-dav",
            "apache",
            description="Apache httpd mod_dav_fs, mpm_event 1 child x 64 threads",
        ),
        ServerSpec(
            "wsgidav",
            "wsgidav",
            description="WsgiDAV 4 on cheroot, in-memory locks and properties",
        ),
        ServerSpec(
            "rclone-dav",
            "rclone",
            description="rclone serve webdav DIR (local backend), GOMAXPROCS=1",
        ),
    )
}

# Servers that take part in the PUT workloads only (no PROPFIND, no litmus).
PUT_ONLY = frozenset({"serverio-upload"})
