"""The warm 1 KiB GET of ``bench/pair.py`` under a site-rules configuration
given by name, for any tree (``python -m bench.rulespair MODE -n N`` from the
tree's root): ``plain`` (no rule), ``auth`` (an ``[[auth]]`` rule over
``/incoming/**``, the file public: what a public site with a protected area
was before ``[[access]]``), ``access`` (``--allow 'anonymous:read,list@/'
--allow 'alice:upload,overwrite@/incoming'``: the same site with rights
rules).  The tree's own ``pair.py`` runs it; only its ``Config.of`` is
given the settings, so an older tree is measured on its own code (used by
``bench callgrind``'s measurement of issue 44's target: the two configurations
on two commits, the same instructions counted).

Two modes are a signed-in browser's GET of the same file (a tree with the
sign-in page only): ``cookie`` (an ``[[auth]]`` rule over the whole site,
a valid session cookie) and ``cookie-access`` (``--allow
'alice:read,list@/'``: reads for alice only, the same cookie); compare them
with ``plain`` or ``auth`` on a tree from before sessions.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["MODES", "main", "settings"]

MODES = ("plain", "auth", "access", "cookie", "cookie-access")


def settings(mode: str, users: Path) -> dict[str, Any]:
    """The Config settings of ``mode`` (``users``: a users file to write)."""
    if mode == "plain":
        return {}
    from serverio.site.passwords import hash_password

    users.write_text(f"alice:{hash_password('bench-password', 1000)}\n")
    if mode == "auth":
        return {"auth": (("/incoming/**", str(users)),)}
    if mode.startswith("cookie"):
        secret = users.with_name("secret")
        secret.write_bytes(b"k" * 32)
        signed: dict[str, Any] = {"secret_file": str(secret)}
        if mode == "cookie":
            return {**signed, "auth": (("/**", str(users)),)}
        return {**signed, "auth_file": str(users), "allow": ("alice:read,list@/",)}
    return {
        "auth_file": str(users),
        "allow": ("anonymous:read,list@/", "alice:upload,overwrite@/incoming"),
    }


def session_request(users: Path) -> bytes:
    """pair.py's GET with alice's session cookie (signed with the secret
    :func:`settings` wrote beside ``users``, bound to her hash there)."""
    from serverio.signing import Signer
    from serverio.site.principal import password_tag

    stored = users.read_text().split(":", 1)[1].strip()
    token = Signer(b"k" * 32).sign("session", ("alice", password_tag(stored)), 2**40)
    return (
        b"GET /1k.bin HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\n"
        b"Cookie: serverio-session=" + token.encode("ascii") + b"\r\n\r\n"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=MODES)
    p.add_argument("-n", type=int, default=20000)
    args = p.parse_args()
    sys.path.insert(0, os.getcwd())
    import trio

    from bench import pair
    from serverio import Config

    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as other:
        extra = settings(args.mode, Path(other) / "users")
        real = Config.of

        def of(**kw: Any) -> Config:
            return real(**{**kw, **extra})

        Config.of = of  # type: ignore[method-assign]  # the class pair.py builds with
        if args.mode.startswith("cookie"):
            pair.REQUEST = session_request(Path(other) / "users")  # the signed-in browser's
        root = Path(tmp)
        (root / "1k.bin").write_bytes(bytes(range(256)) * 4)
        time.sleep(2.1)  # settled files only are cached (bench/pair.py)
        pair.freeze_wall_clock()
        us = trio.run(pair.run, "serverio", args.n, root)
    print(f"serverio ({args.mode}): {us:.1f} us per request (client and server, one process)")


if __name__ == "__main__":
    main()
