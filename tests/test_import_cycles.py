"""serverio's modules import each other without cycles, counting every import
(module level, ``if TYPE_CHECKING:`` and function-local)."""

from __future__ import annotations

from pathlib import Path

import serverio

from .importgraph import build_graph, find_cycles, format_cycles


def test_serverio_has_no_import_cycles() -> None:
    graph = build_graph(Path(serverio.__file__).resolve().parent)
    assert len(graph.modules) > 1
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + format_cycles(graph, cycles)
