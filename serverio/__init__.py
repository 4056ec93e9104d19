"""serverio: a static file server on trio and h11.

The public names are re-exported from private modules; see
docs/architecture.md for which module owns what.
"""

from ._accesslog import AccessLog, AccessRecord
from ._blocking import Pool, PoolSaturated, PoolStats, run_blocking
from ._cli import main
from ._config import Config
from ._core import (
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
from ._errors import ConfigError, HTTPError
from ._mime import guess_type
from ._prepare import Prepared, prepare
from ._server import Server
from ._stats import Stats
from ._target import Target, parse_target

__version__ = "0.1.0"

__all__ = [
    "AccessLog",
    "AccessRecord",
    "Config",
    "ConfigError",
    "FileFacts",
    "FileSpan",
    "HTTPError",
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
