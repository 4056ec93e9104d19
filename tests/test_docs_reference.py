"""The documentation as a reference (issue 42 item 7).

* every page of docs/reference/ is at most 400 lines, and so is
  docs/performance.md (the dated runs live in docs/history/);
* every module docs/architecture.md names exists: ``serverio.x.y`` (a module,
  or a module and one of its names), ``x.y`` where ``x`` is a package of
  serverio, and ``x/y.py`` (under serverio/, or from the repository's root);
* every relative link in docs/ and README.md resolves: the file, and the
  ``#anchor`` where one is given (a heading's GitHub slug or an explicit
  ``<a id>``/``<a name>``).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PACKAGE = REPO / "serverio"
MAX_LINES = 400

_FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a Markdown text outside fenced code blocks (1-based)."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, punctuation other
    than ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a Markdown file defines (duplicates get ``-1``, ``-2``...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for _, line in prose_lines(text):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path: Path) -> Iterator[tuple[int, str]]:
    """The link targets of a Markdown file outside code (fences and spans)."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(re.sub(r"`[^`]*`", "", line)):
            yield number, target


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    broken: list[str] = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not linked.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{where} (no such anchor)")
    return broken


def test_reference_pages_are_at_most_400_lines() -> None:
    pages = sorted((DOCS / "reference").glob("*.md"))
    assert len(pages) >= 10
    long = {p.name: n for p in pages if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_performance_page_is_at_most_400_lines() -> None:
    assert len((DOCS / "performance.md").read_text().splitlines()) <= MAX_LINES


def test_the_table_of_contents_lists_every_reference_page() -> None:
    toc = (DOCS / "README.md").read_text()
    listed = set(re.findall(r"\(reference/([\w.-]+\.md)\)", toc))
    pages = {p.name for p in (DOCS / "reference").glob("*.md")}
    # A new page needs a row in docs/README.md's table of contents.
    assert sorted(pages - listed) == []
    assert sorted(listed - pages) == []


# A test file, a module (``serverio.x.y``, ``x/y.py``, or ``x.y`` in code
# where x is a package of serverio: ``fs.jobs``), or a date (2026-12-02,
# "Dec 2026", "02/Dec/2026"): what the user reference leaves to
# docs/architecture.md and docs/history/.
_CITATION = re.compile(
    r"tests/test_\w+\.py|(?<![./])\bserverio(?:\.[a-z_]+\.[a-z_]+|/[a-z_]+/)|\b[a-z]+/[a-z_]+\.py\b"
    r"|\b20\d\d-\d\d-\d\d\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\W20\d\d\b"
)


def citations(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a page that cite a test, a module or a date."""
    packages = "|".join(sorted(_packages() - {"http"}))
    # site.toml and app.js are files, app.localhost a host name (app/ is a
    # package).
    files = r"(?!(?:toml|md|py|html|js|css|txt|json|htpasswd|localhost)\b)"
    in_code = re.compile(
        rf"`[^`]*\b(?:(?:{packages})\.{files}[a-z_]+|http\.(?!server\b){files}[a-z_]+)[^`]*`"
    )
    for number, line in enumerate(text.splitlines(), 1):
        if _CITATION.search(line) or in_code.search(line):
            yield number, line.strip()


def test_reference_pages_cite_no_test_file_nor_module_nor_date() -> None:
    # The user reference says what serverio does; where it is done is
    # docs/architecture.md's, and the evidence (tests, dated runs and
    # transcripts) is in tests/ and docs/history/.
    cited = [
        f"{page.name}:{number}: {line}"
        for page in sorted((DOCS / "reference").glob("*.md"))
        for number, line in citations(page.read_text())
    ]
    assert cited == []


def test_citation_check_finds_tests_modules_and_dates() -> None:
    text = (
        "ok: `python -m http.server`, `site.toml`, `-d site`\n"
        "see tests/test_upload.py\n"
        "`fs.jobs.scan_listing` walks\n"
        "(serverio/upload/resolved.py)\n"
        "Date: Wed, 02 Dec 2026 14:54:38 GMT\n"
        "measured 2026-12-02\n"
        "`http.core.error_plan`\n"
        "the script at `/.serverio/livereload.js`\n"
    )
    assert [n for n, _ in citations(text)] == [2, 3, 4, 5, 6, 7]


def test_broken_link_detection_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    # The checker itself, on a small tree: so the real check cannot pass by
    # reading nothing.
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Some title (`--flag`)\n\n```\n# not a heading\n```\n")
    page.write_text(
        "[ok](b.md#some-title---flag) [gone](c.md) [bad](b.md#not-a-heading)\n"
        "`[code](c.md)` [web](https://example.invalid/x)\n"
    )
    found = broken_links(page, tmp_path)
    assert found == ["a.md:1: c.md (no such file)", "a.md:1: b.md#not-a-heading (no such anchor)"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def _packages() -> set[str]:
    return {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def _resolves(dotted: str) -> bool:
    """``serverio.a.b[.name...]``: the longest importable module, and the
    next component a name in it (a submodule or an attribute)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return cut == len(parts) or hasattr(module, parts[cut])
    return False


def module_names(text: str) -> Iterator[str]:
    """The modules architecture.md names, as written."""
    packages = "|".join(sorted(_packages()))
    for _, line in prose_lines(text):
        yield from re.findall(r"\bserverio(?:\.\w+)+", line)
        for span in re.findall(r"`([^`]+)`", line):
            yield from re.findall(rf"(?<![\w./])(?:{packages})\.[a-z_]\w*(?:\.\w+)*(?![\w*])", span)
        yield from re.findall(r"(?<![\w./-])(?:[\w]+/)+[\w]+\.py\b", line)


def _missing(name: str) -> bool:
    if name.endswith(".py"):
        rel = name.removeprefix("serverio/")
        return not ((PACKAGE / rel).exists() or (REPO / name).exists())
    dotted = name if name.startswith("serverio.") else f"serverio.{name}"
    return not _resolves(dotted.rstrip("."))


def test_every_module_architecture_names_exists() -> None:
    names = set(module_names((DOCS / "architecture.md").read_text()))
    assert len(names) > 100  # the check reads the page
    assert sorted(n for n in names if _missing(n)) == []


def test_module_name_check_finds_a_missing_module() -> None:
    text = (
        "`pipeline.site` and `http.core.error_plan`, serverio.nowhere.x,"
        " net/absent.py, fs/prepare.py, `net.h2*`"
    )
    found = set(module_names(text))
    assert found == {
        "pipeline.site",
        "http.core.error_plan",
        "serverio.nowhere.x",
        "net/absent.py",
        "fs/prepare.py",
    }
    missing = sorted(n for n in found if _missing(n))
    assert missing == ["net/absent.py", "pipeline.site", "serverio.nowhere.x"]


# Flags of other programs a reference page names in its prose (curl's,
# rclone's); every other ``--flag`` must be one of serverio's.
_FOREIGN_FLAGS = {"--http2-prior-knowledge", "--size-only"}


def _serverio_flags() -> set[str]:
    flags: set[str] = set()
    for argv in (["--help-all"], ["hash-password", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "serverio", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd=REPO,
        ).stdout
        flags.update(re.findall(r"--[a-z0-9][a-z0-9-]*", out))
    return flags


def test_every_flag_a_reference_page_names_exists() -> None:
    known = _serverio_flags()
    assert {"--webdav-max-locks", "--dev-tls", "--user"} <= known
    unknown = [
        f"{page.name}:{number}: {flag}"
        for page in sorted((DOCS / "reference").glob("*.md"))
        for number, line in prose_lines(page.read_text())
        for flag in re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", line)
        if flag not in known and flag not in _FOREIGN_FLAGS
    ]
    assert unknown == []
