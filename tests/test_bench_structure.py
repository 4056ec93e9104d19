"""bench.structure, the size-gate report, on small synthetic sources."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from bench import cli, structure


def _bench(*argv: str) -> int:
    return cli.dispatch(cli.build_parser().parse_args(argv))


def class_with_fields(name: str, n: int) -> str:
    """A dataclass of ``n`` fields and a method that assigns none."""
    fields = "".join(f"    f{i}: int = 0\n" for i in range(n))
    return f"@dataclass\nclass {name}:\n{fields}    def m(self) -> int:\n        return 1\n"


def attributes_of(source: str) -> set[str]:
    cls = next(n for n in textwrap.dedent(source).splitlines() if n.startswith("class "))
    tree = ast.parse(textwrap.dedent(source))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    assert cls.startswith(f"class {node.name}")
    return structure.class_attributes(node)


def test_a_class_with_21_attributes_is_reported_20_is_not() -> None:
    source = class_with_fields("Twenty", 20) + "\n" + class_with_fields("TwentyOne", 21)
    found = structure.findings(source, "m.py")
    assert [(f.name, f.attributes) for f in found] == [("TwentyOne", 21)]
    assert found[0].describe() == f"m.py:{found[0].line}: class TwentyOne: 24 lines, 21 attributes"


def test_instance_attributes_on_self_count_with_class_fields_once_each() -> None:
    source = """\
        class C:
            __slots__ = ("a",)
            limit = 3
            shared: int
            def __init__(self, x: int) -> None:
                self.a = x
                self.b: int = 0
                self.c, (self.d, *self.e) = 1, (2, 3)
                self.limit = 4  # also a class field: counted once
                self.a += 1
                other = object()
                other.z = 1  # not self
                def later() -> None:
                    self.f = 1  # a closure over self
                class Inner:
                    def __init__(self) -> None:
                        self.not_c = 1
            def run(me) -> None:
                me.g = 1
                for me.h in range(2):
                    pass
                with open("x") as me.i:
                    pass
            @staticmethod
            def s(self) -> None:
                self.not_an_attribute = 1
            @classmethod
            def k(cls) -> None:
                cls.j = 1
            @property
            def p(self) -> int:
                return 1
    """
    assert attributes_of(source) == set("abcdefghij") | {"limit", "shared"}


def test_line_limits_are_exclusive() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(78))
    at_80 = f"def at_limit() -> None:\n    '''doc'''\n{body}"  # 80 lines
    over = f"def over() -> None:\n    '''doc'''\n{body}    x = 1\n"  # 81 lines
    found = structure.findings(at_80 + "\n" + over, "f.py")
    assert [(f.kind, f.name, f.lines) for f in found] == [("function", "over", 81)]
    methods = "".join(f"    def m{i}(self) -> None:\n        pass\n" for i in range(224))
    cls_450 = f"class Big:\n    '''doc'''\n{methods}"  # 2 + 448 lines
    cls_451 = f"class Bigger:\n    '''doc'''\n{methods}    x = 1\n"
    found = structure.findings(cls_450 + cls_451, "c.py")
    assert [(f.name, f.lines, f.attributes) for f in found] == [("Bigger", 451, 1)]


def test_methods_and_nested_functions_are_named_by_their_owner() -> None:
    inner = "".join(f"            y{i} = {i}\n" for i in range(80))
    source = f"class A:\n    def outer(self) -> None:\n        def inner() -> None:\n{inner}"
    found = structure.findings(source, "n.py")
    assert [(f.name, f.line) for f in found] == [("A.outer", 2), ("A.outer.inner", 3)]


def test_the_command_lists_findings_and_check_fails_on_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(class_with_fields("Wide", 21))
    (tmp_path / "pkg" / "ok.py").write_text(class_with_fields("Narrow", 20))
    assert _bench("structure", str(tmp_path / "pkg")) == 0
    out = capsys.readouterr().out
    assert "classes over 450 lines or 20 attributes: 1" in out
    assert "m.py:2: class Wide: 24 lines, 21 attributes" in out
    assert "Narrow" not in out and "functions over 80 lines: 0" in out
    assert _bench("structure", "--check", str(tmp_path / "pkg")) == 1
    assert _bench("structure", "--check", str(tmp_path / "pkg" / "ok.py")) == 0
    capsys.readouterr()
    assert _bench("structure", str(tmp_path / "absent")) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_serverio_today_is_reported_and_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    # The report runs over the real package (the gates are the rebuild's,
    # so today's findings are listed, not failed on).
    assert _bench("structure") == 0
    out = capsys.readouterr().out
    assert "classes over 450 lines or 20 attributes:" in out
    # Issue 26's split: the server's parts and the counter groups are each
    # under the gate (the report listed Server at 495 lines / 29 attributes,
    # Server.__init__ at 90 lines and Stats at 29 attributes before).
    for part in ("server", "listen", "services", "admission", "accept", "lifecycle"):
        assert f"serverio/net/{part}.py:" not in out
    assert "serverio/observe/stats.py:" not in out


# Over the gates on main at 2ac0237 (2026-12-06), each named in issue 42's
# closing note with its owner: the ratchet below fails on any NEW offender
# and on a listed one that no longer is (then strike it here), so the list
# only shrinks until `bench structure --check` is clean.
KNOWN_OVER: set[str] = set()


def test_serverio_is_within_the_size_gates_but_for_the_known_list() -> None:
    # `python -m bench structure --check` over the whole package, as part of
    # the suite (issue 42's gate "bench structure clean"): no class over 450
    # lines or 20 attributes, no function over 80 lines -- but for
    # KNOWN_OVER, which may only shrink.
    found = structure.report([structure.REPO / "serverio"])
    over = {f"{Path(f.path).as_posix()}:{f.name}" for f in found}
    new = sorted(over - KNOWN_OVER)
    assert not new, "new offenders of the size gates:\n" + "\n".join(
        f.describe() for f in found if any(f.name in n for n in new)
    )
    assert not (KNOWN_OVER - over), (
        f"within the gates now, strike from KNOWN_OVER: {sorted(KNOWN_OVER - over)}"
    )
    assert _bench("structure", "--check") == (1 if over else 0)
