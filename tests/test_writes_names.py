"""Client-supplied file names (serverio.fs.names): safe base names,
refusals with their reason, and the duplicate policy as a pure function."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serverio.fs.names import (
    MAX_NAME_BYTES,
    MAX_RENAME_TRIES,
    NameProblem,
    OnDuplicate,
    Picked,
    UnsafeName,
    check_name,
    pick_name,
    reduce_name,
)
from serverio.fs.winpath import windows_name_problem

ACCEPTED: list[tuple[str, str]] = [
    ("report.pdf", "report.pdf"),
    ("a b.txt", "a b.txt"),
    ("caf\u0065\u0301.txt", "caf\u00e9.txt"),  # NFD in, NFC out
    ("caf\u00e9.txt", "caf\u00e9.txt"),
    ("\U0001f469\u200d\U0001f4bb.txt", "\U0001f469\u200d\U0001f4bb.txt"),  # ZWJ (Cf, not bidi)
    (
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
    ),  # ZWNJ
    ("soft\u00adhyphen", "soft\u00adhyphen"),
    ("file~", "file~"),  # a "~" is fine unless the root is on Windows
    ("x" * MAX_NAME_BYTES, "x" * MAX_NAME_BYTES),
    ("\u00e9" * (MAX_NAME_BYTES // 2), "\u00e9" * (MAX_NAME_BYTES // 2)),  # 254 bytes
    ("con-tract.txt", "con-tract.txt"),  # "con" only as the whole base
    ("COM10", "COM10"),
    ("%2e%2e", "%2e%2e"),  # no decoding here: a literal name
]

REFUSED: list[tuple[str, NameProblem]] = [
    ("", NameProblem.EMPTY),
    (".", NameProblem.DOT),
    ("..", NameProblem.DOT),
    ("a/b", NameProblem.SEPARATOR),
    ("a\\b", NameProblem.SEPARATOR),
    ("nul\x00.txt", NameProblem.CONTROL),
    ("tab\there", NameProblem.CONTROL),
    ("line\nbreak", NameProblem.CONTROL),
    ("del\x7f", NameProblem.CONTROL),
    ("c1\x85", NameProblem.CONTROL),
    # Bidirectional formatting characters (UAX #9), refused as controls
    # are: "invoice\u202efdp.exe" displays as "invoiceexe.pdf".
    ("invoice\u202efdp.exe", NameProblem.CONTROL),  # RLO
    ("\u202dx", NameProblem.CONTROL),  # LRO
    ("a\u202ab\u202c", NameProblem.CONTROL),  # LRE, PDF
    ("a\u202bb", NameProblem.CONTROL),  # RLE
    ("a\u2066b\u2069", NameProblem.CONTROL),  # LRI, PDI
    ("a\u2067b", NameProblem.CONTROL),  # RLI
    ("a\u2068b", NameProblem.CONTROL),  # FSI
    ("a\u200eb", NameProblem.CONTROL),  # LRM
    ("a\u200fb", NameProblem.CONTROL),  # RLM
    ("a\u061cb", NameProblem.CONTROL),  # ALM
    ("\udcff", NameProblem.NOT_UTF8),
    (".env", NameProblem.HIDDEN),
    (".htaccess", NameProblem.HIDDEN),
    ("x" * (MAX_NAME_BYTES + 1), NameProblem.TOO_LONG),
    ("\u00e9" * 128, NameProblem.TOO_LONG),  # 128 characters, 256 bytes
    ("CON", NameProblem.WINDOWS),
    ("con", NameProblem.WINDOWS),
    ("nul.txt", NameProblem.WINDOWS),
    ("Aux.tar.gz", NameProblem.WINDOWS),
    ("PRN ", NameProblem.WINDOWS),
    ("COM1", NameProblem.WINDOWS),
    ("com9.log", NameProblem.WINDOWS),
    ("LPT1", NameProblem.WINDOWS),
    ("lpt\u00b9", NameProblem.WINDOWS),
    ("secret.txt.", NameProblem.WINDOWS),
    ("trailing ", NameProblem.WINDOWS),
    ("a:b", NameProblem.WINDOWS),
    ("file.txt::$DATA", NameProblem.WINDOWS),
    ('quo"te', NameProblem.WINDOWS),
    ("what?", NameProblem.WINDOWS),
    ("st*r", NameProblem.WINDOWS),
    ("<x>", NameProblem.WINDOWS),
    ("a|b", NameProblem.WINDOWS),
]


@pytest.mark.parametrize(("name", "expected"), ACCEPTED)
def test_accepted_names_come_back_in_nfc(name: str, expected: str) -> None:
    assert check_name(name) == expected


@pytest.mark.parametrize(("name", "problem"), REFUSED)
def test_refused_names_say_why(name: str, problem: NameProblem) -> None:
    with pytest.raises(UnsafeName) as info:
        check_name(name)
    assert info.value.problem is problem
    assert info.value.name == name


def test_hidden_names_only_when_allowed() -> None:
    assert check_name(".env", hidden=True) == ".env"
    assert check_name(".well-known", hidden=True) == ".well-known"
    for dots in (".", ".."):
        with pytest.raises(UnsafeName):
            check_name(dots, hidden=True)


def test_short_aliases_refused_only_for_a_windows_root() -> None:
    assert check_name("PROGRA~1") == "PROGRA~1"
    with pytest.raises(UnsafeName) as info:
        check_name("PROGRA~1", windows=True)
    assert info.value.problem is NameProblem.SHORT_ALIAS


def test_nfc_is_applied_before_the_length_and_dot_rules() -> None:
    # "\u2024\u2024" (ONE DOT LEADER) is not "..": NFC leaves it alone.
    assert check_name("\u2024\u2024") == "\u2024\u2024"
    # 85 x (e + combining acute) is 255 bytes in NFD, 170 in NFC.
    nfd = "e\u0301" * 85
    assert len(nfd.encode()) == 255
    assert check_name(nfd) == "\u00e9" * 85


REDUCED: list[tuple[str, str]] = [
    ("C:\\Users\\me\\report.pdf", "report.pdf"),
    ("../../etc/passwd", "passwd"),
    ("/abs/path/a.txt", "a.txt"),
    ("dir\\..\\x", "x"),
    ("plain", "plain"),
]


@pytest.mark.parametrize(("raw", "expected"), REDUCED)
def test_reduce_name_keeps_the_last_component(raw: str, expected: str) -> None:
    assert reduce_name(raw) == expected


@pytest.mark.parametrize("raw", ["a/", "a\\", "../..", "x/.", "dir/.env", "C:\\CON", ""])
def test_reduce_name_refuses_what_is_left_when_unsafe(raw: str) -> None:
    with pytest.raises(UnsafeName):
        reduce_name(raw)


@given(st.text(max_size=300))
def test_any_accepted_name_is_a_safe_base_name(raw: str) -> None:
    try:
        name = reduce_name(raw)
    except UnsafeName:
        return
    assert name == unicodedata.normalize("NFC", name)
    assert name not in ("", ".", "..")
    assert not set(name) & {"/", "\\", "\x00"}
    assert not any(unicodedata.category(c) == "Cc" for c in name)
    assert not name.startswith(".")
    assert len(name.encode("utf-8")) <= MAX_NAME_BYTES
    assert windows_name_problem(name) is None
    assert check_name(name) == name  # idempotent


# ------------------------------------------------------------ duplicates


def taken(*names: str) -> set[str]:
    return set(names)


def test_a_free_name_is_used_under_every_policy() -> None:
    for policy in OnDuplicate:
        assert pick_name("a.txt", policy, taken().__contains__) == Picked("a.txt", False)


def test_error_policy_refuses_a_taken_name() -> None:
    with pytest.raises(UnsafeName) as info:
        pick_name("a.txt", OnDuplicate.ERROR, taken("a.txt").__contains__)
    assert info.value.problem is NameProblem.TAKEN


def test_overwrite_policy_replaces() -> None:
    assert pick_name("a.txt", OnDuplicate.OVERWRITE, taken("a.txt").__contains__) == Picked(
        "a.txt", True
    )


@pytest.mark.parametrize(
    ("name", "existing", "expected"),
    [
        ("a.txt", ("a.txt",), "a (1).txt"),
        ("a.txt", ("a.txt", "a (1).txt", "a (2).txt"), "a (3).txt"),
        ("archive.tar.gz", ("archive.tar.gz",), "archive.tar (1).gz"),
        ("noext", ("noext",), "noext (1)"),
        (".env", (".env",), ".env (1)"),  # a leading dot is not an extension
    ],
)
def test_rename_policy_picks_the_first_free_variant(
    name: str, existing: tuple[str, ...], expected: str
) -> None:
    picked = pick_name(name, OnDuplicate.RENAME, set(existing).__contains__, hidden=True)
    assert picked == Picked(expected, False)


def test_rename_keeps_variants_within_the_length_limit() -> None:
    long = "\u00e9" * 125 + ".txt"  # 254 bytes
    picked = pick_name(long, OnDuplicate.RENAME, {long}.__contains__)
    assert len(picked.name.encode()) <= MAX_NAME_BYTES
    assert picked.name.endswith(" (1).txt")
    picked.name.encode("utf-8")  # cut on a character, never inside one


def test_rename_gives_up_after_the_bound() -> None:
    calls: list[str] = []

    def everything_taken(name: str) -> bool:
        calls.append(name)
        return True

    with pytest.raises(UnsafeName) as info:
        pick_name("a.txt", OnDuplicate.RENAME, everything_taken)
    assert info.value.problem is NameProblem.TAKEN
    assert len(calls) == MAX_RENAME_TRIES + 1
