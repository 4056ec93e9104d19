"""The engine counters: groups of at most 20 fields, one flat table outside.

``Stats`` keeps its counters in groups (``conns``, ``responses``,
``timeouts``, ``content``, ``h2``, ``site``, ``writes``, ``proxy``,
``log``); ``/metrics``, the snapshots merged across workers and the exit
summary see them as one flat table in the order they always had (``FLAT``).
"""

from __future__ import annotations

from dataclasses import fields

from serverio.observe.stats import FLAT, Stats

# The flat names in the order /metrics and the summary line have listed
# them since before the split (main at e7b18be); a change here changes
# both outputs.
ORDER = (
    "accepted rejected completed client_errors server_errors timeouts_head "
    "timeouts_keepalive timeouts_write cancelled resets truncated sendfile_responses "
    "buffered_responses read_errors internal_errors bytes_sent listings "
    "compressed_responses compress_fallbacks digest_omitted tls_handshake_failures "
    "h2_connections h2_streams h2_refused_streams h2_stream_errors h2_client_resets "
    "h2_calm h2_protocol_errors auth_failures writes_files writes_deletes writes_bytes "
    "writes_aborted writes_temps_removed writes_directories proxy_requests proxy_connects "
    "proxy_reuses "
    "proxy_busy proxy_errors_connect proxy_errors_reset proxy_errors_framing "
    "proxy_timeouts_connect proxy_timeouts_head proxy_timeouts_idle proxy_timeouts_total "
    "proxy_cancelled proxy_bytes_up proxy_bytes_down proxy_tunnels proxy_timeouts_tunnel"
    " proxy_queued log_lines_dropped log_messages_dropped"
).split()


def test_every_field_of_every_group_is_one_flat_counter() -> None:
    stats = Stats()
    named = {(group, name) for _, group, name in FLAT}
    assert len(named) == len(FLAT)
    every = {(g.name, f.name) for g in fields(Stats) for f in fields(getattr(stats, g.name))}
    assert named == every


def test_groups_stay_under_the_attribute_gate() -> None:
    stats = Stats()
    assert len(fields(Stats)) <= 20
    for group in fields(Stats):
        assert len(fields(getattr(stats, group.name))) <= 20, group.name


def test_as_dict_keeps_the_flat_names_and_their_order() -> None:
    assert [flat for flat, _, _ in FLAT] == ORDER
    stats = Stats()
    assert list(stats.as_dict()) == ORDER
    assert set(stats.as_dict().values()) == {0}


def test_each_counter_lands_under_its_flat_name() -> None:
    stats = Stats()
    for value, (_, group, name) in enumerate(FLAT, start=1):
        setattr(getattr(stats, group), name, value)
    assert stats.as_dict() == {flat: i for i, (flat, _, _) in enumerate(FLAT, start=1)}
    line = stats.summary({"file": {"hits": 7, "misses": 1}}, ("hits",))
    assert line.startswith("accepted=1 rejected=2 completed=3 ")
    assert " auth_failures=29 writes_files=30 writes_deletes=31 writes_bytes=32 " in line
    assert " writes_temps_removed=34 writes_directories=35 proxy_requests=36 " in line
    assert line.endswith(
        " proxy_tunnels=50 proxy_timeouts_tunnel=51 proxy_queued=52"
        " log_lines_dropped=53 log_messages_dropped=54 cache_file_hits=7"
    )


def test_groups_are_separate_objects_per_stats() -> None:
    a, b = Stats(), Stats()
    a.responses.completed += 1
    a.h2.streams += 2
    assert b.responses.completed == 0 and b.h2.streams == 0
    assert a.as_dict()["completed"] == 1 and a.as_dict()["h2_streams"] == 2
