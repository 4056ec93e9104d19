"""Entry point: ``python -m bench {run,setup,report,list,golden,callgrind}``."""

from bench.cli import main

raise SystemExit(main())
