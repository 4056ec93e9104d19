"""Live reload assets: the page script, its reserved paths, SSE framing.

Pure (no I/O) and free of :mod:`serverio.http.core`, which routes the
reserved paths (:func:`serverio.http.core.reserved_plan`) with these bytes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from .target import quote_segment

__all__ = [
    "SSE_KEEPALIVE",
    "SSE_PREAMBLE",
    "LiveAssets",
    "event_path",
    "live_assets",
    "sse_css",
    "sse_reload",
]

# A comment line (RFC-less, WHATWG HTML §9.2.6: lines starting with ':' are
# ignored by EventSource): keeps proxies and NAT state from timing out.
SSE_KEEPALIVE: Final = b": keep-alive\n\n"
# Sent first: the reconnection delay EventSource uses (ms), and a comment.
SSE_PREAMBLE: Final = b"retry: 1000\n: serverio live reload\n\n"

_SCRIPT_TEMPLATE = """(() => {
  if (window.__serverioLiveReload) return;
  window.__serverioLiveReload = true;
  const EVENTS = %(events)s;
  const NAME = "serverio-livereload";
  const apply = (msg) => {
    if (msg.kind === "css") {
      let swapped = false;
      for (const link of document.querySelectorAll('link[rel~="stylesheet"][href]')) {
        const u = new URL(link.href, location.href);
        if (u.origin === location.origin && u.pathname === msg.path) {
          u.searchParams.set("serverio-reload", String(Date.now()));
          link.href = u.href;
          swapped = true;
        }
      }
      if (swapped) return;
    }
    location.reload();
  };
  const connect = (deliver) => {
    let delay = 500;
    let failed = false;
    const open = () => {
      const es = new EventSource(EVENTS);
      es.addEventListener("open", () => {
        if (failed) deliver({kind: "reload"});
        delay = 500;
      });
      es.addEventListener("reload", () => deliver({kind: "reload"}));
      es.addEventListener("css", (e) => deliver({kind: "css", path: e.data}));
      es.onerror = () => {
        es.close();
        failed = true;
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      };
    };
    open();
  };
  if ("BroadcastChannel" in window && navigator.locks) {
    // One stream per browser: the tab holding the lock connects and relays.
    const channel = new BroadcastChannel(NAME);
    channel.onmessage = (e) => apply(e.data);
    navigator.locks.request(NAME, () => new Promise(() => {
      connect((msg) => { channel.postMessage(msg); apply(msg); });
    }));
  } else {
    connect(apply);
  }
})();
"""


@dataclass(frozen=True, slots=True)
class LiveAssets:
    """What one ``--watch-prefix`` produces: paths, script, tag, CSP sources."""

    prefix_segment: str
    events_path: str
    script: bytes
    script_etag: str
    tag: bytes  # the inline <script> element injected into pages
    csp_sources: bytes  # appended to a page's CSP so that the tag may run


@functools.lru_cache(maxsize=8)
def live_assets(prefix: str) -> LiveAssets:
    events = prefix + "/events"
    # JSON-ish string literal: the prefix is validated to [A-Za-z0-9._-].
    script = (_SCRIPT_TEMPLATE % {"events": '"' + events + '"'}).encode("ascii")
    digest = hashlib.sha256(script).digest()
    b64 = base64.b64encode(digest).decode("ascii")
    return LiveAssets(
        prefix_segment=prefix[1:],
        events_path=events,
        script=script,
        script_etag='"lr-' + digest[:12].hex() + '"',
        tag=b"<script>" + script + b"</script>",
        csp_sources=("script-src 'sha256-" + b64 + "'; connect-src 'self'").encode("ascii"),
    )


def event_path(relpath: str) -> str:
    """The URL path of a changed file, encoded as a listing links it."""
    return "/" + "/".join(quote_segment(s) for s in relpath.split("/"))


def sse_reload() -> bytes:
    # EventSource dispatches an event only when its data is not empty.
    return b"event: reload\ndata: reload\n\n"


def sse_css(path: str) -> bytes:
    # ``path`` is percent-encoded (event_path): no CR or LF can reach the frame.
    return b"event: css\ndata: " + path.encode("ascii") + b"\n\n"
