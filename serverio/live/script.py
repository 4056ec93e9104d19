"""Live reload assets: the page script, its reserved paths, SSE framing.

Pure (no I/O) and free of :mod:`serverio.http.core`;
:func:`serverio.live.protocol.reserved_plan` answers the reserved paths
with these bytes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from ..http.target import quote_segment

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

# The page script.  One event stream per browser, shared by its tabs: the
# tab holding the Web Lock (navigator.locks, one holder per origin) is the
# leader: it opens the EventSource and relays each event to the other tabs
# over a BroadcastChannel; when it closes (or reloads) the lock passes to
# another tab, which opens its own stream.  Where Web Locks are missing (an
# insecure origin such as http://<LAN address>) the tabs elect the leader
# over the channel instead (a new leader within about a second).  A
# stream that fails reconnects with exponential back-off (0.5 s doubling to
# 10 s, with jitter); the first successful reconnection reloads (files may
# have changed while the server was down).
_SCRIPT_TEMPLATE = """(() => {
  if (window.__serverioLiveReload) return;
  const state = window.__serverioLiveReload = {leader: false, connected: false};
  const EVENTS = %(events)s;
  const NAME = "serverio-livereload " + EVENTS;
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
  // Opens the stream, reconnecting with back-off; returns a function that
  // closes it for good.
  const connect = (deliver) => {
    let delay = 500;
    let failed = false;
    let es = null;
    let timer = 0;
    const open = () => {
      es = new EventSource(EVENTS);
      es.addEventListener("open", () => {
        state.connected = true;
        if (failed) deliver({kind: "reload"});
        failed = false;
        delay = 500;
      });
      es.addEventListener("reload", () => deliver({kind: "reload"}));
      es.addEventListener("css", (e) => deliver({kind: "css", path: e.data}));
      es.onerror = () => {
        es.close();
        state.connected = false;
        failed = true;
        timer = setTimeout(open, delay * (0.75 + Math.random() / 2));
        delay = Math.min(delay * 2, 10000);
      };
    };
    open();
    return () => {
      clearTimeout(timer);
      es.close();
      state.connected = false;
    };
  };
  const channel = "BroadcastChannel" in window ? new BroadcastChannel(NAME) : null;
  if (channel && navigator.locks) {
    channel.onmessage = (e) => { if (e.data.kind === "event") apply(e.data.msg); };
    navigator.locks.request(NAME, () => new Promise(() => {
      state.leader = true;
      connect((msg) => { channel.postMessage({kind: "event", msg}); apply(msg); });
    }));
  } else if (channel) {
    // No Web Locks: elect over the channel.  A tab that has not heard a
    // leader for 2.5 s asks "who"; the leader answers at once (messages
    // are not throttled in background tabs, timers are); unanswered for
    // 0.4 s, the tab leads.  Of two leaders the smaller id stays: each
    // answers the other's announcement, the larger steps down.
    const me = Math.random();
    let stop = null;
    let heard = 0;
    let asked = Date.now();
    const beat = () => channel.postMessage({kind: "leader", id: me});
    channel.onmessage = (e) => {
      const m = e.data;
      if (m.kind === "event") {
        apply(m.msg);
      } else if (m.kind === "who") {
        if (stop) beat();
      } else if (m.kind === "leader") {
        heard = Date.now();
        if (stop && m.id < me) {
          stop();
          stop = null;
          state.leader = false;
        } else if (stop) {
          beat();
        }
      } else if (m.kind === "gone") {
        heard = 0;
      }
    };
    channel.postMessage({kind: "who"});
    setInterval(() => {
      const now = Date.now();
      if (stop) {
        beat();
      } else if (now - heard < 2500) {
        asked = 0;
      } else if (!asked) {
        asked = now;
        channel.postMessage({kind: "who"});
      } else if (now - asked >= 400) {
        asked = 0;
        state.leader = true;
        stop = connect((msg) => { channel.postMessage({kind: "event", msg}); apply(msg); });
        beat();
      }
    }, 500);
    addEventListener("pagehide", () => { if (stop) channel.postMessage({kind: "gone"}); });
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
    script_source: bytes  # the tag's CSP source expression: 'sha256-...'


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
        script_source=("'sha256-" + b64 + "'").encode("ascii"),
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
