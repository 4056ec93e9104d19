"""serverio's packages import each other without cycles, and in the order
docs/architecture.md's layer table gives (issue 42, item 4).

A package is the first component under ``serverio.`` (``serverio.http.core``
is in ``http``); a top-level module (``config.py``, ``errors.py``) is a
package of its own, and so is ``serverio/__init__.py`` (the public names).
Every import counts, as in tests/test_import_cycles.py (module level,
``if TYPE_CHECKING:``, function-local): a cycle of packages is a pair of
layers neither of which can be read, tested or moved without the other,
even when no two modules import each other.

The layer table of docs/architecture.md ("The layers") lists the packages
from the bottom up; its first column names them (`serverio/http/`,
`serverio/config.py`).  It must name every package and nothing else, and
each package may import only the packages listed before it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import serverio

from .importgraph import ImportGraph, build_graph, find_cycles, format_cycles, package_graph

PACKAGE = Path(serverio.__file__).resolve().parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
TABLE_HEADING = "## The layers"

_CELL_PATH = re.compile(r"`serverio/([A-Za-z_][A-Za-z0-9_]*)(/|\.py)`")


def serverio_packages() -> tuple[ImportGraph, dict[tuple[str, str], list[str]]]:
    return package_graph(build_graph(PACKAGE), "serverio")


def layer_order(markdown: str) -> list[str]:
    """The packages the first table under :data:`TABLE_HEADING` names in its
    first column, in order (``serverio/__init__.py`` is ``serverio``)."""
    _, found, rest = markdown.partition(TABLE_HEADING + "\n")
    assert found, f"no {TABLE_HEADING!r} section"
    rows: list[str] = []
    for line in rest.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break  # the end of the first table
    assert len(rows) > 2, "no layer table"
    order: list[str] = []
    for row in rows[2:]:  # past the header and its |---| line
        cell = row.split("|")[1]
        names = ["serverio" if name == "__init__" else name for name, _ in _CELL_PATH.findall(cell)]
        assert names, f"a layer row names no package: {row[:80]}"
        order += names
    return order


def layer_problems(
    order: list[str], packages: ImportGraph, why: dict[tuple[str, str], list[str]]
) -> list[str]:
    """What is wrong with ``order`` for the package graph: names that are no
    package, packages it leaves out or names twice, and every import that
    points at a package listed later (or at none: it must point down)."""
    problems = [
        f"the table names {n!r}, which is no package" for n in order if n not in packages.modules
    ]
    problems += [f"the table leaves out {n!r}" for n in sorted(packages.modules - set(order))]
    problems += [
        f"the table names {n!r} twice" for n in sorted({n for n in order if order.count(n) > 1})
    ]
    rank = {name: i for i, name in enumerate(order)}
    for src in sorted(packages.modules & set(rank)):
        for dst in sorted(packages.targets(src) & set(rank)):
            if rank[dst] >= rank[src]:
                problems.append(
                    f"{src} (row {rank[src]}) imports {dst} (row {rank[dst]}), listed after it: "
                    + "; ".join(why[(src, dst)][:3])
                )
    return problems


def test_serverio_has_no_package_cycles() -> None:
    packages, why = serverio_packages()
    assert {"http", "model", "config", "net", "pipeline", "serverio"} <= packages.modules
    cycles = find_cycles(packages)
    detail = [
        f"  {a} -> {b}: " + "; ".join(why[(a, b)][:4])
        for component in cycles
        for a in component
        for b in sorted(packages.targets(a) & set(component))
    ]
    assert not cycles, (
        "package cycles:\n" + format_cycles(packages, cycles) + "\n" + "\n".join(detail)
    )


def test_the_layer_table_names_the_packages_in_an_order_the_imports_obey() -> None:
    packages, why = serverio_packages()
    order = layer_order(ARCHITECTURE.read_text(encoding="utf-8"))
    problems = layer_problems(order, packages, why)
    assert not problems, "docs/architecture.md's layer table:\n" + "\n".join(problems)


def test_nothing_inside_serverio_imports_its_public_names() -> None:
    # serverio/__init__.py re-exports from every layer: the top of the table.
    packages, _ = serverio_packages()
    assert not [p for p in packages.modules if "serverio" in packages.targets(p)]


# ------------------------------------------------ the checks themselves


def _graph(edges: dict[str, set[str]]) -> tuple[ImportGraph, dict[tuple[str, str], list[str]]]:
    graph = ImportGraph(modules=set(edges) | {d for ds in edges.values() for d in ds})
    why: dict[tuple[str, str], list[str]] = {}
    for src, dsts in edges.items():
        for dst in dsts:
            graph.add(src, dst, "module")
            why[(src, dst)] = [f"serverio.{src}.a -> serverio.{dst}.b"]
    return graph, why


TABLE = """\
# x

