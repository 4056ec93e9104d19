"""A directory's README below its listing (issue 28).

The URL policy and the sandboxed Markdown (pure), the bounded read (fs), and
the listing page as served: only a README the client may GET, its
validator and cache key following the README's bytes.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from serverio.fs.opener import RootOpener
from serverio.fs.readme import read_readme
from serverio.http.readme import README_MAX, checked_url, render_readme
from serverio.site.passwords import hash_password

from .conftest import make_config, memory_connection


@pytest.mark.parametrize(
    ("url", "segments", "ok"),
    [
        ("docs/a.md", ("sub",), True),
        ("./a.md#part", (), True),
        ("../b.txt", ("sub",), True),  # up to the root, not past it
        ("../b.txt", (), False),  # past the root
        ("a/../../x", (), False),
        ("%2e%2e/x", (), False),  # an encoded dot-segment is one too
        ("/abs/path.txt", ("sub",), True),
        ("/../x", (), False),
        ("#top", (), True),
        ("?sort=size", (), True),
        ("https://example.org/x", (), True),
        ("http://example.org", (), True),
        ("mailto:me@example.org", (), True),
        ("javascript:alert(1)", (), False),
        ("JavaScript:alert(1)", (), False),
        ("data:image/png;base64,AAAA", (), False),
        ("vbscript:x", (), False),
        ("file:///etc/passwd", (), False),
        ("//evil.example/x", (), False),  # another host without a scheme
        ("https:evil", (), False),  # a scheme without an authority
        (".env", (), False),  # hidden names are not served
        ("a/.git/config", (), False),
        ("a%2Fb", (), False),  # an encoded slash names no file
        ("a%zzb", (), False),  # a bad escape is a 400
        ("a%00b", (), False),
        ("a\\b", (), False),
        ("a b", (), False),  # unencoded space: markdown-it would have encoded it
    ],
)
def test_checked_url(url: str, segments: tuple[str, ...], ok: bool) -> None:
    assert (checked_url(url, segments) is not None) == ok


def test_checked_url_allows_hidden_names_with_hidden() -> None:
    assert checked_url(".env", (), hidden=True) == ".env"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


HOSTILE_MD = """\
# Title <script>alert(1)</script>

<script>alert(2)</script>
<img src=x onerror=alert(3)>
<iframe src="https://evil.example/"></iframe>
<a href="javascript:alert(4)">raw</a>

