"""docs/cli.md's option tables, generated from the setting declarations.

``python -m serverio.ops.clidocs`` rewrites every table of docs/cli.md that
sits between ``<!-- options: GROUP -->`` and ``<!-- /options -->`` (one per
group of ``--help``, serverio.ops.options.GROUPS); ``--check`` only says
whether a table differs (exit 1), which is what the test runs.

Each row is one option of the group, in ``--help``'s order.  Its first three
cells are derived from the declaration (serverio.config.setting): the
spelling (flags and metavar), the TOML key and the default with the bounds.
The last cell, *why*, is prose that no declaration holds: it is kept from
the row of the same option already in the file (found by any flag it
names), so it is written by hand, once; a new option's row starts from its
help text.  A TOML cell that shows an example value (``upload = true``) is
kept too while it still names the option's key.  Rows of options that no
longer exist disappear.  Nothing here runs when serverio starts: the
tables are built only when asked.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..config import POLICIES, Config, Declared, declared
from .options import GROUPS, OPTIONS, Option

__all__ = ["COMMAND", "DOCS", "check", "main", "render", "rows"]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMAND = "python -m serverio.ops.clidocs"

_REGION = re.compile(
    r"^<!-- options: (?P<group>[^>]+?) -->\n(?P<table>(?:\|.*\n)*)<!-- /options -->$", re.M
)
_HEAD = "| option | TOML key | default | why |\n|---|---|---|---|\n"
_CELL = re.compile(r"(?<!\\)\|")
_FLAG = re.compile(r"`(\[DIR\]|-[^` ]+)")
_CLI_ONLY = "(command line only)"


class Row(NamedTuple):
    """One table row: the flags that identify it and its four cells."""

    flags: tuple[str, ...]
    option: str
    key: str
    default: str
    why: str

    def line(self) -> str:
        return f"| {self.option} | {self.key} | {self.default} | {self.why} |"


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_esc(text)}`"


def _metavar(opt: Option) -> str:
    if opt.kind in ("flag", "toggle", "version"):
        return ""
    if opt.metavar is not None:
        meta = opt.metavar
    elif opt.choices:
        meta = "|".join(opt.choices)
    else:
        meta = opt.dest.upper()
    return meta + ("..." if opt.kind == "extend" else "")


def _spelling(opt: Option) -> str:
    meta = _metavar(opt)
    if opt.kind == "toggle":
        return " / ".join(_code(f) for f in opt.flags)
    cells = [_code(f) for f in opt.flags[:-1]]
    cells.append(_code(f"{opt.flags[-1]} {meta}".strip()))
    return ", ".join(cells)


def _default(opt: Option, decl: Declared | None) -> str:
    if opt.kind == "version":
        return ""
    text = opt.shown_default()
    literal = opt.default_text is None and text not in ("on", "off", "none")
    cell = _code(text) if literal else _esc(text)
    bounds = "" if decl is None else decl.range_text()
    return f"{cell} ({bounds})" if bounds else cell


def _key(opt: Option) -> str:
    return _CLI_ONLY if opt.key is None else _code(opt.key)


def _declarations() -> dict[str, Declared]:
    return {n: d for cls in (Config, *POLICIES.values()) for n, d in declared(cls)}


def _why(help_text: str) -> str:
    text = _esc(" ".join(help_text.split()))
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def rows(group: str) -> list[Row]:
    """The rows of ``group``'s table, with the help text as their *why*."""
    decls = _declarations()
    out: list[Row] = []
    for opt in OPTIONS:
        if opt.group != group:
            continue
        if opt.kind == "positional":
            directory = next(o for o in OPTIONS if o.field == "directory")
            default = f"{_esc(directory.shown_default())}, {_code(opt.shown_default())}"
            out.append(Row(("[DIR]",), "`[DIR] [PORT]`", _CLI_ONLY, default, ""))
        if opt.switch is not None:
            flag, _, text = opt.switch
            out.append(Row((flag,), _code(flag), _code(flag[2:]), "off", _why(text)))
        if opt.kind == "version":  # the long help page: argparse's, no declaration
            out.append(Row(("--help-all",), "`--help-all`", _CLI_ONLY, "", "Every option."))
        decl = None if opt.field is None else decls.get(opt.field)
        out.append(Row(opt.flags, _spelling(opt), _key(opt), _default(opt, decl), _why(opt.help)))
    return out


def _old_rows(table: str) -> dict[str, tuple[str, str]]:
    """Flag -> (TOML cell, why cell) of the rows already in a table."""
    out: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in _CELL.split(line.strip())[1:-1]]
        if len(cells) < 2:
            continue
        key = cells[1] if len(cells) >= 4 else ""
        for flag in _FLAG.findall(cells[0]):
            out.setdefault(flag, (key, cells[-1]))
    return out


def _table(group: str, old: str) -> str:
    before = _old_rows(old)
    lines = []
    for row in rows(group):
        kept = next((before[f] for f in row.flags if f in before), None)
        if kept is not None:
            key, why = kept
            name = row.key.strip("`")
            if row.key != _CLI_ONLY and re.match(rf"`{re.escape(name)} = ", key):
                row = row._replace(key=key)
            row = row._replace(why=why or row.why)
        lines.append(row.line())
    return _HEAD + "".join(f"{line}\n" for line in lines)


def render(text: str) -> str:
    """``text`` (docs/cli.md) with every option table regenerated.

    Raises ValueError for a region naming no group, and when a group of
    ``--help`` has no region (its options would be undocumented)."""
    seen: set[str] = set()

    def table(m: re.Match[str]) -> str:
        group = m["group"]
        if group not in GROUPS:
            raise ValueError(f"<!-- options: {group} -->: no such group (one of {GROUPS})")
        seen.add(group)
        return f"<!-- options: {group} -->\n{_table(group, m['table'])}<!-- /options -->"

    out = _REGION.sub(table, text)
    missing = [g for g in GROUPS if g not in seen]
    if missing:
        raise ValueError(f"no <!-- options: GROUP --> table for {missing}")
    return out


def check(path: Path = DOCS) -> bool:
    """Whether ``path``'s tables are what :func:`render` makes of them."""
    text = path.read_text(encoding="utf-8")
    return render(text) == text


def main(argv: Sequence[str] | None = None) -> int:
    """``[--check] [PATH]``: rewrite (or check) the tables; 1 when ``--check`` finds drift."""
    args = list(sys.argv[1:] if argv is None else argv)
    only_check = "--check" in args
    paths = [a for a in args if a != "--check"]
    path = Path(paths[0]) if paths else DOCS
    text = path.read_text(encoding="utf-8")
    new = render(text)
    if only_check:
        if new != text:
            print(f"{path}: the option tables are out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        # Whole or not at all: a temporary beside it, then a rename.
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(new, encoding="utf-8")
        os.replace(tmp, path)
        print(f"{path}: option tables rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
