"""``python testkit/probe_server.py ARGS`` = ``python -m serverio ARGS`` plus a probe.

The reliability scenarios run the server as a subprocess (real signals, real
RSS), but leak accounting needs what only the process itself can see: its
trio task count and its connection set.  This wrapper runs the unmodified
CLI (argument parsing, signal handling, exit status) with one addition: on
SIGUSR1 it writes a JSON snapshot to the file named by ``$SERVERIO_PROBE``
(write to a temporary name, then rename, so a reader never sees half a file).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import trio

from serverio.app.server import Server
from serverio.ops import cli as _cli
from serverio.ops import run as _run

# Run as a script: its directory is on sys.path, the repository is not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testkit import simulation


def snapshot(server: Server, seq: int) -> dict[str, object]:
    status = {key: simulation.status_kib(os.getpid(), key) * 1024 for key in ("VmRSS", "VmHWM")}
    return {
        "seq": seq,
        "tasks": trio.lowlevel.current_statistics().tasks_living,
        "threads": threading.active_count(),
        "fds": simulation.open_fd_count(),
        "connections": len(server.connections),
        "in_flight": sum(1 for c in server.connections if c.in_flight),
        "rejectors": server.admission.rejectors,
        "fs_running": server.fs.running,
        "fs_queued": server.fs.queued,
        "fs": {k: getattr(server.fs.stats, k) for k in server.fs.stats.__slots__},
        "stats": server.stats.as_dict(),
        **status,
    }


class ProbedServer(Server):
    async def serve(
        self, *, task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            # start(), not start_soon(): SIGUSR1's default action kills the
            # process, so the receiver must exist before "Serving" is printed.
            await nursery.start(self._probe)
            await super().serve(task_status=task_status)
            nursery.cancel_scope.cancel()

    async def _probe(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        path = os.environ["SERVERIO_PROBE"]
        seq = 0
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            task_status.started()
            async for _ in signals:
                seq += 1
                tmp = f"{path}.tmp"
                # Synchronous on purpose: a snapshot must describe one
                # instant of the loop, and the file is tiny and local.
                with open(tmp, "w", encoding="utf-8") as f:  # noqa: ASYNC230
                    json.dump(snapshot(self, seq), f)
                os.replace(tmp, path)


if __name__ == "__main__":
    # The one substitution: the single-process runner builds ProbedServer.
    _run.Server = ProbedServer  # type: ignore[attr-defined]
    sys.exit(_cli.main())
