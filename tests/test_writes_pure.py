"""serverio.writes and serverio.dav's parsing and serialising are pure:
their modules import only the standard library's parsing, hashing and text
modules and serverio's pure helpers (no trio, no os, no socket, no
threads), transitively within serverio.  serverio.dav also holds the
WebDAV service (``--webdav``: the step, its methods, the properties and
plans it makes, the lock seam), which uses the pipeline, fs and
http.core like the uploads' service: :data:`DAV_SERVICE`, left out."""

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
SERVERIO_ALLOWED = frozenset(
    {
        "serverio.doorkeeper",
        "serverio.errors",
        "serverio.fs.names",
        "serverio.fs.winpath",
        "serverio.http.extra",
        "serverio.http.target",
    }
)


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


DAV_SERVICE = frozenset(
    f"serverio.dav.{m}"
    for m in ("answers", "common", "guard", "lockguard", "lockplans", "methods", "props", "service")
)
PURE = sorted(
    name
    for d in ("writes", "dav")
    for p in (PACKAGE / d).glob("*.py")
    if p.name != "__init__.py"
    and (name := ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)) not in DAV_SERVICE
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
    assert "serverio.dav.ifheader" in PURE and "serverio.dav.service" not in PURE
    assert "serverio.dav.locks" in PURE  # the lock table is pure; its guard is not
    assert "serverio.errors" in imports("serverio.writes.multipart")
