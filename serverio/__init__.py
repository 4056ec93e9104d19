"""serverio: a static file server on trio and h11.

The public names are re-exported from private modules; see
docs/architecture.md for which module owns what.
"""

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
from .net.server import Server
from .observe.accesslog import AccessLog, AccessRecord
from .observe.stats import Stats
from .ops.cli import main
from .pipeline.handler import Deferred, Handler, prepare

__version__ = "0.1.0"

__all__ = [
    "AccessLog",
    "AccessRecord",
    "Config",
    "ConfigError",
    "ConnectionEnv",
    "ConnectionTask",
    "Deferred",
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
