"""The structure report: classes and functions of serverio/ over the size gates.

``python -m bench structure [PATH ...] [--check]`` reads every ``.py`` file
under PATH (default ``serverio/``) with ``ast`` and prints, with file:line,

* every class over 450 lines or over 20 attributes, and
* every function (methods and nested functions included) over 80 lines.

A class's lines run from its ``class`` line to its last line (decorators
excluded); a function's from its ``def`` line to its last line.  A class's
attributes are the union of

* its class-level fields: names assigned or annotated in the class body
  (dataclass fields, class constants, ``ClassVar`` s), dunders such as
  ``__slots__`` left out, and
* its instance attributes: ``self.x = ...``, ``self.x: T = ...``,
  ``self.x += ...``, ``(self.a, self.b) = ...``, ``for self.x in``,
  ``with ... as self.x``, in any method of the class or a function nested
  in one (``self`` being the method's first parameter; for a classmethod,
  ``cls.x = ...`` is a class-level field).

Methods and properties are not attributes; a nested class is reported on
its own and its attributes are not its outer class's.  The limits are the
gates of the transport rebuild (issue 26); ``--check`` exits 1 when
anything is over them.  The test suite holds the whole package to them
(tests/test_bench_structure.py runs ``--check`` over ``serverio/`` and
fails listing every finding, so CI's suite run does too).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLASS_LINES = 450
CLASS_ATTRIBUTES = 20
FUNCTION_LINES = 80

_Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Finding:
    """One class or function over a limit."""

    path: str
    line: int
    kind: str  # "class" or "function"
    name: str  # qualified within the module: Outer.method
    lines: int
    attributes: int | None = None  # classes only

    def describe(self) -> str:
        size = f"{self.lines} lines"
        if self.attributes is not None:
            size += f", {self.attributes} attributes"
        return f"{self.path}:{self.line}: {self.kind} {self.name}: {size}"


def _span(node: ast.AST) -> int:
    end = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
    return int(end) - int(node.lineno) + 1  # type: ignore[attr-defined]


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _target_names(target: ast.expr, owner: str) -> Iterator[str]:
    """Attribute names of ``owner`` (``self``) that an assignment target binds."""
    if isinstance(target, ast.Attribute):
        if isinstance(target.value, ast.Name) and target.value.id == owner:
            yield target.attr
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _target_names(elt, owner)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value, owner)


def _assigned_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    if isinstance(node, ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    if isinstance(node, ast.NamedExpr):
        return [node.target]
    return []


def _walk_function(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function body, nested functions included, nested
    classes left out (their ``self`` is another object)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        if isinstance(child, ast.ClassDef):
            continue
        yield child
        todo.extend(ast.iter_child_nodes(child))


def _first_parameter(fn: _Function) -> str | None:
    params = [*fn.args.posonlyargs, *fn.args.args]
    if not params:
        return None
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Name) and deco.id == "staticmethod":
            return None
    return params[0].arg


def class_attributes(cls: ast.ClassDef) -> set[str]:
    """Class-level fields plus instance attributes assigned on ``self``."""
    names: set[str] = set()
    for stmt in cls.body:
        for target in _assigned_targets(stmt):
            if isinstance(target, ast.Name) and not _is_dunder(target.id):
                names.add(target.id)
        if isinstance(stmt, _Function):
            owner = _first_parameter(stmt)
            if owner is None:
                continue
            for node in _walk_function(stmt):
                for target in _assigned_targets(node):
                    names.update(_target_names(target, owner))
    return names


def _scan(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, node) of every class and function, outermost first."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _scan(node, f"{name}.")
        else:
            yield from _scan(node, prefix)


def findings(
    source: str,
    path: str,
    class_lines: int = CLASS_LINES,
    class_attributes_limit: int = CLASS_ATTRIBUTES,
    function_lines: int = FUNCTION_LINES,
) -> list[Finding]:
    """What in ``source`` (the text of file ``path``) is over the limits."""
    out: list[Finding] = []
    for name, node in _scan(ast.parse(source, filename=path)):
        lines = _span(node)
        if isinstance(node, ast.ClassDef):
            attrs = len(class_attributes(node))
            if lines > class_lines or attrs > class_attributes_limit:
                out.append(Finding(path, node.lineno, "class", name, lines, attrs))
        elif lines > function_lines:
            assert isinstance(node, _Function)
            out.append(Finding(path, node.lineno, "function", name, lines))
    return out


def report(roots: list[Path], base: Path = REPO, **limits: int) -> list[Finding]:
    """Findings of every ``.py`` file under ``roots``, paths relative to ``base``."""
    out: list[Finding] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for file in files:
            try:
                shown = str(file.resolve().relative_to(base))
            except ValueError:
                shown = str(file)
            out += findings(file.read_text(encoding="utf-8"), shown, **limits)
    return out


def add_arguments(p: Any) -> None:
    p.add_argument("paths", nargs="*", type=Path, help="files or folders (default: serverio/)")
    p.add_argument("--class-lines", type=int, default=CLASS_LINES, metavar="N")
    p.add_argument("--class-attributes", type=int, default=CLASS_ATTRIBUTES, metavar="N")
    p.add_argument("--function-lines", type=int, default=FUNCTION_LINES, metavar="N")
    p.add_argument("--check", action="store_true", help="exit 1 if anything is over a limit")


def add_parser(sub: Any) -> None:
    add_arguments(
        sub.add_parser("structure", help="classes and functions over the size gates (file:line)")
    )


def run(args: argparse.Namespace) -> int:
    roots = args.paths or [REPO / "serverio"]
    missing = [str(p) for p in roots if not p.exists()]
    if missing:
        print(f"structure: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    found = report(
        roots,
        class_lines=args.class_lines,
        class_attributes_limit=args.class_attributes,
        function_lines=args.function_lines,
    )
    classes = [f for f in found if f.kind == "class"]
    functions = [f for f in found if f.kind == "function"]
    print(
        f"classes over {args.class_lines} lines or {args.class_attributes} attributes: "
        f"{len(classes)}"
    )
    for f in classes:
        print(f"  {f.describe()}")
    print(f"functions over {args.function_lines} lines: {len(functions)}")
    for f in functions:
        print(f"  {f.describe()}")
    return 1 if args.check and found else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))


if __name__ == "__main__":
    main()