[js](javascript:alert(5)) [JS](JaVaScRiPt:alert(6)) [ent](&#106;avascript:alert(7))
[tab](java\tscript:alert(8)) [data](data:text/html,<script>alert(9)</script>)
[vb](vbscript:msgbox) [file](file:///etc/passwd) [proto](//evil.example/)
[up](../../../../etc/passwd) [hidden](.git/config) [ok](docs/guide.md "title")
<javascript:alert(10)> <https://ok.example/> <mailto:a@example.org>
[ref]: javascript:alert(11)
[uses ref][ref]

![local](shot.png) ![remote](https://tracker.example/pixel.gif)
![js](javascript:alert(12)) [![badge](https://ci.example/b.svg)](https://ci.example/)
![up](../../x.png)

| a | b |
|---|---|
| `<b>` | **x** |

```html
<script>alert(13)</script>
```
"""

ALLOWED_TAGS = {
    "section", "h2", "a", "div", "h1", "p", "span", "img", "table", "thead", "tbody", "tr",
    "th", "td", "code", "strong", "pre", "em", "del", "ul", "ol", "li", "blockquote", "br",
    "hr", "h3", "h4", "h5", "h6",
}  # fmt: skip


def test_hostile_markdown_renders_no_markup_and_no_unsafe_url() -> None:
    out = render_readme("README.md", HOSTILE_MD, ())
    p = _Tags()
    p.feed(out)
    tags = {t for t, _ in p.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    for tag, attrs in p.tags:
        assert not [k for k in attrs if k.startswith("on") or k in ("style", "srcdoc")], attrs
        for key in ("href", "src"):
            url = attrs.get(key)
            if url is not None:
                assert checked_url(url, ()) is not None, (tag, url)
        if tag == "img":
            assert attrs["src"] == "shot.png"  # the one local, contained image
    hrefs = [a.get("href") for t, a in p.tags if t == "a"]
    assert "docs/guide.md" in hrefs and "https://ok.example/" in hrefs
    assert "https://tracker.example/pixel.gif" in hrefs  # a remote image is a link
    assert "https://ci.example/" in hrefs  # the badge's link stays, its image is text
    assert "mailto:a@example.org" in hrefs
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in out  # raw HTML is text
    assert "<table>" in out and "<del>" not in out


def test_markdown_is_bounded_in_time_on_pathological_input() -> None:
    # Linear in the input (markdown-it: 100-200 KB/s on these), so a slice
    # of each shape is enough to see no blow-up; nesting is capped at 20.
    for text in (">" * 40_000, "[" * 40_000, "*a" * 20_000, "- " * 20_000, "`" * 40_000,
                 "![" * 10_000, "[x](" * 10_000):  # fmt: skip
        start = time.perf_counter()
        out = render_readme("README.md", text, ())
        assert time.perf_counter() - start < 10 and "<script" not in out
    # A repeated render is the cached fragment (every sort and filter of a page).
    start = time.perf_counter()
    assert render_readme("README.md", "![" * 10_000, ()) == render_readme(
        "README.md", "![" * 10_000, ()
    )
    assert time.perf_counter() - start < 0.5


def test_plain_text_readme_and_markdown_on_every_install() -> None:
    plain = render_readme("README", "<script>alert(1)</script>\n[x](javascript:y)", ())
    assert "<pre>&lt;script&gt;alert(1)&lt;/script&gt;\n[x](javascript:y)</pre>" in plain
    # markdown-it-py is a regular dependency (issue 46): a README.md is
    # never shown as its raw "# ..." source.
    md = render_readme("README.md", "# Title\n<b>x</b>", ())
    assert "<h1>Title</h1>" in md and "<pre>" not in md and "<b>" not in md
    requires = importlib.metadata.requires("serverio") or []
    assert any(r.startswith("markdown-it-py") and "extra" not in r for r in requires)


def test_markdown_is_imported_only_when_a_readme_is_rendered() -> None:
    code = (
        "import sys, serverio.http.listing, serverio.pipeline.content\n"
        "assert 'markdown_it' not in sys.modules\n"
        "from serverio.http.readme import render_readme\n"
        "render_readme('README.md', '# x', ())\n"
        "assert 'markdown_it' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_too_large_readme_is_a_link() -> None:
    out = render_readme("README.md", None, (), size=300 * 1024)
    assert "300 KiB, larger than 256 KiB" in out and 'href="./README.md"' in out


# ---------------------------------------------------------------- the read


def test_read_readme_bounds_decodes_and_refuses_what_is_not_a_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "README.md").write_bytes(b"caf\xe9 \xff ok")
    (root / "d" / "README").write_bytes(b"x" * 101)
    os.mkfifo(root / "d" / "README.md")
    (tmp_path / "secret.md").write_text("SECRET")
    os.symlink(tmp_path / "secret.md", root / "d" / "linked.md")
    opener = RootOpener(str(root), follow_symlinks=False)
    try:
        r = read_readme(opener, ".", "README.md", 100)
        assert r is not None and r.text == "caf\ufffd \ufffd ok" and r.size == 9
        big = read_readme(opener, "d", "README", 100)
        assert big is not None and big.text is None and big.size == 101
        assert read_readme(opener, "d", "README.md", 100) is None  # a FIFO: never opened
        assert read_readme(opener, "d", "linked.md", 100) is None  # leaves the root
        assert read_readme(opener, "d", "gone.md", 100) is None
        exact = read_readme(opener, "d", "README", 101)
        assert exact is not None and exact.text == "x" * 101
    finally:
        opener.close()


# ---------------------------------------------------------------- served


async def test_the_listing_shows_the_readme_and_its_validator_follows_it(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    readme = tmp_path / "README.md"
    readme.write_text("# One\n")
    os.utime(readme, (1_700_000_000, 1_700_000_000))
    async with memory_connection(make_config(tmp_path)) as (client, _, _):
        first = await client.get("/")
        assert first.status == 200 and b'<section class="readme"' in first.body
        assert b"<h1>One</h1>" in first.body
        assert first.body.index(b"</table>") < first.body.index(b'class="readme"')
        # Same size, same mtime, same inode: only the bytes differ.
        fd = os.open(readme, os.O_WRONLY)
        os.write(fd, b"# Two\n")
        os.close(fd)
        os.utime(readme, (1_700_000_000, 1_700_000_000))
        second = await client.get("/", f"If-None-Match: {first.header('etag')}\r\n")
        assert second.status == 200 and b"Two" in second.body
        assert second.header("etag") != first.header("etag")
        as_json = await client.get("/?format=json")
        assert b"readme" not in as_json.body and b"One" not in as_json.body


async def test_a_readme_the_client_may_not_get_is_not_rendered(tmp_path: Path) -> None:
    users = tmp_path.parent / f"{tmp_path.name}-users"
    users.write_text(f"alice:{hash_password('pw', 1000)}\n")
    (tmp_path / "README.md").write_text("PRIVATE-README\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".hidden").mkdir()
    (tmp_path / "sub" / "README").write_text("PUBLIC-README\n")
    cfg = make_config(tmp_path, auth=(("/README.md", str(users)),))
    async with memory_connection(cfg) as (client, _, _):
        r = await client.get("/")
        assert r.status == 200 and b"PRIVATE-README" not in r.body
        assert b'class="readme"' not in r.body
        assert (await client.get("/README.md")).status == 401
        sub = await client.get("/sub/")
        assert b"<pre>PUBLIC-README\n</pre>" in sub.body


async def test_a_huge_readme_is_linked_not_read(tmp_path: Path) -> None:
    (tmp_path / "README").write_bytes(b"y" * (README_MAX + 1))
    async with memory_connection(make_config(tmp_path)) as (client, _, _):
        r = await client.get("/")
    assert r.status == 200 and b"y" * 100 not in r.body
    assert b"larger than 256 KiB" in r.body and b'href="./README"' in r.body
