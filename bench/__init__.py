"""Load-test harness comparing serverio with a bare trio+h11 ceiling and peer servers.

Run ``python -m bench run --smoke`` from the repository root; see ``bench/README.md``.
"""
