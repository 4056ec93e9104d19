"""serverio's test suite (tests/README.md)."""

import sys

# Bytecode caches are written even under PYTHONDONTWRITEBYTECODE
# (tests/README.md, "Running"): without them every pytest process rewrites
# and compiles each test module it collects (about 14 s of CPU per whole
# collection on the 2-core machine, and the README's command collects three
# times: two workers, then the serial run), and every server process the
# suite starts compiles serverio's modules again.  The caches are
# __pycache__ directories beside the sources (.gitignore'd), written
# atomically, as Python writes them by default.
sys.dont_write_bytecode = False
