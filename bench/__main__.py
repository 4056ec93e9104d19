"""Entry point: ``python -m bench {run,setup,report,list,golden,callgrind,h2profile,trace,...}``."""

from bench.cli import main

raise SystemExit(main())
