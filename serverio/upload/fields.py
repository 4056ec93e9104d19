"""The request fields the uploads read, registered here once.

Raw values (:func:`serverio.http.extra.request_field`); the uploads parse
them where they use them.
"""

from __future__ import annotations

from typing import Final

from ..http.extra import request_field

__all__ = [
    "CONTENT_DIGEST",
    "CONTENT_RANGE",
    "CONTENT_TYPE",
    "ORIGIN",
    "REPR_DIGEST",
    "SEC_FETCH_SITE",
]

# The digests a PUT's content must match (RFC 9530 §2, §3): both name the
# same bytes (a PUT's content is sent without a content coding).
CONTENT_DIGEST: Final = request_field("content-digest")
REPR_DIGEST: Final = request_field("repr-digest")
# A PUT's Content-Range: a partial PUT, refused with 400 (RFC 9110 §9.3.4).
CONTENT_RANGE: Final = request_field("content-range")
# The upload form (a multipart POST): its Content-Type (the boundary), and
# the CSRF rule's Origin (RFC 6454 §7) and Sec-Fetch-Site (Fetch Metadata).
CONTENT_TYPE: Final = request_field("content-type")
ORIGIN: Final = request_field("origin")
SEC_FETCH_SITE: Final = request_field("sec-fetch-site")
