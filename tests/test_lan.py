"""The "Network:" lines of a wildcard listener (serverio.ops.lan, issue 28)."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest

from serverio.config import Config
from serverio.ops import lan, run

ADDRESSES = [
    "127.0.0.1",  # loopback: left out
    "192.168.1.20",
    "169.254.3.4",  # IPv4 link-local: left out
    "fe80::1%eth0",  # IPv6 link-local: needs a zone id, left out
    "::1",
    "2001:db8:1::20",
    "192.168.1.20",  # twice: one line
    "not an address",
]


def test_network_urls_of_the_wildcards_only_and_never_loopback() -> None:
    def source() -> list[str]:
        return ADDRESSES

    assert lan.network_urls("http", "0.0.0.0", 8000, source) == ["http://192.168.1.20:8000/"]
    # :: is dual-stack here (serverio.net.listen): both families, IPv6 bracketed.
    assert lan.network_urls("https", "::", 8443, source) == [
        "https://192.168.1.20:8443/",
        "https://[2001:db8:1::20]:8443/",
    ]
    for host in ("127.0.0.1", "::1", "192.168.1.20", "localhost"):
        assert lan.network_urls("http", host, 8000, source) == []
    assert lan.network_urls("http", "0.0.0.0", 8000, lambda: ["127.0.0.1", "::1"]) == []


class _FakeUdp:
    """Records what interface_addresses does with its sockets."""

    made: list[_FakeUdp] = []  # noqa: RUF012  # a test's record, reset per test

    def __init__(self, family: int, type_: int) -> None:
        assert type_ == socket.SOCK_DGRAM
        self.family = family
        self.peer: tuple[str, int] | None = None
        self.closed = self.sent = False
        _FakeUdp.made.append(self)

    def __enter__(self) -> _FakeUdp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def connect(self, addr: tuple[str, int]) -> None:
        if self.family == socket.AF_INET6:
            raise OSError(101, "Network is unreachable")  # no IPv6 route on this host
        self.peer = addr

    def getsockname(self) -> tuple[str, int]:
        return ("192.168.1.20", 40000)

    def send(self, *args: Any) -> None:  # pragma: no cover - must never happen
        self.sent = True


def test_interface_addresses_connect_udp_to_documentation_addresses_and_send_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _FakeUdp.made = []
    monkeypatch.setattr(socket, "socket", _FakeUdp)
    assert lan.interface_addresses() == ["192.168.1.20"]  # the IPv6 family had no route
    v4, v6 = _FakeUdp.made
    assert v4.peer == ("192.0.2.1", 9)  # RFC 5737 TEST-NET-1
    assert all(s.closed and not s.sent for s in (v4, v6))


def _server(*names: tuple[object, ...]) -> Any:
    listeners = [SimpleNamespace(socket=SimpleNamespace(getsockname=lambda n=n: n)) for n in names]
    return SimpleNamespace(listeners=listeners, tls_of=lambda listener: None, config=Config())


def test_announce_adds_network_lines_on_stderr_for_a_wildcard_bind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lan, "interface_addresses", lambda: ["127.0.0.1", "192.168.1.20"])
    run._announce(_server(("0.0.0.0", 8000), ("::", 8001, 0, 0)), None, "/srv")
    out, err = capsys.readouterr()
    # stdout stays as it was: one line per listener.
    assert out == "Serving /srv at http://0.0.0.0:8000/\nServing /srv at http://[::]:8001/\n"
    assert err == "Network: http://192.168.1.20:8000/\nNetwork: http://192.168.1.20:8001/\n"
    run._announce(_server(("127.0.0.1", 8000)), None, "/srv")
    out, err = capsys.readouterr()
    assert out == "Serving /srv at http://127.0.0.1:8000/\n" and err == ""
