"""The transports assemble nothing: ``serverio.net`` imports no feature
package (issue 42 item 3).

Every import counts (module level, ``if TYPE_CHECKING:`` and
function-local: the project's import graph, tests/importgraph.py).  The
features (archives, WebDAV, live reload, the proxy, the site rules,
uploads, the write helpers) are plugged in by the composition root,
``serverio.app``; a transport reaches them only through the pipeline's
exchange and hooks.
"""

from __future__ import annotations

from pathlib import Path

import serverio

from .importgraph import build_graph

FEATURES = ("archive", "dav", "live", "proxy", "resumable", "site", "upload", "writes")
PACKAGE = Path(serverio.__file__).resolve().parent


def _feature_imports(package: str) -> list[str]:
    graph = build_graph(PACKAGE)
    prefixes = tuple(f"serverio.{name}" for name in FEATURES)
    return sorted(
        f"{src} -> {dst}"
        for src in graph.modules
        if src == f"serverio.{package}" or src.startswith(f"serverio.{package}.")
        for dst in graph.targets(src)
        if dst in prefixes or dst.startswith(tuple(p + "." for p in prefixes))
    )


def test_net_imports_no_feature_package() -> None:
    assert _feature_imports("net") == []


def test_the_composition_root_is_where_features_are_assembled() -> None:
    # The check above can fail: the composition root imports features.
    assert any(line.startswith("serverio.app.services -> ") for line in _feature_imports("app"))
