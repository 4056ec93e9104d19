"""The repository's modules import each other without cycles, counting every
import (module level, ``if TYPE_CHECKING:`` and function-local).

serverio alone, and the whole repository: every top-level package (a
directory of the repository root with an ``__init__.py``: serverio, bench,
testkit, tests), in one graph, so that imports between them count too.
"""

from __future__ import annotations

from pathlib import Path

import serverio

from .importgraph import build_graph, find_cycles, format_cycles

REPO = Path(__file__).resolve().parent.parent


def repository_packages(root: Path = REPO) -> list[Path]:
    """Every top-level package of the repository at ``root``."""
    return sorted(p.parent for p in root.glob("*/__init__.py") if p.parent.name.isidentifier())


def test_serverio_has_no_import_cycles() -> None:
    graph = build_graph(Path(serverio.__file__).resolve().parent)
    assert len(graph.modules) > 1
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + format_cycles(graph, cycles)


def test_the_repository_has_no_import_cycles() -> None:
    packages = repository_packages()
    assert {"serverio", "bench", "testkit", "tests"} <= {p.name for p in packages}
    graph = build_graph(*packages)
    # Edges between the packages are in the graph (bench drives serverio).
    assert "serverio" in graph.targets("bench.pair")
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + format_cycles(graph, cycles)
