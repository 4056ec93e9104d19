"""serverio: a static file server on trio and h11.

The public names are re-exported from private modules; see
docs/architecture.md for which module owns what.  They are imported when
first used (PEP 562): ``serverio --version`` and ``--help`` never import
trio or the server (docs/performance.md "Start-up").
"""

# Private spellings: the namespace holds exactly __all__ (tests/test_exports.py).
import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from .app.server import Server
    from .concurrency.blocking import Pool, PoolSaturated, PoolStats, run_blocking
    from .config import Config
    from .errors import ConfigError, HTTPError
    from .http.core import (
        FileFacts,
        FileSpan,
        Plan,
        RequestFacts,
        decide_directory,
        decide_file,
        error_plan,
        evaluate_preconditions,
        parse_range,
        route,
    )
    from .http.mime import guess_type
    from .http.target import Target, parse_target
    from .model import Prepared
    from .net.connection import ConnectionTask
    from .net.env import ConnectionEnv
    from .observe.accesslog import AccessLog, AccessRecord
    from .observe.stats import Stats
    from .ops.cli import main
    from .pipeline.handler import Handler, prepare

# Each public name -> the module that defines it.
_WHERE = {
    "Pool": ".concurrency.blocking",
    "PoolSaturated": ".concurrency.blocking",
    "PoolStats": ".concurrency.blocking",
    "run_blocking": ".concurrency.blocking",
    "Config": ".config",
    "ConfigError": ".errors",
    "HTTPError": ".errors",
    "FileFacts": ".http.core",
    "FileSpan": ".http.core",
    "Plan": ".http.core",
    "RequestFacts": ".http.core",
    "decide_directory": ".http.core",
    "decide_file": ".http.core",
    "error_plan": ".http.core",
    "evaluate_preconditions": ".http.core",
    "parse_range": ".http.core",
    "route": ".http.core",
    "guess_type": ".http.mime",
    "Target": ".http.target",
    "parse_target": ".http.target",
    "Prepared": ".model",
    "ConnectionTask": ".net.connection",
    "ConnectionEnv": ".net.env",
    "Server": ".app.server",
    "AccessLog": ".observe.accesslog",
    "AccessRecord": ".observe.accesslog",
    "Stats": ".observe.stats",
    "main": ".ops.cli",
    "Handler": ".pipeline.handler",
    "prepare": ".pipeline.handler",
}


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module on first use (then cached)."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'serverio' has no attribute {name!r}")
    value = getattr(_importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__version__ = "0.1.0"

__all__ = [
    "AccessLog",
    "AccessRecord",
    "Config",
    "ConfigError",
    "ConnectionEnv",
    "ConnectionTask",
    "FileFacts",
    "FileSpan",
    "HTTPError",
    "Handler",
    "Plan",
    "Pool",
    "PoolSaturated",
    "PoolStats",
    "Prepared",
    "RequestFacts",
    "Server",
    "Stats",
    "Target",
    "decide_directory",
    "decide_file",
    "error_plan",
    "evaluate_preconditions",
    "guess_type",
    "main",
    "parse_range",
    "parse_target",
    "prepare",
    "route",
    "run_blocking",
]
