"""Shared test fixtures: the raw-request fuzzer, the socket reliability
scenarios, the FUSE slow-storage filesystem and the probed server.

Imported by the test suite (``tests/``) and the benchmark harness
(``bench/``) alike, from the repository root (``python -m pytest``,
``python -m bench``).  Not part of the installed package.
"""
