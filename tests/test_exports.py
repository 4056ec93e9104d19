"""serverio's public surface, pinned; every other module's ``__all__`` checked.

As trio's ``test_exports.py`` pins what its docs present as API, the
table :data:`PUBLIC` pins the ``__all__`` of what serverio's docs present:
the top-level ``serverio`` namespace, the trio primitives of
``serverio.concurrency``, the configuration objects (``serverio.config``)
and ``serverio.errors``; :data:`TESTKIT` the names the test kit's users
import.  An internal module moves or changes its exports with no edit here.
The tests check that

* every module of the package but a package ``__init__`` and
  ``__main__`` has an ``__all__``, a literal assigned once without
  repeats, whose names exist in the module and none is private (``_x``);
* each pinned module's ``__all__`` lists exactly the table's names (the
  failure prints the row to paste), and every module of a public package
  (``serverio.concurrency``) is pinned;
* the top-level ``serverio`` namespace holds exactly ``__all__`` (no other
  public name, submodules aside), and that set is the one
  docs/architecture.md lists under "Public names";
* every pinned name of the test kit exists.

``__all__`` is read from the source (ast), so ``serverio.__main__`` (which
runs the CLI when imported) is checked without importing it.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

import serverio

PACKAGE = Path(serverio.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

TOP_LEVEL: tuple[str, ...] = (
    "AccessLog",
    "AccessRecord",
    "Config",
    "ConfigError",
    "ConnectionEnv",
    "ConnectionTask",
    "FileFacts",
    "FileSpan",
    "HTTPError",
    "Handler",
    "Plan",
    "Pool",
    "PoolSaturated",
    "PoolStats",
    "Prepared",
    "RequestFacts",
    "Server",
    "Stats",
    "Target",
    "decide_directory",
    "decide_file",
    "error_plan",
    "evaluate_preconditions",
    "guess_type",
    "main",
    "parse_range",
    "parse_target",
    "prepare",
    "route",
    "run_blocking",
)

# The surface the docs present as API, pinned: module -> the names of its
# __all__ (sorted; compared as sets).  The top level (docs/architecture.md
# "Public names"), the trio primitives of serverio.concurrency (every
# module of the package: docs/architecture.md's layer table,
# docs/cancellation.md "The blocking pools"), the configuration objects
# (serverio.config: Config and its policies, docs/architecture.md) and the
# errors they raise.  Any other module's __all__ is checked, not pinned.
PUBLIC: dict[str, tuple[str, ...] | None] = {
    "serverio": TOP_LEVEL,
    "serverio.concurrency": None,
    "serverio.concurrency.blocking": ("Pool", "PoolSaturated", "PoolStats", "run_blocking"),
    "serverio.concurrency.broadcast": (
        "Broadcast",
        "CREATED",
        "Debouncer",
        "GONE",
        "MODIFIED",
        "StreamSlots",
        "Subscriber",
    ),
    "serverio.concurrency.flight": ("FlightStats", "SingleFlightCache"),
    "serverio.config": (
        "ACCESS_LOG_FORMATS",
        "ACTIVE_MODES",
        "Config",
        "ConnectionPolicy",
        "ContentPolicy",
        "Declared",
        "ETAG_MODES",
        "FIELD_GROUP",
        "FilesPolicy",
        "H2Policy",
        "LOG_LEVELS",
        "ListenPolicy",
        "LogPolicy",
        "ON_DUPLICATE",
        "POLICIES",
        "Policy",
        "PoolPolicy",
        "ProxyPolicy",
        "ProxyRoute",
        "ResumablePolicy",
        "SETTING",
        "SitePolicy",
        "TlsPolicy",
        "UploadPolicy",
        "UsersPolicy",
        "WatchPolicy",
        "check_declared",
        "declared",
        "field_path",
        "hide_glob_ok",
        "listener_http2",
        "normal_route",
        "parse_host_port",
        "parse_listen",
        "parse_networks",
        "parse_proxy_spec",
        "parse_upstream",
        "proxy_route",
        "setting",
        "wants_site_rules",
    ),
    "serverio.errors": ("ConfigError", "HTTPError", "Problem", "reason_phrase"),
}

# Packages whose every module is public (a new module there is pinned too).
PUBLIC_PACKAGES = ("serverio.concurrency",)

# The test kit (testkit/, beside the package, not installed): the names its
# users import (the suite, and bench/'s stress scenarios by name; the
# modules docs/reliability.md and docs/deployment.md present).  It has no
# __all__; a pinned name must exist (renaming or removing one is a change
# of the kit's interface), any other may be added freely.
TESTKIT: dict[str, tuple[str, ...]] = {
    "testkit.fasthead_diff": ("HEAD_LIMITS", "check", "check_split", "near_valid", "run"),
    "testkit.fusefs": (
        "SlowFS",
        "SlowFSError",
        "fuse_available",
        "is_mounted",
        "slowfs",
        "slowfs_in",
    ),
    "testkit.fuzzing": (
        "Case",
        "CaseFailure",
        "fuzz",
        "fuzz_sync",
        "make_case",
        "make_env",
        "run_case",
    ),
    "testkit.reliability": (
        "FULL",
        "HOST",
        "MiB",
        "Reply",
        "ServerProcess",
        "flood",
        "fsstall",
        "get",
        "nonreaders",
        "nonreaders_buffered",
        "shutdown",
        "slowhttptest",
        "slowloris",
        "truncation",
    ),
    "testkit.simulation": (
        "ACTIVE",
        "FDS_REFUSAL",
        "REAL_WINDOWS",
        "UNIX_WITHOUT_LINUX_EXTRAS",
        "WINDOWS_SHAPED",
        "measuring_proc",
        "open_fd_count",
        "status_kib",
        "stop_gracefully",
        "windows_refuses_fds",
        "windows_refuses_workers",
    ),
}

# Importing this module runs the command line.
NOT_IMPORTED = {"serverio.__main__"}


def module_files() -> dict[str, Path]:
    """Dotted name -> source file of every module of the serverio package."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def static_all(path: Path) -> list[str] | None:
    """The module's ``__all__`` as written (a literal list or tuple of strings)."""
    found: list[str] | None = None
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        assert isinstance(node, ast.Assign) and found is None, (
            f"{path.name}: __all__ must be assigned once, as a literal"
        )
        value = ast.literal_eval(node.value)
        assert isinstance(value, (list, tuple)), f"{path.name}: __all__ is not a list"
        assert all(isinstance(v, str) for v in value)
        found = list(value)
    return found


