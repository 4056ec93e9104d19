"""The listing's uploader (serverio's own resumable-upload script) in
headless Chromium through Playwright, behind a loopback relay the test cuts.

* three files (one of many parts: ``--upload-chunk-size`` 256 KiB) chosen
  and uploaded in parallel; the network dropped mid-way (the relay cut);
  nothing at the target names meanwhile; the page left and opened again;
  the interrupted uploads listed; the same files chosen again continue at
  ``HEAD``'s offset (no new creation, a first ``PATCH`` past 0);
  byte-identical;
* a folder chosen with the folder picker (``webkitdirectory``) and a
  folder tree dropped on the page (``webkitGetAsEntry`` entries walked):
  subfolders made, every file byte-identical.

Skipped, with the reason, where Chromium or Playwright is missing
(``.ci/run`` installs both).  Only 127.0.0.1 URLs are loaded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from .browser_kit import axe_violations, shot
from .conftest import make_config, running_server
from .upload_relay_kit import Relay, browser_marks, in_chromium

pytestmark = browser_marks

_CHUNK = 256 * 1024


def _wait(predicate: Callable[[], bool], limit: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _progress_of(page: Any, name: str) -> float:
    value = page.evaluate(
        """n => { const r = [...document.querySelectorAll('.uploads ul li')]
             .find(li => li.firstChild && li.firstChild.textContent.trim() === n);
           return r ? r.querySelector('progress').value : -1 }""",
        name,
    )
    return float(value)


async def test_three_files_survive_a_dropped_network_and_a_reload(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    picked = tmp_path / "picked"
    picked.mkdir()
    files = {
        "big.bin": os.urandom(6 * 1024 * 1024 + 12345),  # 25 parts
        "second.bin": os.urandom(1536 * 1024 + 7),
        "third \u00e9 #1.txt": os.urandom(1280 * 1024),
    }
    paths = []
    for name, data in files.items():
        (picked / name).write_bytes(data)
        paths.append(str(picked / name))
    cfg = make_config(root, upload=True, min_free_space=0, upload_chunk_size=_CHUNK)
    async with running_server(cfg) as (_, port), trio.open_nursery() as nursery:
        relay = Relay(port, rate=768 * 1024)
        await nursery.start(relay.serve)
        url = f"http://127.0.0.1:{relay.port}/in/"
        target = root / "in"

        def drive(browser: Any) -> dict[str, Any]:
            seen: dict[str, Any] = {"dialogs": [], "after": []}
            ctx = browser.new_context()
            page = ctx.new_page()

            def dialog(d: Any) -> None:
                seen["dialogs"].append(d.type)
                d.accept()

            page.on("dialog", dialog)
            page.goto(url)
            page.set_input_files("form.files input[name=file]", paths)
            page.click("form.files button[type=submit]")
            _wait(lambda: _progress_of(page, "big.bin") > 1024 * 1024, what="big.bin past 1 MiB")
            trio.from_thread.run_sync(relay.cut)
            page.wait_for_selector(".uploads li[data-state=retry]", timeout=30_000)
            # Mid-way: nothing at any target name, the parts on disk hidden.
            seen["early"] = sorted(p.name for p in target.iterdir())
            seen["progress"] = {n: _progress_of(page, n) for n in files}
            # The total: one bar over every file's bytes, and a summary.
            seen["total"] = page.evaluate(
                """() => { const b = document.querySelector('.uploads > p > progress');
                   const rows = [...document.querySelectorAll('.uploads ul li progress')];
                   return [b.value, b.max, b.getAttribute('aria-label'),
                           b.parentElement.querySelector('span').textContent,
                           rows.reduce((s, r) => s + r.value, 0)] }"""
            )
            # The upload panel mid-way (rows, bars, buttons): axe-core finds
            # nothing serious or critical; a screenshot for the artefacts.
            seen["axe"] = axe_violations(page)
            shot(page, "uploader-mid-way")
            # Leave mid-upload (beforeunload asks; accepted), then come back.
            page.goto("about:blank")
            trio.from_thread.run_sync(relay.restore)

            def on_request(r: Any) -> None:
                if r.method in ("PUT", "PATCH", "HEAD"):
                    seen["after"].append((r.method, r.url, dict(r.headers)))

            page.on("request", on_request)
            page.goto(url)
            seen["pending"] = page.eval_on_selector_all(
                ".uploads ul li[data-key]", "els => els.map(e => e.textContent)"
            )
            page.set_input_files("form.files input[name=file]", paths)
            page.click("form.files button[type=submit]")
            _wait(
                lambda: (
                    all((target / n).is_file() for n in files)
                    and all((target / n).stat().st_size == len(d) for n, d in files.items())
                ),
                what="every file complete",
            )
            page.wait_for_load_state()
            ctx.close()
            return seen

        seen = await in_chromium(drive)
        relay.cut()
        nursery.cancel_scope.cancel()
    assert not [n for n in seen["early"] if not n.startswith(".")], seen["early"]
    assert any(n.startswith(".serverio-tmp-up-") for n in seen["early"])
    assert 0 < seen["progress"]["big.bin"] < len(files["big.bin"])
    # In parallel: every file had bytes on their way when the network dropped.
    assert all(v > 0 for v in seen["progress"].values()), seen["progress"]
    value, top, label, summary, rows = seen["total"]
    assert top == sum(len(d) for d in files.values()) and label == "All uploads"
    assert value == rows > 0  # the sum of the rows' bars, read at once
    assert summary.endswith(" \u00b7 3 of 3 left"), summary
    assert seen["axe"] == [], seen["axe"]
    assert "beforeunload" in seen["dialogs"]
    assert any("big.bin" in p for p in seen["pending"]), seen["pending"]
    for name, data in files.items():
        assert (target / name).read_bytes() == data, name
    # Resumed, not restarted: after the reload no creation (PUT) of big.bin;
    # its first PATCH continued past 0 (HEAD's offset).
    big = [(m, h) for m, u, h in seen["after"] if "big.bin" in u or "/.serverio/uploads/" in u]
    assert not [m for m, u, _ in seen["after"] if m == "PUT" and u.endswith("/big.bin")]
    offsets = [int(h["upload-offset"]) for m, h in big if m == "PATCH"]
    assert offsets and max(offsets) > 0
    assert sorted(p.name for p in target.iterdir()) == sorted(files)  # no temporary left


_DROP = """async spec => {
  const pattern = (seed, n) => { const b = new Uint8Array(n);
    for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7 + (i >> 8)) & 255; return b; };
  const file = (name, seed, n) => { const f = new File([pattern(seed, n)], name);
    return { isFile: true, isDirectory: false, name, file: (ok) => ok(f) }; };
  const dir = (name, kids) => { let done = false;
    return { isFile: false, isDirectory: true, name,
      createReader: () => ({ readEntries: (ok) => { ok(done ? [] : kids); done = true; } }) }; };
  const build = s => s.kids ? dir(s.name, s.kids.map(build)) : file(s.name, s.seed, s.size);
  const items = spec.map(s => ({ webkitGetAsEntry: () => build(s) }));
  const e = new Event('drop', { bubbles: true, cancelable: true });
  Object.defineProperty(e, 'dataTransfer', { value: { items, files: [] } });
  document.body.dispatchEvent(e);
}"""


# Markup in a name: the server's name rules refuse it (403); the page shows
# it as text on the failed row.  The other name is accepted: its "&", "'",
# "#", "%41" and "+" must survive the URL encoding.
_MARKUP = "<img src=x onerror=alert(1)>.txt"
_HOSTILE = "&amp; 'q' #1 %41 + \u00e9.txt"


def _pattern(seed: int, n: int) -> bytes:
    return bytes((i * 31 + seed * 7 + (i >> 8)) & 255 for i in range(n))


async def test_a_folder_picked_and_a_folder_dropped_make_their_subfolders(tmp_path: Path) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    tree = tmp_path / "album"
    (tree / "sub" / "deeper").mkdir(parents=True)
    content = {
        "a.txt": b"top level\n",
        "sub/b.bin": os.urandom(700_000),
        "sub/deeper/c \u00e9.bin": os.urandom(300_001),
    }
    for rel, data in content.items():
        (tree / rel).write_bytes(data)
    drop = [
        {
            "name": "dropped",
            "kids": [
                {"name": "x.bin", "seed": 1, "size": 600_000},
                {"name": "inner", "kids": [{"name": "y.txt", "seed": 2, "size": 1234}]},
                {"name": "empty", "kids": []},
            ],
        },
        {"name": "loose.bin", "seed": 3, "size": 5000},
        # Hostile names: markup is a name like any other (shown as text);
        # a dot segment is refused on the page, nothing is sent for it.
        {"name": _HOSTILE, "seed": 5, "size": 77},
        {"name": _MARKUP, "seed": 7, "size": 7},
        {"name": "..", "kids": [{"name": "escaped.txt", "seed": 6, "size": 10}]},
    ]
    cfg = make_config(root, upload=True, min_free_space=0, upload_chunk_size=_CHUNK)
    async with running_server(cfg) as (_, port):
        url = f"http://127.0.0.1:{port}/in/"
        target = root / "in"

        def drive(browser: Any) -> dict[str, Any]:
            seen: dict[str, Any] = {}
            page = browser.new_page()
            page.on("dialog", lambda d: d.accept())
            page.goto(url)
            page.set_input_files(".upload input[webkitdirectory]", str(tree))
            _wait(
                lambda: all(
                    (target / "album" / r).is_file()
                    and (target / "album" / r).stat().st_size == len(d)
                    for r, d in content.items()
                ),
                what="the picked folder",
            )
            page.wait_for_load_state()
            page.goto(url)
            page.evaluate(_DROP, drop)
            want = {
                "dropped/x.bin": 600_000,
                "dropped/inner/y.txt": 1234,
                "loose.bin": 5000,
                _HOSTILE: 77,
            }
            _wait(
                lambda: all(
                    (target / r).is_file() and (target / r).stat().st_size == n
                    for r, n in want.items()
                ),
                what="the dropped tree",
            )
            _wait(lambda: (target / "dropped" / "empty").is_dir(), what="the empty folder")
            page.wait_for_function(
                "document.querySelectorAll('.uploads li[data-state=failed]').length === 2"
            )
            seen["imgs"] = page.evaluate("document.querySelectorAll('.uploads img').length")
            seen["refused"] = page.eval_on_selector_all(
                ".uploads li[data-state=failed]", "els => els.map(e => e.textContent)"
            )
            return seen

        seen = await in_chromium(drive)
    assert seen["imgs"] == 0
    assert any("../escaped.txt" in r and "not a safe name" in r for r in seen["refused"])
    assert any(r.startswith(_MARKUP) and "failed" in r for r in seen["refused"]), seen["refused"]
    assert not (root / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    assert (target / _HOSTILE).read_bytes() == _pattern(5, 77)
    for rel, data in content.items():
        assert (target / "album" / rel).read_bytes() == data, rel
    assert (target / "dropped" / "x.bin").read_bytes() == _pattern(1, 600_000)
    assert (target / "dropped" / "inner" / "y.txt").read_bytes() == _pattern(2, 1234)
    assert (target / "loose.bin").read_bytes() == _pattern(3, 5000)
    leftovers = [p for p in target.rglob(".serverio-tmp-*")]
    assert not leftovers


@pytest.mark.parametrize("size", [0])
async def test_an_empty_file_is_uploaded_too(tmp_path: Path, size: int) -> None:
    root = tmp_path / "www"
    root.mkdir()
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    cfg = make_config(root, upload=True, min_free_space=0)
    async with running_server(cfg) as (_, port):

        def drive(browser: Any) -> None:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.set_input_files("form.files input[name=file]", str(empty))
            page.click("form.files button[type=submit]")
            _wait(lambda: (root / "empty.txt").is_file(), what="the empty file")

        await in_chromium(drive)
    assert (root / "empty.txt").read_bytes() == b"" * size


async def test_pause_all_holds_the_offset_and_resume_all_finishes(tmp_path: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    data = os.urandom(3 * 1024 * 1024 + 5)
    src = tmp_path / "paused.bin"
    src.write_bytes(data)
    cfg = make_config(root, upload=True, min_free_space=0, upload_chunk_size=_CHUNK)
    async with running_server(cfg) as (_, port), trio.open_nursery() as nursery:
        relay = Relay(port, rate=512 * 1024)
        await nursery.start(relay.serve)

        def temp_size() -> int:
            return sum(
                p.stat().st_size
                for p in root.iterdir()
                if p.name.startswith(".serverio-tmp-up-") and not p.name.endswith(".info")
            )

        def drive(browser: Any) -> dict[str, Any]:
            seen: dict[str, Any] = {}
            page = browser.new_page()
            page.on("dialog", lambda d: d.accept())
            page.goto(f"http://127.0.0.1:{relay.port}/")
            page.set_input_files("form.files input[name=file]", str(src))
            page.click("form.files button[type=submit]")
            _wait(lambda: _progress_of(page, "paused.bin") > 512 * 1024, what="a first part")
            page.click("text=Pause all")
            page.wait_for_selector(".uploads li[data-state=paused]")
            time.sleep(0.5)  # what was in flight settles on the server
            seen["held"] = temp_size()
            time.sleep(1.0)
            seen["still"] = temp_size()
            seen["target_then"] = (root / "paused.bin").exists()
            trio.from_thread.run_sync(relay.restore)  # unpaced from here
            page.click("text=Resume all")
            _wait(
                lambda: (
                    (root / "paused.bin").is_file()
                    and (root / "paused.bin").stat().st_size == len(data)
                ),
                what="the resumed file",
            )
            return seen

        seen = await in_chromium(drive)
        relay.cut()
        nursery.cancel_scope.cancel()
    assert 0 < seen["held"] == seen["still"] < len(data)  # paused: nothing more arrives
    assert not seen["target_then"]
    assert (root / "paused.bin").read_bytes() == data