## The layers

| folder | layer |
|---|---|
| `serverio/errors.py`, `serverio/config.py` | foundation |
| `serverio/http/` | pure |
| `serverio/net/` | transport |

## Next
| `serverio/ops/` | not this table |
"""


def test_layer_order_reads_the_first_column_of_the_first_table() -> None:
    assert layer_order(TABLE) == ["errors", "config", "http", "net"]
    assert layer_order(TABLE.replace("`serverio/net/`", "`serverio/__init__.py`"))[-1] == "serverio"


def test_layer_problems_finds_an_upward_import_a_missing_and_a_stale_name() -> None:
    graph, why = _graph({"config": {"errors"}, "http": {"config"}, "net": {"http"}})
    assert layer_problems(["errors", "config", "http", "net"], graph, why) == []
    upward = layer_problems(["errors", "http", "config", "net"], graph, why)
    assert upward == [
        "http (row 1) imports config (row 2), listed after it: serverio.http.a -> serverio.config.b"
    ]
    stale = layer_problems(["errors", "config", "http", "pipeline.site", "net"], graph, why)
    assert stale == ["the table names 'pipeline.site', which is no package"]
    assert layer_problems(["errors", "config", "net"], graph, why) == [
        "the table leaves out 'http'"
    ]


def test_package_graph_sees_a_cycle_no_module_cycle_shows(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/x.py": "from ..b import y\n",
        "pkg/a/z.py": "",
        "pkg/b/__init__.py": "",
        "pkg/b/y.py": "",
        "pkg/b/w.py": "def f() -> None:\n    from ..a import z\n",
        "pkg/top.py": "from .a import x\n",
    }
    for rel, source in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    graph = build_graph(tmp_path / "pkg")
    assert find_cycles(graph) == []
    packages, why = package_graph(graph, "pkg")
    assert packages.modules == {"pkg", "a", "b", "top"}
    assert find_cycles(packages) == [["a", "b"]]
    assert why[("b", "a")] == ["pkg.b.w -> pkg.a", "pkg.b.w -> pkg.a.z"]
    assert packages.edges["b"]["a"] == {"function"}


def test_fs_takes_facts_not_requests_and_renders_no_html() -> None:
    # The blocking layer is handed what to open (serverio.http.select.Lookup),
    # never a request, and renders nothing: a listing's page and a README's
    # HTML are http/'s (run in the work pool by the pipeline).
    rendering = {"serverio.http.errorpage", "serverio.http.plans"}
    for path in sorted((PACKAGE / "fs").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = {a.name for a in node.names}
                module = node.module or ""
                assert "RequestFacts" not in names, f"fs/{path.name} imports RequestFacts"
                assert not any(n.startswith("render") for n in names), f"fs/{path.name}: {names}"
                assert f"serverio.{module.lstrip('.')}" not in rendering, f"fs/{path.name}"
            elif isinstance(node, ast.Import):
                assert "html" not in {a.name for a in node.names}, f"fs/{path.name} imports html"
            elif isinstance(node, ast.Name):
                assert node.id != "RequestFacts", f"fs/{path.name} names RequestFacts"
