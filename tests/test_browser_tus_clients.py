"""Real browser clients of resumable uploads against serverio, in headless
Chromium (Playwright), through a loopback relay the test cuts mid-way:

* tus-js-client with ``protocol: "tus-v1"`` (tus 1.0: POST to the folder,
  HEAD, PATCH ``application/offset+octet-stream``);
* tus-js-client with ``protocol: "ietf-draft-05"`` (its setting for the
  IETF draft: POST to the folder with ``Upload-Complete: ?0``, interop
  version 6, HEAD, PATCH ``application/partial-upload``);
* Uppy (``@uppy/core`` with ``@uppy/tus``).

Each uploads three files of ``SERVERIO_TUS_JS_MIB`` MiB (40, the issue's
size) in parallel; when about half of the bytes went through, the relay
drops every connection and refuses new ones for a second; the clients
retry (``HEAD`` for the offset, then the rest), and every file arrives
byte-identical, nothing at its name before.  The clients are npm packages
(tests/js/package.json, ``npm ci`` in ``.ci/run``) bundled for the browser
by esbuild; the page is fulfilled by Playwright on the server's origin (no
CORS in the way), its requests go through the relay.

Skipped, with the reason, where Chromium, Playwright or tests/js/node_modules
is missing (``.ci/run`` installs all three).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from .conftest import make_config, running_server
from .upload_relay_kit import Relay, browser_marks, in_chromium

_JS = Path(__file__).resolve().parent / "js"
_ESBUILD = _JS / "node_modules" / ".bin" / "esbuild"
_MIB = int(os.environ.get("SERVERIO_TUS_JS_MIB", "40"))
_NAMES = ("one.bin", "two \u00e9.bin", "three.bin")

pytestmark = [
    *browser_marks,
    pytest.mark.skipif(
        not _ESBUILD.exists(), reason="tests/js/node_modules missing (cd tests/js && npm ci)"
    ),
]

# Starts the uploads and returns at once; window.__state says how they end.
_START = """({client, endpoint}) => {
  const files = [...document.querySelector('input[type=file]').files];
  const retryDelays = [0, 300, 1000, 2000, 3000, 5000, 5000, 5000, 5000, 5000];
  window.__state = 'running';
  const end = p => p.then(() => { window.__state = 'done'; },
                          e => { window.__state = 'error: ' + e; });
  if (client === 'uppy') {
    const uppy = new judge.Uppy({ autoProceed: false })
      .use(judge.Tus, { endpoint, retryDelays, limit: 3 });
    for (const f of files) uppy.addFile({ name: f.name, type: f.type, data: f, source: 'Local' });
    end(uppy.upload().then(r => {
      if (r.failed.length) throw new Error(r.failed.map(f => f.error).join('; '));
    }));
    return;
  }
  end(Promise.all(files.map(file => new Promise((ok, no) => {
    new judge.tus.Upload(file, {
      endpoint, protocol: client, retryDelays, metadata: { filename: file.name },
      removeFingerprintOnSuccess: true, onError: no, onSuccess: ok,
    }).start();
  }))));
}"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("js") / "judges.js"
    subprocess.run(
        [
            str(_ESBUILD),
            str(_JS / "judges.js"),
            "--bundle",
            "--format=iife",
            "--platform=browser",
            "--log-level=warning",
            f"--outfile={out}",
        ],
        check=True,
        timeout=120,
    )
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sources")
    made = {}
    for name in _NAMES:
        path = folder / name
        with path.open("wb") as f:
            for _ in range(_MIB):
                f.write(os.urandom(1024 * 1024))
        made[name] = path
    return made


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


@pytest.mark.parametrize("client", ["tus-v1", "ietf-draft-05", "uppy"])
async def test_three_files_dropped_mid_way_resume_byte_identical(
    tmp_path: Path, client: str, bundle: str, sources: dict[str, Path]
) -> None:
    root = tmp_path / "www"
    (root / "in").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    cfg = make_config(root, upload=True, min_free_space=0, secret_file=str(secret))
    total = _MIB * 1024 * 1024 * len(_NAMES)
    target = root / "in"
    async with running_server(cfg) as (_, port), trio.open_nursery() as nursery:
        relay = Relay(port, rate=6 * 1024 * 1024)
        await nursery.start(relay.serve)
        origin = f"http://127.0.0.1:{relay.port}"

        def drive(browser: Any) -> dict[str, Any]:
            seen: dict[str, Any] = {"after": [], "cut": False}
            page = browser.new_page()
            page.route(
                f"{origin}/judge.html",
                lambda route: route.fulfill(
                    content_type="text/html",
                    body="<!DOCTYPE html><title>judge</title><input type=file multiple>",
                ),
            )

            def on_request(r: Any) -> None:
                if seen["cut"] and r.method in ("HEAD", "PATCH", "POST"):
                    seen["after"].append((r.method, r.url, dict(r.headers)))

            page.on("request", on_request)
            page.goto(f"{origin}/judge.html")
            page.add_script_tag(content=bundle)
            page.set_input_files("input[type=file]", [str(sources[n]) for n in _NAMES])
            page.evaluate(_START, {"client": client, "endpoint": f"{origin}/in/"})
            deadline = time.monotonic() + 120
            while relay.relayed < total // 2:
                assert page.evaluate("window.__state") == "running", page.evaluate("window.__state")
                assert time.monotonic() < deadline, "the uploads did not get half-way"
                time.sleep(0.05)
            seen["cut"] = True
            trio.from_thread.run_sync(relay.cut)
            seen["at_cut"] = sorted(p.name for p in target.iterdir())
            time.sleep(1.0)
            trio.from_thread.run_sync(relay.restore)
            page.wait_for_function("window.__state !== 'running'", timeout=180_000)
            seen["state"] = page.evaluate("window.__state")
            seen["relayed"] = relay.relayed
            return seen

        seen = await in_chromium(drive, limit=300)
        relay.cut()
        nursery.cancel_scope.cancel()
    assert seen["state"] == "done", seen["state"]
    # Mid-way nothing was at any target name (only the hidden temporaries).
    assert not [n for n in seen["at_cut"] if not n.startswith(".")], seen["at_cut"]
    assert any(n.startswith(".serverio-tmp-up-") for n in seen["at_cut"])
    for name, path in sources.items():
        assert (target / name).stat().st_size == path.stat().st_size, name
        assert _digest(target / name) == _digest(path), name
    assert sorted(p.name for p in target.iterdir()) == sorted(_NAMES)  # no temporary left
    # Resumed, not restarted: after the cut the clients asked for the offset
    # (HEAD) and sent the rest from it (a PATCH past 0), no new creation,
    # and far fewer than all the bytes went through the relay twice.
    after = seen["after"]
    assert any(m == "HEAD" for m, _, _ in after), after
    assert any(m == "PATCH" and int(h.get("upload-offset", "0")) > 0 for m, _, h in after)
    assert not [u for m, u, _ in after if m == "POST"], "an upload was created again"
    assert seen["relayed"] < total * 1.5
