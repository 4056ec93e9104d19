"""The request fields WebDAV reads (RFC 4918 §10), registered here once.

Raw values, parsed by :mod:`serverio.dav.ifheader`; the scan keeps them
because they are registered (:func:`serverio.http.extra.request_field`).
A Destination is compared with the request's own Host
(:data:`serverio.http.extra.HOST`, kept beside any registered field).
"""

from __future__ import annotations

from typing import Final

from ..http.extra import request_field

__all__ = ["DAV_IF", "DEPTH", "DESTINATION", "LOCK_TOKEN", "OVERWRITE", "TIMEOUT"]

DEPTH: Final = request_field("depth")  # §10.2
DESTINATION: Final = request_field("destination")  # §10.3
DAV_IF: Final = request_field("if")  # §10.4
LOCK_TOKEN: Final = request_field("lock-token")  # §10.5
OVERWRITE: Final = request_field("overwrite")  # §10.6
TIMEOUT: Final = request_field("timeout")  # §10.7
