"""aiohttp peer: ``web.static`` route over a directory, with directory listings.

Usage (inside the peers venv): ``python aiohttp_static.py ROOT PORT``.
aiohttp is imported dynamically because it lives in the peers venv only.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def main(root: str, port: int) -> None:
    web: Any = importlib.import_module("aiohttp.web")
    app = web.Application()
    app.add_routes([web.static("/", root, show_index=True)])
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        keepalive_timeout=75.0,
        backlog=2048,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: aiohttp_static.py ROOT PORT")
    main(sys.argv[1], int(sys.argv[2]))
