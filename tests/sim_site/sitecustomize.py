"""Interpreter start-up hook of the "windows-shaped" SIMULATION (tests only).

``tests/sim_suite.py windows`` puts this directory on ``PYTHONPATH`` and sets
``SERVERIO_SIMULATION=windows-shaped``; every Python process of that run
(pytest, its workers, each ``python -m serverio`` a test starts) then
shapes itself as tests/sim_windows.py describes before anything else runs.
Without that variable it does nothing.
"""

import os

if os.environ.get("SERVERIO_SIMULATION") == "windows-shaped":
    from tests import sim_windows

    sim_windows.shape()
    sim_windows.socket_io_through_trio()
