"""serverio.net.h2state: the HTTP/2 stream state table and its guard."""

from __future__ import annotations

import pytest
import trio

from serverio.net.h2state import (
    ANSWERING,
    CLOSED,
    COMPLETE,
    DONE,
    EVENTS,
    FAILED,
    NEW,
    RESET,
    SENDING,
    STOPPED,
    TRANSITIONS,
    Stream,
    StreamState,
)
from serverio.wire.h2head import parse_request_head

HEAD = parse_request_head([(b":method", b"GET"), (b":path", b"/"), (b":scheme", b"http")])


def stream(state: StreamState = NEW) -> Stream:
    st = Stream(1, HEAD, True)
    st.state = state
    return st


def test_every_state_has_a_row_and_the_constants_are_the_members() -> None:
    assert set(TRANSITIONS) == set(StreamState)
    assert [NEW, ANSWERING, SENDING, EVENTS, COMPLETE, CLOSED, RESET, FAILED] == list(StreamState)


def test_every_state_is_reachable_from_new_and_only_stopped_ones_are_final() -> None:
    seen = {NEW}
    todo = [NEW]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(StreamState)
    assert {s for s, nxt in TRANSITIONS.items() if not nxt} == STOPPED
    assert DONE == {COMPLETE, CLOSED}


@pytest.mark.parametrize("old", list(StreamState))
@pytest.mark.parametrize("new", list(StreamState))
def test_to_allows_exactly_the_table(old: StreamState, new: StreamState) -> None:
    st = stream(old)
    if new in TRANSITIONS[old]:
        st.to(new)
        assert st.state is new
    else:
        with pytest.raises(RuntimeError, match=f"{old.name} -> {new.name}"):
            st.to(new)
        assert st.state is old


@pytest.mark.parametrize(
    ("old", "failed", "after"),
    [
        (NEW, False, RESET),
        (ANSWERING, False, RESET),
        (SENDING, False, RESET),
        (SENDING, True, FAILED),
        (EVENTS, False, RESET),
        (COMPLETE, False, CLOSED),  # complete, then reset: still logged
    ],
)
def test_stop(old: StreamState, failed: bool, after: StreamState) -> None:
    st = stream(old)
    assert st.stop(failed) is True
    assert st.state is after and st.state in STOPPED
    assert st.stop() is False and st.state is after  # once


async def test_a_streams_scope_is_made_on_first_use_and_kept() -> None:
    """A stream the reader answers never needs a cancel scope: none is
    made until asked for; once made it is the one every caller gets, and
    a reset before the task entered it still cancels the task (a scope
    cancelled before it is entered cancels on entry)."""
    st = Stream(1, HEAD, True)
    assert st._scope is None
    scope = st.scope
    assert st.scope is scope
    scope.cancel()
    with st.scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught
