"""The request fields the login feature reads, registered here once.

Raw values (:func:`serverio.http.extra.request_field`).  ``Cookie`` lines
arrive joined with ``", "`` (HTTP/2 splits the field into crumbs, RFC
9113 §8.2.3): :func:`serverio.login.cookies.cookie_value` splits on both
``;`` and ``,`` (no cookie-octet is a comma, RFC 6265 §4.1.1).  The
trusted user header's name is the configuration's
(``--trusted-user-header``): registered by the login service when it is
built, before the server serves.
"""

from __future__ import annotations

from typing import Final

from ..http.extra import request_field

__all__ = ["CONTENT_TYPE", "COOKIE", "ORIGIN", "SEC_FETCH_SITE"]

# The session, sign-in and share-password cookies (RFC 6265 §5.4).
COOKIE: Final = request_field("cookie")
# A form's type (urlencoded only), and a POST's CSRF checks: Origin (RFC
# 6454 §7) and Sec-Fetch-Site (Fetch Metadata).
CONTENT_TYPE: Final = request_field("content-type")
ORIGIN: Final = request_field("origin")
SEC_FETCH_SITE: Final = request_field("sec-fetch-site")
