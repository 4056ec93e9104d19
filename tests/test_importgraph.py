"""The import-graph builder and cycle finder, on small synthetic package trees."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .importgraph import (
    FUNCTION_LOCAL,
    MODULE_LEVEL,
    TYPE_CHECKING_ONLY,
    ImportGraph,
    build_graph,
    example_cycle,
    find_cycles,
    format_cycles,
)


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> source) under ``root``; return the package dir."""
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / next(iter(files)).split("/")[0]


def test_type_checking_only_edge_closes_a_cycle(tmp_path: Path) -> None:
    pkg = tree(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import A\n",
            "pkg/a.py": "from . import b\nclass A: ...\n",
            "pkg/b.py": """\
                from __future__ import annotations
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from .a import A
            """,
            "pkg/c.py": "from .a import A\n",  # depends on the cycle, not part of it
        },
    )
    graph = build_graph(pkg)
    assert graph.edges["pkg.b"]["pkg.a"] == {TYPE_CHECKING_ONLY}
    assert graph.edges["pkg.a"]["pkg.b"] == {MODULE_LEVEL}
    assert find_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert example_cycle(graph, ["pkg.a", "pkg.b"]) == ["pkg.a", "pkg.b", "pkg.a"]
    text = format_cycles(graph, find_cycles(graph))
    assert "cycle among 2 modules: pkg.a, pkg.b" in text
    assert "for example: pkg.a -> pkg.b -> pkg.a" in text
    assert "pkg.a -> pkg.b  (module)" in text and "pkg.b -> pkg.a  (type-checking)" in text


def test_acyclic_tree_has_no_cycles(tmp_path: Path) -> None:
    pkg = tree(
        tmp_path,
        {
            "pkg/__init__.py": "from .top import run\n",
            "pkg/top.py": """\
                import os
                import pkg.mid
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from .low import Low
                def run() -> None:
                    from .low import helper
            """,
            "pkg/mid.py": "from pkg import low\nimport trio\n",
            "pkg/low.py": "import json\nclass Low: ...\ndef helper() -> None: ...\n",
        },
    )
    graph = build_graph(pkg)
    assert graph.targets("pkg.top") == {"pkg.mid", "pkg.low"}
    assert graph.edges["pkg.top"]["pkg.low"] == {TYPE_CHECKING_ONLY, FUNCTION_LOCAL}
    assert graph.targets("pkg.mid") == {"pkg.low"}  # third-party and stdlib left out
    assert graph.targets("pkg.low") == set()
    assert find_cycles(graph) == []


def test_function_local_import_closes_a_cycle(tmp_path: Path) -> None:
    pkg = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from .b import f\n",
            "pkg/b.py": "def f() -> None:\n    from .c import g\n",
            "pkg/c.py": "async def g() -> None:\n    import pkg.a\n",
        },
    )
    graph = build_graph(pkg)
    assert graph.edges["pkg.c"]["pkg.a"] == {FUNCTION_LOCAL}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert example_cycle(graph, ["pkg.a", "pkg.b", "pkg.c"]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


def test_relative_and_submodule_resolution(tmp_path: Path) -> None:
    pkg = tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core.py": "VALUE = 1\n",
            "pkg/http/__init__.py": "from .wire import encode\n",
            "pkg/http/wire.py": "def encode() -> None: ...\n",
            "pkg/http/ranges.py": "from ..core import VALUE\nfrom . import wire\n",
            "pkg/net/__init__.py": "",
            "pkg/net/server.py": """\
                from ..http import ranges, encode
                from pkg.http.wire import encode as again
                import pkg.core
            """,
            "pkg/net/conn.py": """\
                from .. import core
                from . import server
                from .. import VERSION
            """,
        },
    )
    graph = build_graph(pkg)
    # "from . import wire": the submodule; the enclosing package is not a
    # dependency (it is already being imported).
    assert graph.targets("pkg.http.ranges") == {"pkg.core", "pkg.http.wire"}
    # "from ..http import ranges, encode": the submodule ranges, and the
    # package pkg.http for encode (and for running its __init__).
    assert graph.targets("pkg.net.server") == {
        "pkg.http",
        "pkg.http.ranges",
        "pkg.http.wire",
        "pkg.core",
    }
    # "from .. import VERSION" names something in pkg/__init__: that counts.
    assert graph.targets("pkg.net.conn") == {"pkg.core", "pkg.net.server", "pkg"}
    assert graph.targets("pkg.http") == {"pkg.http.wire"}
    assert find_cycles(graph) == []


def test_importing_a_name_from_the_enclosing_package_init_is_a_cycle(tmp_path: Path) -> None:
    pkg = tree(
        tmp_path,
        {
            "pkg/__init__.py": "from .a import f\nVERSION = '1'\n",
            "pkg/a.py": "from . import VERSION\ndef f() -> None: ...\n",
        },
    )
    assert find_cycles(build_graph(pkg)) == [["pkg", "pkg.a"]]


def test_a_module_importing_itself_is_not_an_edge(tmp_path: Path) -> None:
    pkg = tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.a\nfrom . import a\n"})
    graph = build_graph(pkg)
    assert graph.targets("pkg.a") == set()
    assert find_cycles(graph) == []


def test_a_self_loop_in_a_graph_is_a_cycle() -> None:
    graph = ImportGraph(modules={"p", "p.a", "p.b"})
    graph.add("p.a", "p.a", MODULE_LEVEL)
    graph.add("p.b", "p.a", MODULE_LEVEL)
    assert find_cycles(graph) == [["p.a"]]
    assert example_cycle(graph, ["p.a"]) == ["p.a", "p.a"]


def test_relative_import_above_the_tree_is_ignored(tmp_path: Path) -> None:
    pkg = tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from ... import elsewhere\n"})
    assert build_graph(pkg).targets("pkg.a") == set()


@pytest.mark.parametrize("n", [2, 50])
def test_long_chain_closed_at_the_end(tmp_path: Path, n: int) -> None:
    files = {"pkg/__init__.py": ""}
    for i in range(n):
        files[f"pkg/m{i}.py"] = f"from . import m{(i + 1) % n}\n"
    files["pkg/tail.py"] = "from . import m0\n"
    graph = build_graph(tree(tmp_path, files))
    (cycle,) = find_cycles(graph)
    assert cycle == sorted(f"pkg.m{i}" for i in range(n))
    path = example_cycle(graph, cycle)
    assert len(path) == n + 1 and path[0] == path[-1] == "pkg.m0"


def test_imports_between_sibling_packages_are_edges(tmp_path: Path) -> None:
    first = tree(tmp_path, {"app/__init__.py": "", "app/core.py": "import tools.helpers\n"})
    second = tree(tmp_path, {"tools/__init__.py": "", "tools/helpers.py": "from app import core\n"})
    # Each package alone has no cycle: the other one's modules are not nodes.
    assert find_cycles(build_graph(first)) == []
    assert find_cycles(build_graph(second)) == []
    graph = build_graph(first, second)
    assert graph.edges["app.core"]["tools.helpers"] == {MODULE_LEVEL}
    assert find_cycles(graph) == [["app.core", "tools.helpers"]]
