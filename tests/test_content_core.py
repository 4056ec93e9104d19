"""Per-representation decisions of the pure core (no event loop).

Validators stay in serverio.http.core's single evaluate function; these tables
check that each content coding is its own representation there: its own
strong ETag, its own 304, If-Range that never mixes codings, Vary on every
response (identity too), and listings with a weak validator.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from serverio.config import Config
from serverio.http.core import (
    FileFacts,
    FileSpan,
    Plan,
    RequestFacts,
    coded_etag,
    decide_file,
    decide_generated,
    precondition_plan,
    spa_fallback_applies,
)
from serverio.http.dates import format_http_date
from serverio.http.target import parse_target

NOW = 1_700_000_000.0
FILE = FileFacts(size=1000, mtime_ns=1_600_000_000 * 10**9, dev=1, ino=2, content_type="text/css")
LM = format_http_date(1_600_000_000)
ID = FILE.etag
GZ = coded_etag(ID, "gzip")
BR = coded_etag(ID, "br")


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return Config.of(directory=str(tmp_path), cache_control="max-age=60").validate()


def req(
    target: str = "/a.css",
    method: bytes = b"GET",
    fields: dict[str, str] | None = None,
    **kw: str,
) -> RequestFacts:
    all_fields = {**(fields or {}), **kw}
    return RequestFacts(method=method, target=parse_target(method, target.encode()), **all_fields)  # type: ignore[arg-type]


def h(plan: Plan, name: bytes) -> bytes | None:
    values = [v for k, v in plan.headers if k == name]
    assert len(values) <= 1, f"{name!r} repeated"
    return values[0] if values else None


def test_coded_etag() -> None:
    assert ID.startswith('"') and GZ == ID[:-1] + '-gzip"'
    assert coded_etag(ID, "") == ID
    assert len({ID, GZ, BR}) == 3


@pytest.mark.parametrize(
    ("coding", "headers", "status"),
    [
        # If-None-Match matches only the representation it names.
        ("gzip", {"if_none_match": GZ}, 304),
        ("gzip", {"if_none_match": f"W/{GZ}"}, 304),  # weak comparison (§13.1.2)
        ("gzip", {"if_none_match": ID}, 200),
        ("gzip", {"if_none_match": BR}, 200),
        ("", {"if_none_match": GZ}, 200),
        ("", {"if_none_match": ID}, 304),
        ("br", {"if_none_match": f"{ID}, {BR}"}, 304),
        ("gzip", {"if_none_match": "*"}, 304),
        # If-Match: strong comparison with the coded tag.
        ("gzip", {"if_match": GZ}, 200),
        ("gzip", {"if_match": ID}, 412),
        ("gzip", {"if_match": f"W/{GZ}"}, 412),
        # Dates are shared by the representations of one file.
        ("gzip", {"if_modified_since": LM}, 304),
        ("gzip", {"if_unmodified_since": format_http_date(1_600_000_000 - 1)}, 412),
        # If-None-Match present: If-Modified-Since not evaluated (§13.2.2).
        ("gzip", {"if_none_match": ID, "if_modified_since": LM}, 200),
    ],
)
def test_preconditions_per_representation(
    cfg: Config, coding: str, headers: dict[str, str], status: int
) -> None:
    data = b"x" * 50 if coding else None
    plan = decide_file(req(fields=headers), FILE, cfg, NOW, coding=coding, data=data, vary=True)
    assert plan.status == status
    pre = precondition_plan(req(fields=headers), FILE, cfg, NOW, coding=coding, vary=True)
    assert (pre is None) == (status == 200)
    if status == 304:
        # §15.4.5: the 304 repeats the validators of the 200 it stands for.
        assert h(plan, b"etag") == (coded_etag(ID, coding)).encode()
        assert h(plan, b"vary") == b"Accept-Encoding"
        assert h(plan, b"cache-control") == b"max-age=60"
        assert h(plan, b"content-encoding") is None and not plan.send_body


def test_coded_200_from_memory_and_from_sidecar(cfg: Config) -> None:
    data = b"compressed!"
    disp = (b"content-disposition", b'attachment; filename="a.css"')
    plan = decide_file(req(), FILE, cfg, NOW, coding="gzip", data=data, vary=True, extra=(disp,))
    assert plan.status == 200 and plan.body == (data,)
    assert h(plan, b"content-encoding") == b"gzip"
    assert h(plan, b"content-length") == b"%d" % len(data)
    assert h(plan, b"etag") == GZ.encode() and h(plan, b"vary") == b"Accept-Encoding"
    assert h(plan, b"content-type") == b"text/css"
    assert h(plan, b"content-disposition") == disp[1]
    # A sidecar: the body is the whole opened file (its facts given).
    side = replace(FILE, size=321, ino=99, etag="")
    plan = decide_file(req(), side, cfg, NOW, coding="br", vary=True)
    assert plan.body == (FileSpan(0, 321),) and h(plan, b"content-length") == b"321"
    assert h(plan, b"etag") == coded_etag(side.etag, "br").encode()
    head = decide_file(req(method=b"HEAD"), FILE, cfg, NOW, coding="gzip", data=data, vary=True)
    assert not head.send_body and h(head, b"content-length") == b"%d" % len(data)


def test_identity_carries_vary_everywhere(cfg: Config) -> None:
    for r, status in (
        (req(), 200),
        (req(range="bytes=0-9"), 206),
        (req(range="bytes=0-1,5-6"), 200),  # no boundary given: whole file
        (req(if_none_match=ID), 304),
        (req(range="bytes=5000-"), 416),
    ):
        plan = decide_file(r, FILE, cfg, NOW, vary=True)
        assert plan.status == status
        assert h(plan, b"vary") == b"Accept-Encoding", status
        assert h(plan, b"content-encoding") is None
    assert h(decide_file(req(), FILE, cfg, NOW), b"vary") is None


def test_if_range_never_mixes_codings(cfg: Config) -> None:
    # A Range request is served identity; an If-Range naming the gzip
    # representation does not match it, so the whole identity file is sent.
    mixed = decide_file(req(range="bytes=0-9", if_range=GZ), FILE, cfg, NOW, vary=True)
    assert mixed.status == 200 and mixed.body == (FileSpan(0, 1000),)
    same = decide_file(req(range="bytes=0-9", if_range=ID), FILE, cfg, NOW, vary=True)
    assert same.status == 206 and same.body == (FileSpan(0, 10),)


def test_coded_representation_is_never_ranged(cfg: Config) -> None:
    plan = decide_file(req(range="bytes=0-1"), FILE, cfg, NOW, coding="gzip", data=b"abcdef")
    assert plan.status == 200 and plan.body == (b"abcdef",)


def test_extra_headers_only_on_success(cfg: Config) -> None:
    extra = ((b"content-disposition", b"attachment"),)
    assert h(
        decide_file(req(range="bytes=0-0"), FILE, cfg, NOW, extra=extra), b"content-disposition"
    )
    for r in (req(if_none_match=ID), req(if_match='"x"'), req(range="bytes=9999-")):
        assert h(decide_file(r, FILE, cfg, NOW, extra=extra), b"content-disposition") is None


# ------------------------------------------------------------ generated


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),
        ({"if_none_match": 'W/"abc"'}, 304),
        ({"if_none_match": '"abc"'}, 304),  # weak comparison
        ({"if_none_match": 'W/"other"'}, 200),
        # No modification date: date conditions are ignored (§13.1.3-4).
        ({"if_modified_since": "Sun, 06 Nov 2094 08:49:37 GMT"}, 200),
        ({"if_unmodified_since": "Sun, 06 Nov 1994 08:49:37 GMT"}, 200),
        # A weak tag never passes If-Match's strong comparison.
        ({"if_match": 'W/"abc"'}, 412),
        ({"if_match": "*"}, 200),
    ],
)
def test_generated_listing_validators(cfg: Config, headers: dict[str, str], status: int) -> None:
    plan = decide_generated(
        req("/d/", fields=headers), cfg, NOW, b"<html>", b"text/html", 'W/"abc"'
    )
    assert plan.status == status
    if status in (200, 304):
        assert h(plan, b"etag") == b'W/"abc"' and h(plan, b"vary") == b"Accept"
        assert h(plan, b"cache-control") == b"max-age=60"
        assert h(plan, b"last-modified") is None
    if status == 200:
        assert plan.body == (b"<html>",) and h(plan, b"content-length") == b"6"


# ------------------------------------------------------------------ SPA


@pytest.mark.parametrize(
    ("target", "method", "applies"),
    [
        ("/", b"GET", True),
        ("/app/users/42", b"GET", True),
        ("/app/users/", b"HEAD", True),
        ("/app.js", b"GET", False),
        ("/static/app.min.js", b"GET", False),
        ("/v1.2/route", b"GET", True),  # only the last segment counts
        ("/route", b"DELETE", False),
        ("/.hidden", b"GET", False),
        ("/a/.git/config", b"GET", False),
        ("/.well-known/acme", b"GET", False),
        ("/a/.x/b", b"GET", False),
    ],
)
def test_spa_fallback_applies(cfg: Config, target: str, method: bytes, applies: bool) -> None:
    spa = cfg.evolve(spa="index.html")
    assert spa_fallback_applies(req(target, method=method), spa) is applies
    assert spa_fallback_applies(req(target, method=method), cfg) is False  # off by default
