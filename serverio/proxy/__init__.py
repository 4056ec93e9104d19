"""The reverse proxy (``--proxy PREFIX=URL``, ``[[proxy]]``): a vertical
feature on the pipeline's ``proxy`` hook (docs/architecture.md "The
reverse proxy").

* :mod:`serverio.proxy.routes` (pure): the longest-prefix match, the
  upstream target, the fields up and down (RFC 9110 §7.6);
* :mod:`serverio.proxy.client`: the HTTP/1.1 client on h11 and the pool
  of keep-alive connections per upstream;
* :mod:`serverio.proxy.service`: :class:`ProxyService`, the hook.
"""

from __future__ import annotations

from .service import ProxyService

__all__ = ["ProxyService"]
