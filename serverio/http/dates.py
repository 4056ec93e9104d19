"""HTTP-date formatting and parsing (RFC 9110 §5.6.7).

Pure functions: the caller supplies the time.  Parsing accepts the three
historical formats a recipient must accept (IMF-fixdate, RFC 850, asctime) and
returns ``None`` for anything else, so callers can follow the "ignore invalid
dates" rules of §13.1.3 and §13.1.4.
"""

from __future__ import annotations

import calendar
import functools
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "MAX_HTTP_SECONDS",
    "MIN_HTTP_SECONDS",
    "format_http_date",
    "http_seconds",
    "parse_http_date",
]

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_LONG_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_NUM = {m: i + 1 for i, m in enumerate(_MONTHS)}


# IMF-fixdate has a four-digit year (RFC 9110 §5.6.7), so the instants it
# can name run from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
MIN_HTTP_SECONDS = -62_135_596_800
MAX_HTTP_SECONDS = 253_402_300_799
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def http_seconds(mtime_ns: int) -> int | None:
    """Whole seconds of a file time in nanoseconds, or ``None`` when no
    HTTP-date can express it.

    Filesystems store times far outside that span (tmpfs and btrfs accept
    any 64-bit value: year 11476, or before year 1); such a time is treated
    as unknown rather than formatted as a five-digit year or left to raise.
    """
    sec = mtime_ns // 1_000_000_000
    return sec if MIN_HTTP_SECONDS <= sec <= MAX_HTTP_SECONDS else None


def format_http_date(epoch_seconds: float) -> str:
    """IMF-fixdate, e.g. ``Sun, 06 Nov 1994 08:49:37 GMT``.

    Raises ValueError for an instant outside the four-digit years (see
    :func:`http_seconds`), so a malformed date is never sent.
    """
    sec = int(epoch_seconds)
    if not MIN_HTTP_SECONDS <= sec <= MAX_HTTP_SECONDS:
        raise ValueError("time outside the range of an HTTP-date")
    # The day's part ("Sun, 06 Nov 1994") is a function of the day alone and
    # memoised (every Last-Modified of a tree written the same day shares
    # it); the time of day is arithmetic (floor division: before 1970 too).
    day, rest = divmod(sec, 86_400)
    return f"{_day_part(day)} {rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d} GMT"


@functools.lru_cache(maxsize=1024)
def _day_part(day: int) -> str:
    """``Sun, 06 Nov 1994`` for the day ``day`` days after 1970-01-01 (UTC).
    Arithmetic, not time.gmtime: the C runtime's gmtime is platform bounded
    (Windows' refuses times before 1970 and after 3000 with OSError), while
    every instant of the four-digit years is valid here."""
    t = _EPOCH + timedelta(days=day)
    return f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year:04d}"


def _hms(s: str) -> tuple[int, int, int] | None:
    parts = s.split(":")
    if len(parts) != 3 or not all(len(p) == 2 and p.isascii() and p.isdigit() for p in parts):
        return None
    h, m, sec = (int(p) for p in parts)
    if h > 23 or m > 59 or sec > 60:  # 60: leap second, as RFC 5322 permits
        return None
    return h, m, sec


def _epoch(year: int, month: int, day: int, hms: tuple[int, int, int]) -> int | None:
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return calendar.timegm((year, month, day, *hms, 0, 0, 0))


def _isdigits(s: str, n: int) -> bool:
    return len(s) == n and s.isascii() and s.isdigit()


def parse_http_date(value: str) -> int | None:
    """Seconds since the epoch, or ``None`` if ``value`` is not an HTTP-date."""
    parts = value.strip().split()
    try:
        if len(parts) == 6 and parts[0][:-1] in _DAYS and parts[0].endswith(","):
            # IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
            _, day, mon, year, hms_s, gmt = parts
            hms = _hms(hms_s)
            if gmt != "GMT" or hms is None or mon not in _MONTH_NUM:
                return None
            if not (_isdigits(day, 2) and _isdigits(year, 4)):
                return None
            return _epoch(int(year), _MONTH_NUM[mon], int(day), hms)
        if len(parts) == 4 and parts[0][:-1] in _LONG_DAYS and parts[0].endswith(","):
            # RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
            _, dmy, hms_s, gmt = parts
            d = dmy.split("-")
            hms = _hms(hms_s)
            if gmt != "GMT" or hms is None or len(d) != 3 or d[1] not in _MONTH_NUM:
                return None
            if not (_isdigits(d[0], 2) and _isdigits(d[2], 2)):
                return None
            # §5.6.7: a two-digit year more than 50 years in the future is in
            # the past century.  Use a fixed pivot so the function stays pure.
            yy = int(d[2])
            full_year = 2000 + yy if yy < 70 else 1900 + yy
            return _epoch(full_year, _MONTH_NUM[d[1]], int(d[0]), hms)
        if len(parts) == 5 and parts[0] in _DAYS:
            # asctime: Sun Nov  6 08:49:37 1994
            _, mon, day, hms_s, year = parts
            hms = _hms(hms_s)
            if mon not in _MONTH_NUM or hms is None or not _isdigits(year, 4):
                return None
            if not (day.isascii() and day.isdigit() and 1 <= len(day) <= 2):
                return None
            return _epoch(int(year), _MONTH_NUM[mon], int(day), hms)
    except (ValueError, OverflowError):
        return None
    return None
