"""Baseline servers and peer applications started by the benchmark harness.

Each module here is run as a script (or imported by a peer server) in its own
process; none of them is imported by the harness itself.
"""
