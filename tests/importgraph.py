"""The import graph of a package tree, read with ``ast``, and its cycles.

Every import counts: module level, under ``if TYPE_CHECKING:``, and inside
functions.  A ``TYPE_CHECKING`` or function-local import does not fail at
import time, but it is still a dependency between the two modules, and a
cycle of dependencies means neither module can be understood (or moved to
another layer) without the other.

Resolution follows the import system:

* a relative import is resolved against the importing module's package
  (``from . import x``, ``from ..pkg import y``);
* ``from pkg import name`` depends on ``pkg.name`` when that is a module of
  the tree, else on ``pkg`` itself (a name its ``__init__`` defines);
* importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``: those
  packages are dependencies too, except the ones that contain the importing
  module (they are necessarily being imported already).

Only modules of the trees given are nodes; the standard library and third-party
imports are left out.  Import statements only: ``importlib.import_module``
and ``__import__`` calls are not followed.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ImportGraph",
    "build_graph",
    "example_cycle",
    "find_cycles",
    "format_cycles",
    "package_graph",
    "package_of",
]

# How an import statement is reached in its module.
MODULE_LEVEL = "module"
TYPE_CHECKING_ONLY = "type-checking"
FUNCTION_LOCAL = "function"


@dataclass
class ImportGraph:
    """Modules (dotted names) and, per edge, how the import is reached."""

    modules: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    edges: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    def add(self, src: str, dst: str, kind: str) -> None:
        self.edges.setdefault(src, {}).setdefault(dst, set()).add(kind)

    def targets(self, src: str) -> set[str]:
        return set(self.edges.get(src, {}))


def _module_names(root: Path) -> dict[str, Path]:
    """Dotted name of every ``.py`` file of the package at ``root``."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        if all(p.isidentifier() for p in parts):
            names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _ancestors(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class _Collector(ast.NodeVisitor):
    def __init__(self, graph: ImportGraph, module: str, is_package: bool) -> None:
        self.graph = graph
        self.module = module
        # The package relative imports start from.
        self.package = module if is_package else module.rpartition(".")[0]
        # Packages that contain this module: already importing when it runs.
        self.enclosing = {*_ancestors(module), module} if is_package else set(_ancestors(module))
        self.kinds = [MODULE_LEVEL]

    def _depend(self, target: str) -> None:
        graph = self.graph
        if target not in graph.modules:
            return
        kind = self.kinds[-1]
        for pkg in _ancestors(target):
            if pkg in graph.modules and pkg not in self.enclosing and pkg != self.module:
                graph.add(self.module, pkg, kind)
        if target != self.module:
            graph.add(self.module, target, kind)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._depend(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base_parts = self.package.split(".") if self.package else []
            up = node.level - 1
            if up > len(base_parts):
                return  # beyond the top of the tree: not ours
            base = ".".join(base_parts[: len(base_parts) - up])
            source = f"{base}.{node.module}" if node.module and base else node.module or base
        else:
            source = node.module or ""
        if not source:
            return
        for alias in node.names:
            sub = f"{source}.{alias.name}"
            if alias.name != "*" and sub in self.graph.modules:
                # ``from pkg import sub``: runs pkg/__init__, then sub.
                if source not in self.enclosing and source != self.module:
                    self._depend(source)
                self._depend(sub)
            else:
                self._depend(source)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.visit(node.test)
            self.kinds.append(TYPE_CHECKING_ONLY)
            for stmt in node.body:
                self.visit(stmt)
            self.kinds.pop()
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # Inside a TYPE_CHECKING block a function is still type-checking only.
        outer = self.kinds[-1]
        self.kinds.append(outer if outer == TYPE_CHECKING_ONLY else FUNCTION_LOCAL)
        self.generic_visit(node)
        self.kinds.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function


def build_graph(*package_dirs: Path) -> ImportGraph:
    """The import graph of the packages whose directories are ``package_dirs``
    (sibling top-level packages, e.g. a repository's): imports between them
    are edges like any other."""
    names: dict[str, Path] = {}
    for package_dir in package_dirs:
        names.update(_module_names(package_dir))
    graph = ImportGraph(modules=set(names))
    graph.packages = {n for n, p in names.items() if p.name == "__init__.py"}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        _Collector(graph, name, name in graph.packages).visit(tree)
    return graph


def package_of(module: str, root: str) -> str:
    """The package ``module`` belongs to: its first component under ``root``
    (``serverio.http.core`` -> ``http``; a top-level module is its own
    package, ``serverio.model`` -> ``model``); ``root`` itself for the
    root package's ``__init__``."""
    parts = module.split(".")
    if parts[0] != root:
        raise ValueError(f"{module} is not under {root}")
    return parts[1] if len(parts) > 1 else root


def package_graph(
    graph: ImportGraph, root: str
) -> tuple[ImportGraph, dict[tuple[str, str], list[str]]]:
    """``graph`` (of the tree ``root``) with each module replaced by its
    package (:func:`package_of`): an edge between two packages for every
    import between their modules, with the kinds of those imports.  Also,
    per package edge, the module imports that make it (``"a.b -> c.d"``),
    sorted: what must move to remove it."""
    out = ImportGraph(modules={package_of(m, root) for m in graph.modules})
    out.packages = set(out.modules)
    why: dict[tuple[str, str], list[str]] = {}
    for src, targets in graph.edges.items():
        a = package_of(src, root)
        for dst, kinds in targets.items():
            b = package_of(dst, root)
            if a == b:
                continue
            for kind in kinds:
                out.add(a, b, kind)
            why.setdefault((a, b), []).append(f"{src} -> {dst}")
    for imports in why.values():
        imports.sort()
    return out, why


def find_cycles(graph: ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module, or with a
    module that imports itself: each sorted, the list sorted.  (Tarjan's
    algorithm, iterative.)"""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.targets(start)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.targets(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.targets(node):
                    out.append(sorted(component))
    return sorted(out)


def example_cycle(graph: ImportGraph, component: list[str]) -> list[str]:
    """One shortest cycle through the first module of ``component`` (which
    :func:`find_cycles` returned), as a path that ends where it starts."""
    start = component[0]
    members = set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.targets(node) & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise ValueError(f"no cycle through {start}")


def format_cycles(graph: ImportGraph, cycles: list[list[str]]) -> str:
    """One paragraph per cycle: its members, one example path, and every
    import among its members, each with its kind (module, type-checking,
    function): what must change to break it."""
    lines = []
    for component in cycles:
        members = set(component)
        lines.append(f"cycle among {len(component)} modules: {', '.join(component)}")
        path = example_cycle(graph, component)
        lines.append("  for example: " + " -> ".join(path))
        lines.append("  imports among them:")
        for src in component:
            for dst in sorted(graph.targets(src) & members):
                kinds = ", ".join(sorted(graph.edges[src][dst]))
                lines.append(f"    {src} -> {dst}  ({kinds})")
    return "\n".join(lines)
