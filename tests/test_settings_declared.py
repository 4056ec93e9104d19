"""Each setting declared once (issue 42 item 5): the declaration on the
policy field (serverio.config.setting) is the default, the bounds, the
flags, the help and the group; the checks, the command line and
docs/cli.md's option tables are derived from it."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from serverio.config import (
    POLICIES,
    Config,
    Declared,
    check_declared,
    declared,
    setting,
)
from serverio.errors import ConfigError
from serverio.ops import clidocs, options
from serverio.ops.options import GROUPS, OPTIONS

REGEN = "python -m serverio.ops.clidocs"


def _declarations() -> dict[str, Declared]:
    return {n: d for cls in (Config, *POLICIES.values()) for n, d in declared(cls)}


# ---------------------------------------------------------------- docs/cli.md


def test_docs_cli_md_option_tables_are_the_generated_ones() -> None:
    """Regenerate every option table of docs/cli.md: no difference."""
    text = clidocs.DOCS.read_text(encoding="utf-8")
    fresh = clidocs.render(text)
    if fresh != text:
        old, new = text.splitlines(), fresh.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), 0)
        pytest.fail(
            f"docs/cli.md's option tables drifted from the declarations (line {first + 1}: "
            f"{old[first][:80] if first < len(old) else ''!r}); regenerate them with: {REGEN}"
        )
    assert clidocs.COMMAND == REGEN
    assert REGEN in text  # the page says how


def test_each_group_has_one_table_with_a_row_per_option() -> None:
    text = clidocs.DOCS.read_text(encoding="utf-8")
    regions = re.findall(r"^<!-- options: (.+?) -->$", text, re.M)
    assert sorted(regions) == sorted(GROUPS)
    for opt in OPTIONS:
        m = re.search(
            rf"<!-- options: {re.escape(opt.group)} -->\n(.*?)<!-- /options -->", text, re.S
        )
        assert m is not None
        assert f"`{opt.flags[0]}" in m[1], f"{opt.flags} has no row in its group's table"


def _sample() -> str:
    return clidocs.render(clidocs.DOCS.read_text(encoding="utf-8"))


def _row(text: str, flag: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| `{flag}"))


def test_drift_in_a_derived_cell_is_found_and_the_why_is_kept() -> None:
    """A stale default, bound or key is rewritten; the *why* cell, prose no
    declaration holds, survives regeneration."""
    text = _sample()
    row = _row(text, "--webdav-max-locks ")
    assert "`4096` (at least 1)" in row and "`webdav-max-locks = 4096`" in row
    stale = row.replace("`4096` (at least 1)", "`512`").replace(
        " | Most WebDAV", " | Edited. Most WebDAV"
    )
    changed = text.replace(row, stale)
    again = clidocs.render(changed)
    assert again != changed
    fixed = _row(again, "--webdav-max-locks ")
    assert "`4096` (at least 1)" in fixed and "| Edited. Most WebDAV" in fixed
    # A TOML example that no longer names the key is replaced by the key.
    wrong_key = changed.replace("`webdav-max-locks = 4096`", "`max-locks = 4096`")
    assert "| `webdav-max-locks` |" in _row(clidocs.render(wrong_key), "--webdav-max-locks ")


def test_a_missing_row_comes_back_from_the_help_and_a_stale_row_goes() -> None:
    text = _sample()
    row = _row(text, "--max-ranges ")
    without = text.replace(row + "\n", "")
    back = _row(clidocs.render(without), "--max-ranges ")
    opt = next(o for o in OPTIONS if o.flags == ("--max-ranges",))
    assert back.endswith(" | " + opt.help[0].upper() + opt.help[1:] + ". |")
    ghost = "| `--no-such-option N` | `no-such-option` | `1` | Gone. |\n"
    with_ghost = text.replace(row + "\n", row + "\n" + ghost)
    assert "--no-such-option" not in clidocs.render(with_ghost)


def test_a_group_without_a_table_or_an_unknown_table_is_an_error() -> None:
    text = _sample()
    with pytest.raises(ValueError, match="no <!-- options: GROUP --> table for"):
        clidocs.render(text.replace("<!-- options: Logs -->", "<!-- not options -->"))
    with pytest.raises(ValueError, match="no such group"):
        clidocs.render(text + "\n<!-- options: Nope -->\n<!-- /options -->\n")


def test_check_and_write_from_the_command_line(tmp_path: Path) -> None:
    page = tmp_path / "cli.md"
    text = _sample()
    page.write_text(text.replace("`4096` (at least 1)", "`1`"), encoding="utf-8")
    assert clidocs.main(["--check", str(page)]) == 1
    assert clidocs.main([str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text
    assert clidocs.main(["--check", str(page)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["cli.md"]  # no temporary left


# ---------------------------------------------------------------- declarations


def test_the_command_line_declares_no_setting_of_its_own() -> None:
    """Every Option with a field is made from that field's declaration; the
    options declared in serverio.ops.options set no field."""
    decls = _declarations()
    stray = [o.flags for o in options._COMMANDS if o.field is not None]
    assert not stray, f"{stray}: declare a setting on its field with serverio.config.setting"
    fields = [o.field for o in OPTIONS if o.field is not None]
    assert sorted(fields) == sorted(decls)
    for opt in OPTIONS:
        if opt.field is not None:
            d = decls[opt.field]
            assert (opt.flags, opt.help, opt.group) == (d.flags, d.help, d.group)


def test_every_numeric_setting_declares_its_bounds() -> None:
    """A count, size or duration says what it accepts (a new one too)."""
    for name, d in _declarations().items():
        if d.more.get("parse") in ("int", "bytes", "seconds", "float", "workers"):
            assert d.range_text(), f"{name}: declare ge=/gt=/le=/cap="


def _outside(d: Declared) -> list[object]:
    m = d.more
    out: list[object] = []
    if "ge" in m:
        out.append(m["ge"] - (0.5 if m.get("parse") in ("seconds", "float") else 1))
    if "gt" in m:
        out.append(m["gt"])
    for top in ("le", "cap"):
        if top in m:
            out.append(m[top] + 1)
    return out


def test_each_declared_bound_and_choice_is_enforced_by_validate(tmp_path: Path) -> None:
    """Config.validate refuses a value just past each declared bound (and
    outside each declared choice) with one line that starts with the flag,
    and accepts the value on the bound."""
    checked = 0
    for name, d in _declarations().items():
        bad: list[object] = _outside(d)
        if "choices" in d.more:
            bad.append("no-such-choice")
        for value in bad:
            listed = d.more.get("kind") in ("list", "extend")
            given = (value,) if listed else value
            with pytest.raises(ConfigError) as info:
                Config.of(directory=str(tmp_path), **{name: given}).validate()
            assert str(info.value).startswith(d.flag + " "), (name, value, str(info.value))
            checked += 1
        for edge in ("ge", "le"):
            if edge in d.more:
                try:
                    Config.of(directory=str(tmp_path), **{name: d.more[edge]}).validate()
                except ConfigError as exc:  # another rule may object, never this bound
                    assert not str(exc).startswith(d.flag + " must"), (name, str(exc))
    assert checked > 60


def test_setting_is_a_typed_field_default_that_carries_its_declaration() -> None:
    @dataclass(frozen=True, slots=True)
    class P:
        n: int = setting(3, ("-n", "--n-things"), "things", "Connections", ge=1, cap=10)
        wait: float = setting(1.0, ("--wait",), "seconds", "Connections", parse="seconds", gt=0)
        span: float = setting(0.0, ("--span",), "s", "Connections", parse="seconds", ge=0, le=60)
        mode: str = setting("a", ("--mode",), "m", "Connections", choices=("a", "b"))
        port: int = setting(1, ("--p",), "p", "Connections", ge=0, le=9)
        plain: int = 7

    assert P().n == 3 and P().wait == 1.0 and P().plain == 7
    assert [n for n, _ in declared(P)] == ["n", "wait", "span", "mode", "port"]
    check_declared(P())
    cases = {
        "n": (0, "--n-things must be an integer >= 1, got 0"),
        "wait": (0, "--wait must be a positive number of seconds, got 0"),
        "span": (61, "--span must be between 0 and 60 seconds, got 61"),
        "mode": ("c", "--mode must be one of a, b, got 'c'"),
        "port": (10, "--p must be from 0 to 9, got 10"),
    }
    for field, (value, message) in cases.items():
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            changed: dict[str, Any] = {field: value}
            check_declared(dataclasses.replace(P(), **changed))
    with pytest.raises(ConfigError, match=r"^--n-things 11 is absurd \(max 10\)$"):
        check_declared(P(n=11))
    [(_, d)] = [(n, d) for n, d in declared(P) if n == "n"]
    assert d.flag == "--n-things" and d.range_text() == "1 to 10"


def test_a_declaration_with_an_unknown_group_or_parser_is_refused() -> None:
    """mypy --strict refuses both (SettingKw); an untyped caller gets a TypeError."""
    with pytest.raises(TypeError, match="group 'Nope'"):
        options._option("x", Declared((("--x",), "x", "Nope", {})))
    bad: Any = {"parse": "bites"}
    with pytest.raises(TypeError, match="parse 'bites'"):
        options._option("x", Declared((("--x",), "x", "Connections", bad)))
