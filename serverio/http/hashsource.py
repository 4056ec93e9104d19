"""CSP hash-sources (CSP Level 3 §2.3.1): the one way every page names
the inline script or style it allows (the listing, its tools, the
uploader, the error and sign-in pages).  Pure; a leaf module, so the
page assets and the pages that import them can all use it."""

from __future__ import annotations

import base64
import hashlib

__all__ = ["sha256_source"]


def sha256_source(text: str) -> str:
    """A CSP hash-source for an inline element's exact text."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"
