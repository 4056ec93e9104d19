"""``--qr``: the URL as a QR code on the terminal (miniserve's ``-q``).

The symbol comes from ``segno`` (pure Python, no dependencies; an optional
extra, ``serverio[qr]``, docs/architecture.md says why): byte mode, error
correction level M, the smallest version that fits, mask chosen by the
ISO/IEC 18004 penalty rules.  It is drawn with Unicode half blocks, two
modules per character cell, with the 4-module quiet zone the standard asks
for.  Light modules are drawn as blocks (in the terminal's text colour)
and dark ones as spaces (its background), as ``qrencode -t UTF8`` does:
right on the usual light-on-dark terminal, and phone scanners read the
inverted form too.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError

__all__ = ["QUIET", "check_qr_available", "qr_matrix", "qr_text"]

QUIET = 4  # modules of quiet zone on each side (ISO/IEC 18004 §6.3.8)
# (top light, bottom light) -> the cell's character.
_CELLS = {
    (True, True): "\u2588",
    (True, False): "\u2580",
    (False, True): "\u2584",
    (False, False): " ",
}


def check_qr_available() -> None:
    """ConfigError (one line) when ``segno`` is not installed."""
    try:
        import segno  # noqa: F401
    except ImportError:
        raise ConfigError("--qr needs the 'segno' package: pip install 'serverio[qr]'") from None


def qr_matrix(data: str) -> list[list[bool]]:
    """The symbol of ``data`` (byte mode, level M), True = dark, with the quiet zone."""
    check_qr_available()
    import segno

    qr = segno.make_qr(data.encode(), error="m", boost_error=False, mode="byte")
    rows = [[bool(v) for v in row] for row in qr.matrix]
    width = len(rows[0]) + 2 * QUIET
    blank = [False] * width
    body = [[False] * QUIET + r + [False] * QUIET for r in rows]
    return [list(blank) for _ in range(QUIET)] + body + [list(blank) for _ in range(QUIET)]


def qr_text(data: str) -> str:
    """The symbol as lines of half blocks (light modules drawn, module doc)."""
    m: Sequence[Sequence[bool]] = qr_matrix(data)
    if len(m) % 2:
        m = [*m, [False] * len(m[0])]  # the last cell row's bottom half: quiet zone
    lines = []
    for top, bottom in zip(m[0::2], m[1::2], strict=True):
        lines.append("".join(_CELLS[(not t, not b)] for t, b in zip(top, bottom, strict=True)))
    return "\n".join(lines)
