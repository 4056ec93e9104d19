"""``[[hide]]`` tables (issue 46): ``names`` (globs, as ``--hide``'s)
hidden only in the folders a ``path`` glob matches (every folder without
one); read from TOML next to ``hide = [...]`` under the same key, written
back by --print-config, bad tables refused naming the file and the key
(exit 2); applied to listings, search, archives and PROPFIND; never an
access rule."""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from pathlib import Path

import pytest

from serverio.errors import ConfigError
from serverio.fs.hide import HideRules, hide_rules
from serverio.ops.cli import build_parser, config_from_args
from serverio.ops.tomlconfig import dump, parse_with_config

from .conftest import make_config, memory_connection
from .test_cli import run_cli

TABLES = (("/photos/**", ("*.xmp", "Thumbs.db")), ("/", ("build",)), ("", ("*.bak",)))


def test_a_table_hides_its_names_only_in_the_folders_its_path_matches() -> None:
    h = HideRules(("*.tmp",), TABLES)
    assert h.active
    assert h.hides("photos", "a.xmp") and h.hides("photos/2026/x", "a.xmp")
    assert h.hides("photos/2026", "Thumbs.db")
    assert not h.hides("", "a.xmp") and not h.hides("docs", "a.xmp")
    assert not h.hides("photosphere", "a.xmp")  # a folder, not a prefix of a name
    assert h.hides("", "build") and h.hides(".", "build") and not h.hides("src", "build")
    # A table without a path is --hide itself; --hide still applies.
    assert h.hides("deep/er", "x.bak") and h.hides("docs", "y.tmp")
    assert not h.hides("photos", "a.jpg")
    # "/photos" and "/photos/" both name the folder, not what is below it.
    only = HideRules((), (("/photos/", ("*.xmp",)),))
    assert only.hides("photos", "a.xmp") and not only.hides("photos/x", "a.xmp")
    assert hide_rules((), TABLES) is hide_rules((), TABLES)  # compiled once


def test_tables_load_beside_nothing_else_and_round_trip(root: Path, tmp_path: Path) -> None:
    conf = tmp_path / "hide.toml"
    conf.write_text(
        f'directory = "{root}"\n'
        "[[hide]]\n"
        'names = ["*.bak"]\n'
        "[[hide]]\n"
        'path = "/photos/**"\n'
        'names = ["*.xmp", "Thumbs.db"]\n'
    )
    parser = build_parser()
    args = parse_with_config(parser, ["--config", str(conf), "--hide", "*.tmp"])
    cfg = config_from_args(args)
    assert cfg.files.hide == ("*.tmp",)
    assert cfg.files.hide_tables == (("", ("*.bak",)), ("/photos/**", ("*.xmp", "Thumbs.db")))
    out = tmp_path / "out.toml"
    out.write_text(dump(parser, args))
    again = config_from_args(parse_with_config(build_parser(), ["--config", str(out)]))
    # The --hide globs come back as a table without a path: the same rule.
    rules = again.files.hide_tables
    assert again.files.hide == () and rules == (("", ("*.tmp",)), *cfg.files.hide_tables)
    plain = tmp_path / "plain.toml"
    plain.write_text(f'directory = "{root}"\nhide = ["*.tmp", "private/*"]\n')
    cfg = config_from_args(_parse(plain))
    assert cfg.files.hide == ("*.tmp", "private/*") and cfg.files.hide_tables == ()


def _parse(conf: Path) -> argparse.Namespace:
    return parse_with_config(build_parser(), ["--config", str(conf)])


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('[[hide]]\npath = "/x"\n', "[[hide]] #1 key 'names' must be a non-empty array of globs"),
        ("[[hide]]\nnames = []\n", "[[hide]] #1 key 'names' must be a non-empty array"),
        ("[[hide]]\nnames = [1]\n", "[[hide]] #1 key 'names' must be a non-empty array"),
        ('[[hide]]\nnames = ["/abs"]\n', "[[hide]] #1 key 'names': '/abs' must be a non-empty"),
        ('[[hide]]\nnames = [""]\n', "[[hide]] #1 key 'names': '' must be a non-empty"),
        ('[[hide]]\npath = "x"\nnames = ["a"]\n', "[[hide]] #1 key 'path': bad glob 'x'"),
        ('[[hide]]\npath = "/a/**b"\nnames = ["a"]\n', "key 'path': bad glob '/a/**b'"),
        ('[[hide]]\npath = 3\nnames = ["a"]\n', "[[hide]] #1 key 'path' must be a string"),
        ('[[hide]]\nnames = ["a"]\nglob = "b"\n', "[[hide]] #1: unknown key 'glob'"),
        ('[[hide]]\nnames = ["a"]\n[[hide]]\nname = ["b"]\n', "[[hide]] #2: unknown key 'name'"),
    ],
)
def test_a_bad_table_exits_2_naming_the_file_and_key(
    root: Path, tmp_path: Path, body: str, needle: str
) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(body)
    with pytest.raises(ConfigError) as info:
        _parse(conf)
    assert needle in str(info.value) and str(conf) in str(info.value)
    r = run_cli("--config", str(conf), "-d", str(root))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [f"serverio: error: {info.value}"]


def test_more_than_256_globs_in_all_is_refused(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"--hide and \[\[hide\]\]: at most 256 globs, got 257"):
        make_config(root, hide=("a",), hide_tables=(("/x", tuple(f"g{i}" for i in range(256))),))


async def test_tables_apply_to_listings_search_archives_and_propfind(tmp_path: Path) -> None:
    root = tmp_path / "www"
    for rel in ("photos/a.jpg", "photos/a.xmp", "photos/2026/b.xmp", "docs/c.xmp", "build/o.o"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "docs" / "build").mkdir()
    tables = (("/photos/**", ("*.xmp",)), ("/", ("build",)))
    cfg = make_config(root, hide_tables=tables, archives=True, webdav=True, min_free_space=0)
    async with memory_connection(cfg) as (client, _, _):
        listing = json.loads((await client.get("/photos/?format=json")).body)
        assert [e["name"] for e in listing["entries"]] == ["2026", "a.jpg"]
        top = json.loads((await client.get("/?format=json")).body)
        assert [e["name"] for e in top["entries"]] == ["docs", "photos"]  # /build hidden
        docs = json.loads((await client.get("/docs/?format=json")).body)
        assert [e["name"] for e in docs["entries"]] == ["build", "c.xmp"]  # not hidden there
        found = json.loads((await client.get("/?q=*.xmp&format=json")).body)
        assert [e["name"] for e in found["entries"]] == ["docs/c.xmp"]
        z = await client.get("/photos/?archive=zip")
        names = zipfile.ZipFile(io.BytesIO(z.body)).namelist()
        assert sorted(names) == ["photos/2026/", "photos/a.jpg"], names
        r = await client.get("/photos/", "Depth: 1\r\n", method="PROPFIND")
        assert r.status == 207 and b"a.jpg" in r.body and b"a.xmp" not in r.body
        # Not an access rule: each is still served by its URL.
        assert (await client.get("/photos/a.xmp")).status == 200
        assert (await client.get("/build/o.o")).status == 200
