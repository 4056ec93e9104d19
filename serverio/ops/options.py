"""Every setting of the command line, declared once.

One :class:`Option` per setting holds what used to be edited in three
places (the :class:`~serverio.config.Config` field, ``build_parser`` and
``config_from_args``): the field it sets, its flags, metavar, value parser,
help text and group (the sections of docs/cli.md).  Everything else is
derived from it:

* where the field lives: :attr:`Option.path` (``"files.index"``), looked up
  in :data:`serverio.config.FIELD_GROUP` (each setting is one field of one
  policy object);
* the parser default is the policy field's default (never repeated here);
  the ``(default: ...)`` shown in ``--help`` is rendered from it;
* the argparse action (:func:`add_option`) and the field's value
  (:meth:`Option.value_of`), so ``config_from_args`` is a loop;
* the TOML key (:attr:`Option.key`: the first long flag without its dashes,
  as serverio.ops.tomlconfig reads it) and the environment variable
  (:attr:`Option.env`, ``SERVERIO_MAX_CONNECTIONS``), read by
  :func:`env_values`; ``--help`` shows it as ``[env: ...]``.  Precedence:
  command line > environment > --config file > ``PORT`` (the port only) >
  default (docs/cli.md "Environment variables").

Special cases are declared, not hand-coded: the positional port
(``kind="positional"``), an option that turns its field off
(``invert=True``: ``--no-listing``), a ``--x`` / ``--no-x`` pair on one
field (``kind="toggle"``: ``--http2`` / ``--no-http2``, giving both is an
error), a plain flag that switches a valued setting on (``switch``:
``--spa`` for ``--spa-file``), a flag that sets other fields too (``sets``:
``-q`` turns the access log off), comma-separated lists (``split``) and
http.server's two-token ``-H NAME VALUE`` (``two_token``).

The TOML-only site tables ([[headers]], [[auth]] ...) are :data:`TABLES`;
the Config fields no user sets are :data:`NOT_SETTABLE`, each with why.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..config import (
    ACCESS_LOG_FORMATS,
    ACTIVE_MODES,
    ETAG_MODES,
    LOG_LEVELS,
    ON_DUPLICATE,
    POLICIES,
    Config,
    field_path,
    parse_networks,
)
from ..errors import ConfigError
from .cpus import available_cpus

__all__ = [
    "DEFAULTS",
    "ENV_PREFIX",
    "GROUPS",
    "NOT_SETTABLE",
    "OPTIONS",
    "PORT_ENV",
    "POSITIONALS",
    "POSITIONAL_HELP",
    "TABLES",
    "Given",
    "Option",
    "PortOrProtocol",
    "Table",
    "Toggle",
    "add_option",
    "blame_env",
    "by_dest",
    "config_fields",
    "env_bool",
    "env_names",
    "env_option",
    "env_values",
    "port_from_env",
]

ENV_PREFIX = "SERVERIO_"
# The port variable of http-server, serve and PaaS platforms (Heroku, Cloud
# Run): used only when nothing else names the port (port_from_env).
PORT_ENV = "PORT"

# The defaults by setting name, read from the policy dataclasses (and
# Config's own fields) themselves: an option never states a default of its
# own when it has a field.
DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for cls in (Config, *POLICIES.values())
    for f in dataclasses.fields(cls)
    if f.default is not dataclasses.MISSING
}

Kind = Literal["value", "flag", "toggle", "list", "extend", "positional", "version"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: where it lives in Config and how the command line spells it."""

    field: str | None  # the setting (a policy field); None: about the command itself
    flags: tuple[str, ...]  # option strings, the long name first after any short one
    help: str
    group: str  # one of GROUPS (a section of docs/cli.md)
    kind: Kind = "value"
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None  # argparse ``type``
    choices: tuple[str, ...] | None = None
    invert: bool = False  # a flag that turns its (boolean) field off
    split: str | None = None  # a list whose items may hold several values
    switch: tuple[str, str, str] | None = None  # (flag, value it sets, help)
    sets: tuple[tuple[str, object], ...] = ()  # other fields set while this one is true
    two_token: bool = False  # "-H NAME VALUE" is "-H 'NAME: VALUE'"
    merge: bool = False  # a list the file, env and command line add to (not replace)
    equals_alias: str | None = None  # "--spa=FILE" (one token) is "--spa-file=FILE"
    toml: bool = True  # False: command-line only (--config, --check ...)
    default: Any = MISSING  # only for options without a field
    default_factory: Callable[[], Any] | None = None  # computed at parse time (the cwd)
    default_text: str | None = None  # how --help states a default that is None/computed
    name: str | None = None  # the namespace attribute, where the flag's own is taken
    port_alias: bool = False  # "-p 8080": an integer value of the short flag is the port
    fs_path: bool = False  # a filesystem path: in a --config file, relative to the file

    @property
    def dest(self) -> str:
        """The argparse namespace attribute (argparse's own rule, unless ``name``)."""
        if self.name is not None:
            return self.name
        longs = [f for f in self.flags if f.startswith("--")]
        name = longs[0][2:] if longs else self.flags[-1].lstrip("-")
        return name.replace("-", "_")

    @property
    def path(self) -> str | None:
        """Where the setting lives in Config: ``"files.index"`` (None: no field)."""
        return None if self.field is None else field_path(self.field)

    @property
    def key(self) -> str | None:
        """The TOML key: the first long flag without its dashes (None: no key)."""
        if not self.toml:
            return None
        longs = [f for f in self.flags if f.startswith("--")]
        return longs[0][2:] if longs else self.flags[0]

    @property
    def env(self) -> str | None:
        """``SERVERIO_<KEY>``: the environment name this setting will be read from."""
        key = self.key
        return None if key is None else ENV_PREFIX + key.upper().replace("-", "_")

    @property
    def field_default(self) -> Any:
        """What the setting is when nothing sets it."""
        if self.default_factory is not None:
            return self.default_factory()
        if self.field is None:
            return None if self.default is MISSING else self.default
        return DEFAULTS[self.field]

    def parser_default(self) -> Any:
        if self.kind in ("flag", "list", "extend"):
            return False if self.kind == "flag" else None
        return self.field_default

    def shown_default(self) -> str:
        """The ``(default: ...)`` text of ``--help``, from the field's default."""
        if self.default_text is not None:
            return self.default_text
        d = self.field_default
        if self.kind == "flag":
            return "off"
        if isinstance(d, bool):
            return "on" if d else "off"
        if d is None:
            raise ValueError(f"{self.flags}: a None default needs default_text")
        if isinstance(d, tuple):
            return ",".join(map(str, d)) or "none"
        if self.parse is _bytes and isinstance(d, int):
            return _human_size(d)
        if isinstance(d, float):
            return f"{d:g}"
        return str(d)

    def full_help(self) -> str:
        env = "" if self.env is None else f" [env: {self.env}]"
        return f"{self.help} (default: {self.shown_default()}){env}"

    def value_of(self, args: argparse.Namespace) -> Any:
        """The field's value from a parsed namespace."""
        raw = getattr(args, self.dest)
        if self.switch is not None:
            if raw is not None:
                return raw
            return self.switch[1] if getattr(args, _switch_dest(self)) else None
        if self.kind == "flag":
            return not raw if self.invert else bool(raw)
        if self.kind in ("list", "extend"):
            if not raw:
                return self.field_default
            if self.split is not None:
                return tuple(n.strip() for item in raw for n in item.split(self.split) if n.strip())
            return tuple(raw)
        return raw


