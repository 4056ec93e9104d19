"""serverio.writes and serverio.dav are pure: their modules import only the
standard library's parsing, hashing and text modules and serverio's pure
helpers (no trio, no os, no socket, no threads), transitively within
serverio."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import serverio

PACKAGE = Path(serverio.__file__).resolve().parent

STDLIB_ALLOWED = frozenset(
    {
        "__future__",
        "base64",
        "binascii",
        "collections.abc",
        "dataclasses",
        "enum",
        "errno",
        "functools",
        "hashlib",
        "hmac",
        "http",
        "re",
        "typing",
        "unicodedata",
        "urllib.parse",
        "xml.parsers",
        "xml.parsers.expat",
    }
)
# serverio modules the pure packages may use, themselves pure (checked too).
SERVERIO_ALLOWED = frozenset({"serverio.errors", "serverio.fs.winpath", "serverio.http.target"})


def imports(module: str) -> set[str]:
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            else:
                assert node.module is not None
                found.add(node.module)
    return found


# The WebDAV service and its plan-making parts are edges, not pure parts:
# they build serverio.http.core plans, run in the pool or take a trio
# await (the service, its methods, the lock guard over the pure lock
# table serverio.dav.locks).  Every other module of both packages is pure.
EDGES = frozenset(
    {
        "serverio.dav.answers",
        "serverio.dav.common",
        "serverio.dav.guard",
        "serverio.dav.lockguard",
        "serverio.dav.lockplans",
        "serverio.dav.methods",
        "serverio.dav.props",
        "serverio.dav.service",
    }
)
PURE = sorted(
    name
    for d in ("writes", "dav")
    for p in (PACKAGE / d).glob("*.py")
    if p.name != "__init__.py"
    and (name := ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)) not in EDGES
)


@pytest.mark.parametrize("module", [*PURE, *sorted(SERVERIO_ALLOWED)])
def test_pure_modules_import_only_pure_modules(module: str) -> None:
    for name in imports(module):
        if name.startswith("serverio"):
            assert name in SERVERIO_ALLOWED or name in PURE, f"{module} imports {name}"
        else:
            assert name in STDLIB_ALLOWED, f"{module} imports {name}"


def test_the_check_sees_the_modules() -> None:
    assert "serverio.writes.multipart" in PURE and "serverio.dav.xml" in PURE
    assert "serverio.dav.locks" in PURE and "serverio.dav.ifheader" in PURE
    assert "serverio.errors" in imports("serverio.writes.multipart")
