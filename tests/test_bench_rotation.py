"""The harness's rounds rotate: each server runs in every position over len(servers) rounds."""

from __future__ import annotations

from bench.stats import rotation


def test_each_round_starts_one_server_later() -> None:
    names = ["a", "b", "c"]
    assert [rotation(names, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_every_server_takes_every_position_once() -> None:
    names = [f"s{i}" for i in range(7)]
    rounds = [rotation(names, r) for r in range(len(names))]
    for position in range(len(names)):
        assert sorted(r[position] for r in rounds) == sorted(names)
    assert all(sorted(r) == sorted(names) for r in rounds)


def test_no_servers_no_order() -> None:
    assert rotation([], 3) == []