@dataclass(frozen=True, slots=True)
class Table:
    """A TOML-only site table ([[headers]] ...); its reader is in ops/tomlconfig.py."""

    key: str
    field: str  # the Config field, also the namespace attribute the reader fills
    help: str


class Toggle(argparse.Action):
    """``--x`` / ``--no-x`` on one field: the last says, giving both is an error."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, const=True, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        flag = option_string or self.option_strings[0]
        seen = f"_given_{self.dest}"
        before = getattr(namespace, seen, None)
        if before is not None and before != flag:
            parser.error(f"{before} and {flag} contradict each other")
        setattr(namespace, seen, flag)
        setattr(namespace, self.dest, not flag.startswith("--no-"))


class PortOrProtocol(argparse.Action):
    """``-p``: an integer is the port (miniserve, dufs, SWS, http-server),
    ``HTTP/1.0`` or ``HTTP/1.1`` http.server's protocol; the value tells
    them apart.  ``--protocol`` takes the protocol only."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        # Kept as choices for the file's check (ops.tomlconfig); the parser
        # skips argparse's own check for this action (ops.cli._Parser).
        self.protocols = tuple(str(c) for c in self.choices or ())

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        text = str(values)
        if text in self.protocols:
            setattr(namespace, self.dest, text)
            return
        short = option_string is not None and not option_string.startswith("--")
        if short and text.isascii() and text.isdigit():
            namespace.port = int(text)
            namespace._given_port = option_string
            return
        # argparse's own words for a bad choice (SERVERIO_PROTOCOL's message too).
        choices = ", ".join(map(repr, self.protocols))
        port = "a port number, or " if short else ""
        raise argparse.ArgumentError(
            self, f"invalid choice: {text!r} ({port}choose from {choices})"
        )


class Given(argparse._StoreAction):
    """A plain value option that also notes, on the namespace, that the
    command line gave it (``_given_port``): the positional DIR and PORT must
    not repeat what ``-d`` or ``--port`` say."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, f"_given_{self.dest}", option_string)


# The positional arguments, ``serverio [DIR] [PORT]``: two slots, each
# value sorted by what it is (serverio.ops.cli resolves them); command-line
# only, so not options of their own.
POSITIONALS = ("first_positional", "second_positional")
POSITIONAL_HELP = (
    "an existing directory to serve, the same as -d; DIR and PORT may come in either "
    "order: a number is the port, an existing directory the directory "
    "(default: the current directory)"
)
_PORT_HELP = "the port, the same as --port; 0 = any free port (default: 8000, or $PORT)"


def _switch_dest(opt: Option) -> str:
    assert opt.switch is not None
    return opt.switch[0].lstrip("-").replace("-", "_")


def _switch_env(opt: Option) -> str:
    """The variable of a switch flag (``--spa``: ``SERVERIO_SPA``), beside the option's own."""
    return ENV_PREFIX + _switch_dest(opt).upper()


def add_option(group: argparse._ActionsContainer, opt: Option) -> None:
    """The argparse action(s) of one declaration."""
    if opt.kind == "version":
        group.add_argument(*opt.flags, action=_Version, help=opt.help)
        return
    kw: dict[str, Any] = {"help": opt.full_help()}
    if opt.switch is not None:
        flag, _, text = opt.switch
        env = _switch_env(opt)
        group.add_argument(flag, action="store_true", help=f"{text} (default: off) [env: {env}]")
    if opt.kind == "flag":
        group.add_argument(*opt.flags, action="store_true", **kw)
        return
    if opt.kind == "toggle":
        group.add_argument(*opt.flags, action=Toggle, default=opt.parser_default(), **kw)
        return
    kw.update(metavar=opt.metavar, default=opt.parser_default())
    if opt.parse is not None:
        kw["type"] = opt.parse
    if opt.choices is not None:
        kw["choices"] = opt.choices
    if opt.name is not None:
        kw["dest"] = opt.name
    if opt.port_alias:
        kw.update(action=PortOrProtocol, metavar="PORT|" + "|".join(opt.choices or ()))
    if opt.kind == "positional":
        # serverio [DIR] [PORT] (see POSITIONALS), and the port's own flag.
        group.add_argument(POSITIONALS[0], nargs="?", metavar="DIR", help=POSITIONAL_HELP)
        group.add_argument(POSITIONALS[1], nargs="?", metavar="PORT", help=_PORT_HELP)
        group.add_argument(*opt.flags, action=Given, **kw)
    elif opt.kind == "list":
        group.add_argument(*opt.flags, action="append", **kw)
    elif opt.kind == "extend":
        group.add_argument(*opt.flags, nargs="+", action="extend", **kw)
    else:
        group.add_argument(*opt.flags, **({"action": Given} | kw))


