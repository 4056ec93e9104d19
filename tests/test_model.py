"""The model module and who may do what with it (issue 26, item 5).

* ``serverio/model/__init__.py`` holds the value types fs produces and the decision
  consumes, and imports nothing from ``fs/``, ``pipeline/`` or ``net/``;
  the decision (``serverio/model/decide.py``) imports nothing from ``fs/``.
* The decision stores nothing in the warm-file cache: what it would
  memoise comes back to the caller (``Prepared.memo``,
  ``CacheCandidate.learned``), which stores it and counts the hit.
* The decision does not recompute what the hop computed (the file's
  headers, Vary, the digest asked for): they travel on the Resolution.
* ``pipeline/content.py`` orchestrates only: the blocking reads, scans,
  compression and hashing are ``fs/jobs.py``'s.
"""

from __future__ import annotations

import ast
import time
from dataclasses import replace
from pathlib import Path

import pytest

import serverio
import serverio.model
import serverio.model.decide as decide_mod
import serverio.pipeline.content
from serverio.fs.filecache import FileCache
from serverio.fs.opener import RootOpener
from serverio.fs.prepare import resolve
from serverio.http.core import RequestFacts
from serverio.http.select import lookup
from serverio.http.target import parse_target
from serverio.model import FILE
from serverio.model.decide import cache_candidate, serve_cached
from serverio.pipeline.handler import prepare

from .conftest import make_config

LATER = float(int(time.time()) + 3600)  # every file is settled by then
PACKAGE = Path(serverio.__file__).resolve().parent


def _imports(path: Path) -> set[str]:
    """The serverio modules ``path`` imports (relative imports resolved)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            name = node.module or ""
            found.add(f"{base}.{name}" if node.level else name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("serverio")}


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("model/__init__.py", ("serverio.fs", "serverio.pipeline", "serverio.net")),
        ("model/decide.py", ("serverio.fs", "serverio.pipeline", "serverio.net")),
        ("model/reasons.py", ("serverio.fs", "serverio.pipeline", "serverio.net")),
    ],
)
def test_the_model_and_the_decision_import_no_edge(module: str, forbidden: tuple[str, ...]) -> None:
    imported = _imports(PACKAGE / module)
    assert imported, "the parser found no import at all"
    assert not {m for m in imported if m.startswith(forbidden)}


def test_content_orchestrates_and_does_no_file_io() -> None:
    # The follow-ups' blocking work is fs/jobs.py's; pipeline/content.py
    # only hands it to the work pool (an os.dup for a job's own descriptor
    # is the one descriptor call it makes).
    source = Path(serverio.pipeline.content.__file__).read_text()
    tree = ast.parse(source)
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    io = {"pread", "os.scandir", "os.fstat", "winstat.fstat", "os.close", "open", "hashlib.new"}
    assert not calls & io
    assert {c for c in calls if c.startswith("os.")} <= {"os.dup"}
    assert "import hashlib" not in source and "reads import" not in source


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "app.js").write_text("console.log(1);\n" * 200)
    (tmp_path / "app.js.gz").write_bytes(b"\x1f\x8b" + bytes(40))
    (tmp_path / "app.js.br").write_bytes(b"br" + bytes(30))
    return tmp_path


def _get(target: str, accept: str | None = None) -> RequestFacts:
    return RequestFacts(
        method=b"GET", target=parse_target(b"GET", target.encode()), accept_encoding=accept
    )


def test_the_decision_stores_nothing_and_the_caller_stores_what_it_returns(site: Path) -> None:
    cfg = make_config(site, precompressed=True)
    cache = FileCache(1 << 20, cfg.files.small_file_size)
    opener = RootOpener(str(site), follow_symlinks=False)
    try:
        first = _get("/app.js", "gzip, br")
        prepare(first, cfg, opener, LATER, "", cache, 0.0).close()  # fills the cache
        entry = cache.get("app.js")
        assert entry is not None and set(entry.sidecars) == {"gzip", "br"}
        hits = cache.stats.hits
        # An Accept-Encoding value never seen, over the codings looked at.
        req = _get("/app.js", "br;q=0.5, gzip")
        before = (dict(entry.choices), dict(entry.plain), entry.headers)
        hit = cache_candidate(cache, req, cfg)
        assert hit is not None and hit.learned and hit.coding == "gzip"
        served = serve_cached(hit, req, cfg, LATER, "")
        assert served.plan.status == 200
        assert dict(served.plan.headers)[b"content-encoding"] == b"gzip"
        # Nothing stored, nothing counted by the decision ...
        assert (dict(entry.choices), dict(entry.plain), entry.headers) == before
        assert cache.stats.hits == hits
        # ... what it would memoise is handed back instead,
        assert served.memo is not None and served.memo[0] == (b"GET", "gzip")
        served.close()
        # and the caller (the handler's steps) stores it and counts the hit.
        prepare(req, cfg, opener, LATER, "", cache, 0.0).close()
        assert entry.choices["br;q=0.5, gzip"][0] == "gzip"
        assert (b"GET", "gzip") in entry.plain
        assert cache.stats.hits == hits + 1
        again = cache_candidate(cache, req, cfg)
        assert again is not None and not again.learned  # from the memo now
    finally:
        opener.close()


def test_the_decision_does_not_recompute_what_the_hop_found(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = make_config(site, precompressed=True)
    opener = RootOpener(str(site), follow_symlinks=False)
    try:
        req = replace(_get("/app.js", "gzip"), want_repr_digest="sha-256=1")
        digesting = cfg.evolve(digest=True)
        res = resolve(lookup(req, digesting), digesting, opener, LATER)
        assert res.kind == FILE and res.vary and res.digest == "sha-256"

        def recomputed(*args: object) -> object:
            raise AssertionError("the decision recomputed a selection fact of the hop")

        monkeypatch.setattr(decide_mod, "file_headers", recomputed)
        monkeypatch.setattr(decide_mod, "digest_algorithm", recomputed)
        prepared = decide_mod.decide(res, req, cfg.evolve(digest=True), LATER)
        try:
            assert prepared.plan.status == 200 and prepared.todo is not None
            # The hop's, carried on the resolution: the digest of the gzip bytes.
            assert prepared.todo.coding == "gzip" and prepared.todo.digest == "sha-256"
        finally:
            prepared.close()
    finally:
        opener.close()
