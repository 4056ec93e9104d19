"""Entry point: ``python -m bench {run,setup,report,list}``."""

from bench.cli import main

raise SystemExit(main())