def config_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Settings by field name from a parsed namespace (options and tables),
    for :meth:`Config.of`."""
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.field is not None:
            out[opt.field] = opt.value_of(args)
    for opt in OPTIONS:
        if opt.sets and opt.field is not None and out[opt.field]:
            out.update(opt.sets)
    for table in TABLES:
        out[table.field] = tuple(getattr(args, table.field, ()))
    out["rules_source"] = getattr(args, "config", None) or ""
    return out


def by_dest(dest: str) -> Option | None:
    """The declaration behind a namespace attribute (None: not an option's)."""
    return _BY_DEST.get(dest)


# ---------------------------------------------------------------- environment
#
# SERVERIO_<KEY> for every option with a TOML key (Option.env), and PORT.
# The values are what the parser would store for the flag, keyed by the
# namespace attribute like serverio.ops.tomlconfig.load's, so cli.py layers
# them between the command line and the file (parse_with_config).

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
# A list item of -H starts with a field name and ':' (RFC 9110 §5.1 token):
# commas inside a value ("Cache-Control: no-cache, no-store") stay in it.
_HEADER_ITEM = re.compile(r",\s*(?=[!#$%&'*+.^_`|~0-9A-Za-z-]+\s*:)")


def env_bool(name: str, raw: str) -> bool:
    """A flag's variable: 1/0, true/false, yes/no, on/off (any case), else ConfigError."""
    word = raw.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ConfigError(f"{name}: {raw!r} is not a boolean (1/0, true/false, yes/no, on/off)")


def _env_scalar(opt: Option, name: str, raw: str) -> Any:
    """One value through the option's own converter and choices: argparse's
    message for the flag, with the variable's name in front."""
    if opt.parse is None and opt.choices is None:
        return raw
    probe = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    probe.add_argument("--value", type=opt.parse or str, choices=opt.choices)
    try:
        return probe.parse_args([f"--value={raw}"]).value
    except argparse.ArgumentError as exc:
        raise ConfigError(f"{name}: {exc.message}") from None


def _env_items(opt: Option, raw: str) -> list[str]:
    parts = _HEADER_ITEM.split(raw) if opt.two_token else raw.split(",")
    return [p.strip() for p in parts if p.strip()]


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """``{namespace attribute: value}`` of every ``SERVERIO_<KEY>`` set (and
    not empty) in ``environ``, as the flag would have stored it: flags and
    toggles from :func:`env_bool`, lists comma-separated (``-H``: at a comma
    before ``NAME:``), other values through the option's converter.

    Raises ConfigError naming the variable.  Unknown ``SERVERIO_*`` names
    are ignored (``--keyfile-password-env SERVERIO_KEY_PASSWORD`` is one).
    """
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.switch is not None and environ.get(_switch_env(opt), "").strip():
            out[_switch_dest(opt)] = env_bool(_switch_env(opt), environ[_switch_env(opt)])
        name = opt.env
        raw = "" if name is None else environ.get(name, "")
        if name is None or not raw.strip():
            continue
        if opt.kind in ("flag", "toggle"):
            out[opt.dest] = env_bool(name, raw)
        elif opt.kind in ("list", "extend"):
            out[opt.dest] = [_env_scalar(opt, name, item) for item in _env_items(opt, raw)]
        else:
            out[opt.dest] = _env_scalar(opt, name, raw.strip())
    return out


def env_option(dest: str) -> tuple[str, Option] | None:
    """The variable and declaration behind a namespace attribute that
    :func:`env_values` sets (``spa``: ``SERVERIO_SPA``, the switch's)."""
    opt = _BY_DEST.get(dest)
    if opt is not None:
        return None if opt.env is None else (opt.env, opt)
    for opt in OPTIONS:
        if opt.switch is not None and _switch_dest(opt) == dest:
            return _switch_env(opt), opt
    return None


def env_names() -> list[str]:
    """Every variable :func:`env_values` and :func:`port_from_env` read."""
    names = [o.env for o in OPTIONS if o.env is not None]
    names += [_switch_env(o) for o in OPTIONS if o.switch is not None]
    return [*names, PORT_ENV]


def port_from_env(environ: Mapping[str, str]) -> int | None:
    """``PORT`` as http-server and serve read it (None: not set or empty).

    Raises ConfigError naming the variable for anything but 0-65535.
    """
    raw = environ.get(PORT_ENV, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 65535:  # "²".isdigit()
        raise ConfigError(f"{PORT_ENV}: {raw!r} is not a port (0-65535)")
    return int(raw)


def blame_env(message: str, sources: Mapping[str, Option]) -> str:
    """A validation message about an option whose value came from the
    environment, with the variable named too: Config.validate's messages
    start with the flag (or the key: ``port``, ``directory``)."""
    for var, opt in sources.items():
        names = (*opt.flags, *(opt.switch[:1] if opt.switch else ()), opt.key or "")
        if any(n and re.match(rf"{re.escape(n)}(?![\w-])", message) for n in names):
            return f"{message} (from {var})"
    return message


# ---------------------------------------------------------------- parsers


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    return v


_SIZE_UNITS = {
    "": 1,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
}


def _bytes(text: str) -> int:
    """A byte count: ``1048576``, ``64M``, ``64MiB``, ``512k`` (binary units)."""
    t = text.strip().lower()
    digits = t.rstrip("kmgib")
    unit = t[len(digits) :]
    if not digits.isdigit() or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1048576, 512k, 64MiB)")
    return int(digits) * _SIZE_UNITS[unit]


def _human_size(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _mount(text: str) -> tuple[str, str]:
    """One ``--mount ROUTE=DIR`` -> (route, directory); both checked by
    FilesPolicy.validate (a missing directory is a one-line error, exit 2)."""
    route, sep, directory = text.partition("=")
    if not sep or not route or not directory:
        raise argparse.ArgumentTypeError(f"must be ROUTE=DIR, got {text!r}")
    return route, directory


def _cidr(text: str) -> str:
    """One ``--trusted-proxies`` value, canonical (``10.0.0.1/8`` -> ``10.0.0.0/8``)."""
    try:
        (net,) = parse_networks([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(net)


_HASHED: dict[str, str] = {}


def _inline_user(text: str) -> str:
    """``--auth USER:PASS`` -> the users-file line ``USER:HASH``: the
    password is hashed here (PBKDF2, serverio.site.passwords), so no Config,
    ``--print-config`` or log line ever holds it.  One hash per distinct
    value per process: the command line is parsed more than once."""
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise argparse.ArgumentTypeError("must be USER:PASS (both not empty)")
    if any(c in user for c in "\r\n") or any(c in password for c in "\r\n"):
        raise argparse.ArgumentTypeError("USER:PASS must be on one line")
    line = _HASHED.get(text)
    if line is None:
        from ..site.passwords import hash_password

        line = _HASHED[text] = f"{user}:{hash_password(password)}"
    return line


def _workers(text: str) -> int:
    """``N`` or ``auto`` (one per CPU this process may use)."""
    if text.strip().lower() == "auto":
        return available_cpus()
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'auto'") from None


def _version() -> str:
    import importlib.metadata  # ~20 ms (email, zipfile...): only for --version

    try:
        return "serverio " + importlib.metadata.version("serverio")
    except importlib.metadata.PackageNotFoundError:
        return "serverio unknown (not installed)"


class _Version(argparse._VersionAction):
    """``--version``: the installed version, looked up when asked for (not
    each time the parser is built)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        self.version = _version()
        super().__call__(parser, namespace, values, option_string)


# ---------------------------------------------------------------- declarations
#
# The groups of --help, in order: the sections of docs/cli.md (a test checks
# each is a heading there).
GROUPS = (
    "Where and what",
    "Connections",
    "HTTP/2",
    "Files",
    "Content options",
    "Site rules",
    "Uploads",
    "Upstreams",
    "Blocking work",
    "Output",
    "Development",
    "TLS",
    "Processes",
    "Reverse proxies",
    "Socket activation",
    "Metrics and health",
    "Logs",
    "Configuration file",
)

_O = Option

_WHERE = (
    _O(
        "port",
        ("--port",),
        "port to listen on (also the positional PORT, or -p PORT); 0 = any free port; $PORT "
        "when no port, --listen or --fd is given",
        "Where and what",
        kind="positional",
        metavar="PORT",
        parse=int,
    ),
    _O(
        None,
        ("--version",),
        "print 'serverio X.Y.Z' and exit",
        "Where and what",
        kind="version",
        toml=False,
    ),
    _O(
        "host",
        ("-b", "--bind"),
        "bind address; -b 0.0.0.0 or -b :: serves the network",
        "Where and what",
        metavar="ADDRESS",
    ),
    _O(
        "directory",
        ("-d", "--directory", "--root"),
        "directory to serve (also the positional DIR)",
        "Where and what",
        metavar="DIR",
        default_factory=os.getcwd,
        default_text="the current directory",
        fs_path=True,
    ),
    _O(
        None,
        ("-p", "--protocol"),
        "-p with a number is the port (as in miniserve, dufs and SWS); -p/--protocol "
        "HTTP/1.0 or HTTP/1.1 is accepted for http.server compatibility: serverio answers "
        "HTTP/1.0 and HTTP/1.1 clients alike, and HTTP/2 unless --no-http2",
        "Where and what",
        choices=("HTTP/1.0", "HTTP/1.1"),
        default="HTTP/1.1",
        port_alias=True,
    ),
)

_CONNECTIONS = (
    _O(
        "max_connections",
        ("--max-connections",),
        "open connections; past it a new one gets 503 and is closed",
        "Connections",
        metavar="N",
        parse=int,
    ),
    _O(
        "head_timeout",
        ("--head-timeout",),
        "seconds to receive one complete request head",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "keepalive_timeout",
        ("--keepalive-timeout",),
        "idle seconds between requests before a silent close",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "write_timeout",
        ("--write-timeout",),
        "seconds without send progress before aborting",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "max_requests",
        ("--max-requests",),
        "requests per connection",
        "Connections",
        metavar="N",
        parse=int,
    ),
    _O(
        "shutdown_timeout",
        ("--shutdown-timeout",),
        "drain deadline on SIGINT/SIGTERM",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "shutdown_delay",
        ("--shutdown-delay",),
        "on SIGTERM, keep accepting S seconds with /healthz 503 and Connection: close "
        "(lame duck for load balancers)",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "max_head_size",
        ("--max-head-size",),
        "largest request head (request line + fields); larger gets 431",
        "Connections",
        metavar="BYTES",
        parse=int,
    ),
    _O(
        "max_body_size",
        ("--max-body-size",),
        "largest request body accepted (413 before reading when a larger one is declared; "
        "cut off when more arrives)",
        "Connections",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "body_timeout",
        ("--body-timeout",),
        "seconds one read of a request body may wait for the next bytes (then 408)",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "body_total_timeout",
        ("--body-total-timeout",),
        "seconds for a whole request body, from its first read (then 408)",
        "Connections",
        metavar="S",
        parse=_seconds,
    ),
)

_HTTP2 = (
    _O(
        "http2",
        ("--http2", "--no-http2"),
        "serve HTTP/2 (ALPN h2 over TLS, h2c prior knowledge in clear) or HTTP/1.1 only",
        "HTTP/2",
        kind="toggle",
    ),
    _O(
        "h2_max_streams",
        ("--h2-max-streams",),
        "concurrent streams per connection (REFUSED_STREAM past it)",
        "HTTP/2",
        metavar="N",
        parse=int,
    ),
    _O(
        "h2_max_resets",
        ("--h2-max-resets",),
        "stream resets per connection and second before GOAWAY ENHANCE_YOUR_CALM",
        "HTTP/2",
        metavar="N",
        parse=int,
    ),
    _O(
        "h2_max_control",
        ("--h2-max-control",),
        "PING/SETTINGS/PRIORITY/empty/unearned WINDOW_UPDATE frames per connection and "
        "second before GOAWAY",
        "HTTP/2",
        metavar="N",
        parse=int,
    ),
    _O(
        "h2_max_open_files",
        ("--h2-max-open-files",),
        "file descriptors of streamed bodies one connection holds at once (a stream past it waits)",
        "HTTP/2",
        metavar="N",
        parse=int,
    ),
)

_FILES = (
    _O(
        "index",
        ("--index",),
        "index file name, repeatable or comma-separated",
        "Files",
        kind="list",
        metavar="NAME",
        split=",",
    ),
    _O("hidden", ("--hidden",), "serve dotfiles and dot-directories", "Files", kind="flag"),
    _O(
        "follow_symlinks",
        ("--follow-symlinks",),
        "allow symlinks that leave the root",
        "Files",
        kind="flag",
    ),
    _O(
        "cache_control",
        ("--cache-control",),
        "Cache-Control value of 200/206/304 responses",
        "Files",
        metavar="VALUE",
        default_text="none",
    ),
    _O(
        "small_file_size",
        ("--small-file-size",),
        "bodies up to this size are read and sent with the head",
        "Files",
        metavar="BYTES",
        parse=int,
    ),
    _O(
        "max_ranges",
        ("--max-ranges",),
        "ranges in one Range header; more are answered with the whole file",
        "Files",
        metavar="N",
        parse=int,
    ),
    _O(
        "etag",
        ("--etag",),
        "ETag rule: auto (content hash for small files and constant mtimes, else "
        "size+mtime) or content (content hash for every file)",
        "Files",
        choices=ETAG_MODES,
    ),
    _O(
        "sendfile",
        ("--no-sendfile",),
        "send file bodies through user space",
        "Files",
        kind="flag",
        invert=True,
    ),
    _O(
        "mounts",
        ("--mount",),
        "serve DIR under ROUTE too (repeatable; the longest route wins; TOML: [[mount]] "
        "tables with route and dir)",
        "Files",
        kind="list",
        metavar="ROUTE=DIR",
        parse=_mount,
    ),
    _O(
        "route_prefix",
        ("--route-prefix",),
        "serve the whole site (the directory and every mount) under PREFIX; 404 outside it",
        "Files",
        metavar="PREFIX",
        default_text="none",
    ),
)

_CONTENT = (
    _O(
        "listing",
        ("--no-listing",),
        "404 for directories without an index file",
        "Content options",
        kind="flag",
        invert=True,
    ),
    _O(
        "listing_max_entries",
        ("--listing-max-entries",),
        "entries shown per listing; more are cut with a notice",
        "Content options",
        metavar="N",
        parse=int,
    ),
    _O(
        "listing_cache_size",
        ("--listing-cache-size",),
        "memory for rendered listings, shared, LRU (0 = off)",
        "Content options",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "download",
        ("--download",),
        "serve matching files as attachments (repeatable; '*.zip', 'releases/*')",
        "Content options",
        kind="list",
        metavar="GLOB",
    ),
    _O(
        "spa",
        ("--spa-file",),
        "the file --spa answers with (implies --spa; --spa=FILE is the same)",
        "Content options",
        metavar="FILE",
        default_text="off; index.html with --spa",
        switch=(
            "--spa",
            "index.html",
            "answer missing extension-less paths with index.html (or --spa-file)",
        ),
        equals_alias="--spa",
    ),
    _O(
        "precompressed",
        ("--no-precompressed",),
        "ignore FILE.br / FILE.zst / FILE.gz sidecars",
        "Content options",
        kind="flag",
        invert=True,
    ),
    _O(
        "compress_max_size",
        ("--compress-max-size",),
        "largest file compressed on the fly (0 = never)",
        "Content options",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "compress_cache_size",
        ("--compress-cache-size",),
        "memory for compressed results, LRU (0 = no caching)",
        "Content options",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "digest",
        ("--digest",),
        "send Repr-Digest (RFC 9530) with file responses",
        "Content options",
        kind="flag",
    ),
    _O(
        "archives",
        ("--archives",),
        "offer listed directories as ?archive=zip and ?archive=tar.gz downloads (streamed)",
        "Content options",
        kind="flag",
    ),
    _O(
        "archive_max_entries",
        ("--archive-max-entries",),
        "members of one archive at most (more: 413)",
        "Content options",
        metavar="N",
        parse=int,
    ),
    _O(
        "archive_max_bytes",
        ("--archive-max-bytes",),
        "file bytes of one archive at most (more: 413; passed while streaming: cut)",
        "Content options",
        metavar="BYTES",
        parse=_bytes,
    ),
)

_SITE = (
    _O(
        "headers",
        ("-H", "--header"),
        "add a header to every response (repeatable; added to the file's list, "
        "'NAME:' with no value removes NAME; 'NAME VALUE' as two arguments, "
        "http.server's form, works too)",
        "Site rules",
        kind="list",
        metavar="'NAME: VALUE'",
        two_token=True,
        merge=True,
    ),
    _O(
        "cors",
        ("--cors",),
        "Access-Control-Allow-Origin: * on every response",
        "Site rules",
        kind="flag",
    ),
    _O(
        "cors_origins",
        ("--cors-origin",),
        "allow this origin (repeatable; echoed with Vary: Origin)",
        "Site rules",
        kind="list",
        metavar="ORIGIN",
    ),
    _O(
        "cors_writes",
        ("--cors-writes",),
        "with --upload, let the --cors-origin origins write too (preflights of PUT, "
        "DELETE and POST on writable paths; never with --cors)",
        "Site rules",
        kind="flag",
    ),
    _O(
        "clean_urls",
        ("--clean-urls",),
        "serve /about from about.html and redirect /about.html to /about",
        "Site rules",
        kind="flag",
    ),
    _O(
        "trailing_slash",
        ("--trailing-slash",),
        "add or remove a trailing slash by redirect (keep: directories get one)",
        "Site rules",
        choices=("add", "remove", "keep"),
    ),
    _O(
        "auth_file",
        ("--auth-file",),
        "basic authentication for the whole site from this htpasswd-style file",
        "Site rules",
        metavar="FILE",
        default_text="none",
        fs_path=True,
    ),
    _O(
        "auth_users",
        ("--auth",),
        "basic authentication for the whole site with this user and password (repeatable; "
        "hashed in memory at once; other local users see it in ps: --auth-file for "
        "anything else); off loopback it needs TLS or --allow-plain-auth",
        "Site rules",
        kind="list",
        metavar="USER:PASS",
        parse=_inline_user,
        toml=False,
        name="auth_users",
        default_text="none",
    ),
    _O(
        "allow",
        ("--allow",),
        "give principals rights below a path: PRINCIPAL[,PRINCIPAL...]:RIGHT[,RIGHT...]@PATH "
        "(repeatable; principals: anonymous, authenticated, a group, a user of --auth-file / "
        "--auth; rights: read, list, upload, overwrite, delete, mkdir, lock, share)",
        "Site rules",
        kind="list",
        metavar="RULE",
        default_text="none",
    ),
    _O(
        "secret_file",
        ("--secret-file",),
        "sign session cookies, share links and resumable-upload URLs with this file's "
        "content (at least 32 bytes; give every replica of a fleet the same file); "
        "default: a key generated once in serverio's data directory",
        "Site rules",
        metavar="FILE",
        default_text="generated",
        fs_path=True,
    ),
    _O(
        "allow_plain_auth",
        ("--allow-plain-auth",),
        "allow --auth on a non-loopback address without TLS (the password then crosses "
        "the network readable)",
        "Site rules",
        kind="flag",
    ),
    _O(
        "allowed_hosts",
        ("--allowed-hosts",),
        "with --upload, --webdav or a proxy route, also answer for these Host names "
        "(repeatable or comma-separated; .NAME or *.NAME for subdomains, '*' for any); "
        "other unexpected hosts get 421 (DNS rebinding)",
        "Site rules",
        kind="list",
        metavar="NAME",
        split=",",
        default_text="loopback names, IP addresses, the bound names",
    ),
)

_UPLOADS = (
    _O(
        "upload",
        ("--upload",),
        "accept PUT (create or replace a file) and DELETE under the root; off: read-only",
        "Uploads",
        kind="flag",
    ),
    _O(
        "max_upload_size",
        ("--max-upload-size",),
        "largest file a PUT may write (413 when declared larger or when more arrives)",
        "Uploads",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "max_uploads",
        ("--max-uploads",),
        "writes in flight at once; past it 503",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "max_uploads_per_client",
        ("--max-uploads-per-client",),
        "writes one client may have in flight at once (its share of the write slots); past "
        "it 503; 0: half of them",
        "Uploads",
        metavar="N",
        parse=int,
        default_text="0, half",
    ),
    _O(
        "min_upload_rate",
        ("--min-upload-rate",),
        "bytes per second an upload must keep up after its first 10 seconds of waiting "
        "for the client; slower is cut with 408; 0: no minimum",
        "Uploads",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "min_free_space",
        ("--min-free-space",),
        "refuse a write (507) that would leave less free space on the disk",
        "Uploads",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "on_duplicate",
        ("--on-duplicate",),
        "a file of the upload form whose name is taken: refuse it (409), rename it "
        "'name (1).ext', or overwrite the existing file",
        "Uploads",
        choices=ON_DUPLICATE,
    ),
    _O(
        "upload_active",
        ("--upload-active",),
        "how an HTML, SVG, XML or JavaScript file under a writable path is served: with a "
        "CSP sandbox, as an attachment, or inline (a [[writable]] table's active overrides it)",
        "Uploads",
        choices=ACTIVE_MODES,
    ),
    _O(
        "allow_anonymous_writes",
        ("--allow-anonymous-writes",),
        "allow --upload on a non-loopback address without an [[auth]] rule over every "
        "writable path",
        "Uploads",
        kind="flag",
    ),
    _O(
        "no_fsync",
        ("--no-fsync",),
        "commit a PUT's or form upload's file without fsync (still atomic: a reader never "
        "sees a partial file; a power loss may lose or empty it)",
        "Uploads",
        kind="flag",
    ),
    _O(
        "webdav",
        ("--webdav",),
        "serve WebDAV class 1 and 2 (PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK) "
        "on the whole root (or under --webdav-prefix); "
        "implies --upload",
        "Uploads",
        kind="flag",
    ),
    _O(
        "webdav_prefix",
        ("--webdav-prefix",),
        "serve WebDAV only at PREFIX and under it; elsewhere the server answers as "
        "without --webdav; implies --webdav",
        "Uploads",
        metavar="PREFIX",
        default_text="the whole root",
    ),
    _O(
        "webdav_depth_infinity",
        ("--webdav-depth-infinity",),
        "answer PROPFIND Depth: infinity with at most N resources (0: refuse it, 403)",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "webdav_max_tree",
        ("--webdav-max-tree",),
        "most members a COPY, MOVE or DELETE of a collection may touch",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "webdav_max_locks",
        ("--webdav-max-locks",),
        "most WebDAV locks held at once (per process, in memory); a LOCK past it gets 507",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "webdav_lock_timeout_max",
        ("--webdav-lock-timeout-max",),
        "longest WebDAV lock timeout granted, in seconds (Timeout: Infinite gets this)",
        "Uploads",
        metavar="SECONDS",
        parse=int,
    ),
    _O(
        "webdav_max_locks_per_client",
        ("--webdav-max-locks-per-client",),
        "most WebDAV locks one client address holds at once (IPv6: its /64); past it 507",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "webdav_max_locks_per_resource",
        ("--webdav-max-locks-per-resource",),
        "most WebDAV locks covering one resource (shared locks stack); past it 507",
        "Uploads",
        metavar="N",
        parse=int,
    ),
    _O(
        "webdav_anonymous_lock_timeout_max",
        ("--webdav-anonymous-lock-timeout-max",),
        "longest WebDAV lock timeout granted to a client without credentials, in seconds",
        "Uploads",
        metavar="SECONDS",
        parse=int,
    ),
)

_UPSTREAMS = (
    _O(
        "proxy",
        ("--proxy",),
        "forward requests under PREFIX to an upstream, http://HOST:PORT or unix:/PATH "
        "(repeatable; the longest prefix wins)",
        "Upstreams",
        kind="list",
        metavar="PREFIX=URL",
        default_text="none",
    ),
    _O(
        "proxy_fallback",
        ("--proxy-fallback",),
        "forward what nothing else answers (a GET/HEAD no file answers, any other method "
        "outside a --proxy prefix) to this upstream; not with --spa",
        "Upstreams",
        metavar="URL",
        default_text="none",
    ),
    _O(
        "proxy_max_inflight",
        ("--proxy-max-inflight",),
        "requests in flight to one upstream at once (past it they wait: --proxy-queue)",
        "Upstreams",
        metavar="N",
        parse=int,
    ),
    _O(
        "proxy_queue",
        ("--proxy-queue",),
        "requests that may wait for an in-flight slot per upstream (past it: 503; 0: never wait)",
        "Upstreams",
        metavar="N",
        parse=int,
    ),
    _O(
        "proxy_queue_timeout",
        ("--proxy-queue-timeout",),
        "seconds a request waits for an in-flight slot (then 503)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_keepalive",
        ("--proxy-keepalive",),
        "idle keep-alive connections kept per upstream",
        "Upstreams",
        metavar="N",
        parse=int,
    ),
    _O(
        "proxy_connect_timeout",
        ("--proxy-connect-timeout",),
        "seconds to connect to an upstream (then 504)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_head_timeout",
        ("--proxy-head-timeout",),
        "seconds from the request sent to the upstream's response head (then 504)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_idle_timeout",
        ("--proxy-idle-timeout",),
        "seconds an upstream body may pause between chunks (then the response is cut)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_total_timeout",
        ("--proxy-total-timeout",),
        "seconds for a whole proxied exchange (504 before the head, cut after)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_tunnel_idle",
        ("--proxy-tunnel-idle",),
        "seconds a WebSocket/Upgrade tunnel may carry no byte either way (then it is closed)",
        "Upstreams",
        metavar="S",
        parse=_seconds,
    ),
    _O(
        "proxy_max_tunnels",
        ("--proxy-max-tunnels",),
        "WebSocket/Upgrade tunnels open at once, every upstream together, apart from "
        "--proxy-max-inflight (past it: 503; 0: no tunnels)",
        "Upstreams",
        metavar="N",
        parse=int,
    ),
    _O(
        "proxy_max_tunnels_per_client",
        ("--proxy-max-tunnels-per-client",),
        "tunnels one client (address, IPv6 /64) may hold open at once (past it: 503)",
        "Upstreams",
        metavar="N",
        parse=int,
    ),
    _O(
        "proxy_host",
        ("--proxy-host",),
        "the Host sent upstream: the client's (pass) or the upstream's own (upstream)",
        "Upstreams",
        choices=("pass", "upstream"),
    ),
)

_WORK = (
    _O(
        "fs_workers",
        ("--fs-workers",),
        "threads for filesystem preparation (0 = inline)",
        "Blocking work",
        metavar="N",
        parse=int,
    ),
    _O(
        "fs_queue",
        ("--fs-queue",),
        "callers that may wait for an fs worker; past it 503 (needs --fs-workers > 0)",
        "Blocking work",
        metavar="N",
        parse=int,
    ),
    _O(
        "file_cache_size",
        ("--file-cache-size",),
        "memory for small files' bytes, revalidated per request (0 = off)",
        "Blocking work",
        metavar="BYTES",
        parse=_bytes,
    ),
    _O(
        "fs_cache_valid",
        ("--fs-cache-valid",),
        "with --fs-workers: trust a cached file this long without a stat",
        "Blocking work",
        metavar="SECONDS",
        parse=float,
    ),
    _O(
        "work_workers",
        ("--work-workers",),
        "threads for listings, compression and hashing (0 = inline)",
        "Blocking work",
        metavar="N",
        parse=int,
    ),
    _O(
        "work_queue",
        ("--work-queue",),
        "callers that may wait for a work thread",
        "Blocking work",
        metavar="N",
        parse=int,
    ),
)

_OUTPUT = (
    _O(
        "access_log",
        ("--access-log",),
        "access log format, one line per response",
        "Output",
        choices=ACCESS_LOG_FORMATS,
    ),
    _O(
        "quiet",
        ("-q", "--quiet"),
        "no access log (same as --access-log off)",
        "Output",
        kind="flag",
        sets=(("access_log", "off"),),
    ),
    _O(
        "verbose",
        ("-v", "--verbose"),
        "at exit print every counter (as /metrics has them) after the one summary line",
        "Output",
        kind="flag",
    ),
)

_DEVELOPMENT = (
    _O(
        "watch",
        ("--watch",),
        "development mode: watch the directory and live-reload browsers on change "
        "(injects a script into HTML; not for production)",
        "Development",
        kind="flag",
    ),
    _O(
        "watch_prefix",
        ("--watch-prefix",),
        "reserved path of the live-reload event stream and script",
        "Development",
        metavar="PATH",
    ),
    _O(
        "watch_poll",
        ("--watch-poll",),
        "with --watch: poll for changes instead of inotify (network filesystems)",
        "Development",
        kind="flag",
    ),
    _O(
        "watch_max_streams",
        ("--watch-max-streams",),
        "with --watch: event streams open at once, apart from --max-connections (past it: 503)",
        "Development",
        metavar="N",
        parse=int,
    ),
    _O(
        "open_browser",
        ("--open",),
        "open the first URL in the web browser once listening (Python's webbrowser)",
        "Development",
        kind="flag",
    ),
    _O(
        "qr",
        ("--qr",),
        "print a QR code of the first network URL (the loopback one without) once listening",
        "Development",
        kind="flag",
    ),
)

# --tls-cert / --tls-key / --tls-password-file: http.server's names (3.14).
_TLS = (
    _O(
        "certfile",
        ("--certfile", "--tls-cert"),
        "PEM certificate chain; turns TLS on",
        "TLS",
        metavar="PATH",
        default_text="off",
        fs_path=True,
    ),
    _O(
        "keyfile",
        ("--keyfile", "--tls-key"),
        "PEM private key",
        "TLS",
        metavar="PATH",
        default_text="the certfile",
        fs_path=True,
    ),
    _O(
        "keyfile_password_file",
        ("--tls-password-file",),
        "file holding the key's password (first line)",
        "TLS",
        metavar="PATH",
        default_text="none",
        fs_path=True,
    ),
    _O(
        "keyfile_password_env",
        ("--keyfile-password-env",),
        "environment variable holding the key's password (never pass it in argv)",
        "TLS",
        metavar="NAME",
        default_text="none",
    ),
    _O(
        "hsts",
        ("--hsts",),
        "send Strict-Transport-Security: max-age=SECONDS on TLS responses "
        "(never over plain HTTP; needs --certfile)",
        "TLS",
        metavar="SECONDS",
        parse=int,
        default_text="off",
    ),
    _O(
        "hsts_include_subdomains",
        ("--hsts-include-subdomains",),
        "with --hsts: add includeSubDomains (every subdomain must serve HTTPS)",
        "TLS",
        kind="flag",
    ),
    _O(
        "dev_tls",
        ("--dev-tls",),
        "development HTTPS: a local CA (made once) and a certificate for localhost, the "
        "hostname and the LAN addresses; prints how to trust the CA",
        "TLS",
        kind="flag",
    ),
    _O(
        "dev_tls_dir",
        ("--dev-tls-dir",),
        "with --dev-tls: the directory of the CA and certificate",
        "TLS",
        metavar="PATH",
        default_text="the user's data directory",
        fs_path=True,
    ),
)

_PROCESSES = (
    _O(
        "workers",
        ("--workers",),
        "processes, each with its own SO_REUSEPORT listener; "
        "auto = one per CPU available (affinity, cgroup quota)",
        "Processes",
        metavar="N",
        parse=_workers,
    ),
    _O(
        "listen",
        ("--listen",),
        "plaintext listener (repeatable; IPv6 as [::1]:8080; /h1 or /h2 after it picks "
        "its protocol); replaces -b and the port",
        "Processes",
        kind="list",
        metavar="HOST:PORT",
        default_text="none; -b and the port apply",
    ),
    _O(
        "listen_tls",
        ("--listen-tls",),
        "TLS listener with --certfile/--keyfile (repeatable; /h1 or /h2 as for --listen); "
        "replaces -b and the port",
        "Processes",
        kind="list",
        metavar="HOST:PORT",
    ),
)

_OPERATIONS = (
    _O(
        "trusted_proxies",
        ("--trusted-proxies",),
        "reverse proxies (addresses or networks) whose Forwarded / X-Forwarded-For "
        "name the client, for the access log and the auth limiter",
        "Reverse proxies",
        kind="extend",
        metavar="CIDR",
        parse=_cidr,
        default_text="trust no one",
    ),
    _O(
        "fds",
        ("--fd",),
        "serve on inherited listening socket N instead of binding (repeatable); "
        "systemd's LISTEN_FDS is used automatically",
        "Socket activation",
        kind="list",
        metavar="N",
        parse=int,
    ),
    _O(
        "admin_bind",
        ("--admin-bind",),
        "serve GET /metrics and /healthz there (never the public port)",
        "Metrics and health",
        metavar="HOST:PORT",
        default_text="off",
    ),
    _O(
        None,
        ("--check",),
        "probe URL (http, loopback only) and exit 0 if it answers 2xx, else 1 "
        "(container HEALTHCHECK without curl)",
        "Metrics and health",
        metavar="URL",
        toml=False,
        default_text="off",
    ),
    _O(
        "access_log_file",
        ("--access-log-file",),
        "append the access log to PATH (reopened on SIGHUP)",
        "Logs",
        metavar="PATH",
        default_text="stderr",
        fs_path=True,
    ),
    _O("log_level", ("--log-level",), "error log level (stderr)", "Logs", choices=LOG_LEVELS),
    _O(
        None,
        ("--config",),
        "TOML file: each option as a key (max-connections = 100); the command line wins",
        "Configuration file",
        metavar="FILE",
        toml=False,
        default_text="none",
    ),
    _O(
        None,
        ("--print-config",),
        "print the effective configuration as TOML and exit",
        "Configuration file",
        kind="flag",
        toml=False,
    ),
)

OPTIONS: tuple[Option, ...] = (
    _WHERE
    + _CONNECTIONS
    + _HTTP2
    + _FILES
    + _CONTENT
    + _SITE
    + _UPLOADS
    + _UPSTREAMS
    + _WORK
    + _OUTPUT
    + _DEVELOPMENT
    + _TLS
    + _PROCESSES
    + _OPERATIONS
)

TABLES: tuple[Table, ...] = (
    Table("headers", "header_rules", "[[headers]]: path glob, fields to set and remove"),
    Table("redirects", "redirects", "[[redirects]]: from, to, status"),
    Table("rewrites", "rewrites", "[[rewrites]]: from, to (internal)"),
    Table("errors", "error_pages", '[errors]: "404" or "5xx" = page below the root'),
    Table("auth", "auth", "[[auth]]: path glob, users-file"),
    Table("writable", "writable", '[[writable]]: path glob (PREFIX/**), allow = ["put", "delete"]'),
    Table(
        "access",
        "access",
        '[[access]]: path glob, allow = { PRINCIPAL = ["read", "list", ...] } '
        "(docs/reference/access.md)",
    ),
    Table("group", "groups", "[[group]]: name, members (users of --auth-file / --auth)"),
    Table(
        "proxy",
        "proxy_routes",
        "[[proxy]]: prefix, upstream, strip-prefix, request/response headers to set and "
        "remove, host, deadlines, pass-authorization, case-insensitive",
    ),
)

# Settings (policy or Config fields) with no declaration, and why no user
# sets them.
NOT_SETTABLE: dict[str, str] = {
    "max_target_size": "fixed at 8192 (RFC 9112 §3 asks for at least 8000 octets)",
    "rules_source": "the --config file the site tables came from (for messages)",
    "root": "derived by Config.validate: the real path of the directory",
    "source_date_epoch": "derived by Config.validate from $SOURCE_DATE_EPOCH",
    "proxy_networks": "derived by Config.validate from --trusted-proxies",
    "check_hosts": "derived by Config.validate from --upload, --webdav, the proxy routes "
    "and --allowed-hosts",
    "routes": "derived by Config.validate from --proxy and [[proxy]]",
    "fallback": "derived by Config.validate from --proxy-fallback",
}

_BY_DEST: dict[str, Option] = {o.dest: o for o in OPTIONS}
