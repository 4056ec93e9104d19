"""Starlette peer application: ``StaticFiles`` over ``$BENCH_ROOT``, mounted at ``/``.

Served by uvicorn and by hypercorn (trio worker) from the peers venv, as
``starlette_static:app`` with this folder on ``PYTHONPATH``. ``StaticFiles``
is mounted in a ``Starlette`` app (not served bare) so that its 404s become
responses instead of 500s. Starlette is imported dynamically because it lives
in the peers venv only.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

_applications: Any = importlib.import_module("starlette.applications")
_routing: Any = importlib.import_module("starlette.routing")
_staticfiles: Any = importlib.import_module("starlette.staticfiles")

app: Any = _applications.Starlette(
    routes=[
        _routing.Mount(
            "/", app=_staticfiles.StaticFiles(directory=os.environ["BENCH_ROOT"], html=True)
        )
    ]
)