def row(module: str, names: list[str] | None) -> str:
    """The table row for ``module`` exporting ``names``."""
    if names is None:
        return f'    "{module}": None,'
    body = ", ".join(f'"{n}"' for n in sorted(names))
    return f'    "{module}": ({body}{"," if len(names) == 1 else ""}),'


def _is_package_init(module: str) -> bool:
    return module_files()[module].name == "__init__.py"


@pytest.mark.parametrize("module", sorted(module_files()))
def test_every_module_has_an_all_whose_names_exist(module: str) -> None:
    names = static_all(module_files()[module])
    if names is None:
        # A package's __init__ re-exports nothing (serverio's own aside);
        # __main__ runs the command line.
        assert module in NOT_IMPORTED or (_is_package_init(module) and module != "serverio"), (
            f"{module} has no __all__"
        )
        return
    assert len(names) == len(set(names)), f"{module}: __all__ repeats a name"
    private = [n for n in names if n.startswith("_")]
    assert not private, f"{module} exports private names: {private}"
    if module in NOT_IMPORTED:
        return
    mod = importlib.import_module(module)
    absent = [n for n in names if not hasattr(mod, n)]
    assert not absent, f"{module}.__all__ names what it does not define: {absent}"


def test_the_pinned_modules_exist_and_public_packages_are_pinned_whole() -> None:
    found = set(module_files())
    stale = sorted(set(PUBLIC) - found)
    assert not stale, f"remove rows for {stale}"
    public = {m for m in found for pkg in PUBLIC_PACKAGES if m == pkg or m.startswith(pkg + ".")}
    missing = sorted(public - set(PUBLIC))
    assert not missing, f"add rows for {missing}"


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_the_public_all_is_exactly_the_pinned_names(module: str) -> None:
    names = static_all(module_files()[module])
    pinned = PUBLIC[module]
    got = None if names is None else sorted(names)
    want = None if pinned is None else sorted(pinned)
    assert got == want, f"{module}'s exports changed; the row is now:\n{row(module, names)}"


@pytest.mark.parametrize("module", sorted(TESTKIT))
def test_the_test_kits_pinned_names_exist(module: str) -> None:
    mod = importlib.import_module(module)
    absent = [n for n in TESTKIT[module] if not hasattr(mod, n)]
    assert not absent, f"{module} no longer defines {absent} (the test kit's interface)"


def test_top_level_namespace_is_exactly_all() -> None:
    assert PUBLIC["serverio"] == TOP_LEVEL
    # The names are imported on first use (PEP 562, serverio/__init__.py):
    # fetch each, so that what the namespace holds does not depend on which
    # tests ran before in this process (a lone worker of `-n 2` saw only
    # some of them); then nothing but __all__ may be there.
    for name in serverio.__all__:
        getattr(serverio, name)
    assert set(serverio.__all__) <= set(dir(serverio))
    public = {
        name
        for name, value in vars(serverio).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(serverio.__all__) == set(TOP_LEVEL)
    assert isinstance(serverio.__version__, str)


def documented_names(text: str) -> set[str]:
    """The backquoted names of the "Public names" paragraph of architecture.md."""
    m = re.search(r"^Public names \(`serverio\.__all__`\):(.*?)(?:\n\n|\Z)", text, re.M | re.S)
    assert m is not None, "docs/architecture.md has no 'Public names (`serverio.__all__`):'"
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", m[1]))
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def test_top_level_names_are_the_documented_set() -> None:
    assert documented_names(ARCHITECTURE.read_text(encoding="utf-8")) == set(serverio.__all__)


def test_a_changed_export_fails_with_the_row_to_paste(tmp_path: Path) -> None:
    # The table check itself: a module whose __all__ differs from its row.
    path = tmp_path / "m.py"
    path.write_text('__all__ = ["b", "a"]\n')
    assert static_all(path) == ["b", "a"]
    assert row("serverio.m", static_all(path)) == '    "serverio.m": ("a", "b"),'
    path.write_text("__all__ = ['a']\n__all__ += ['b']\n")
    with pytest.raises(AssertionError, match="assigned once"):
        static_all(path)
    text = "x\n\nPublic names (`serverio.__all__`): `A`,\n`b`; `__version__`.\n\n`z`"
    assert documented_names(text) == {"A", "b"}
