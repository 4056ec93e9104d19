"""Every setting of the command line, derived from its one declaration.

A setting is declared on its :class:`~serverio.config.Config` field, with
:func:`serverio.config.setting` (flags, help, group, metavar, value parser,
choices, bounds: see serverio.config's docstring).  This module turns each
declaration into one :class:`Option` (:data:`OPTIONS`, in ``--help``'s
order) and derives the rest from it:

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
the spellings other servers taught (``spelling``: http.server's two-token
``-H NAME VALUE``, ``--spa=FILE``, ``-p 8080``).

The options that set no field (``--version``, ``-p``, ``--check``,
``--config``, ``--print-config``) are declared here (``_COMMANDS``).  The
TOML-only site tables ([[headers]], [[auth]] ...) are :data:`TABLES`; the
Config fields no user sets are :data:`NOT_SETTABLE`, each with why.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..config import (
    POLICIES,
    Config,
    Declared,
    declared,
    field_path,
    parse_networks,
)
from ..errors import ConfigError
from .cpus import available_cpus

if TYPE_CHECKING:
    from ..config import Kind

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
    "Spelling",
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


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Spelling(NamedTuple):
    """The command-line forms an option accepts beside argparse's own, as
    other servers' users type them (serverio.ops.cli's _Parser rewrites
    them before argparse parses)."""

    two_token: bool = False  # "-H NAME VALUE" is "-H 'NAME: VALUE'"
    equals_alias: str | None = None  # "--spa=FILE" (one token) is "--spa-file=FILE"
    port_alias: bool = False  # "-p 8080": an integer value of the short flag is the port


# argparse's forms only.
ARGPARSE = Spelling()


@dataclass(slots=True, eq=False)
class Option:
    """One setting: where it lives in Config and how the command line spells it.

    Not frozen and compared by identity: one is built per option at import,
    and a frozen dataclass's per-field ``object.__setattr__`` and generated
    ``__eq__``/``__hash__`` were start-up cost; nothing assigns to one."""

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
    merge: bool = False  # a list the file, env and command line add to (not replace)
    spelling: Spelling = ARGPARSE  # forms beside argparse's
    toml: bool = True  # False: command-line only (--config, --check ...)
    default: Any = MISSING  # only for options without a field
    default_factory: Callable[[], Any] | None = None  # computed at parse time (the cwd)
    default_text: str | None = None  # how --help states a default that is None/computed
    name: str | None = None  # the namespace attribute, where the flag's own is taken
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


@dataclass(slots=True, eq=False)
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
    if opt.spelling.port_alias:
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
    parts = _HEADER_ITEM.split(raw) if opt.spelling.two_token else raw.split(",")
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

# The options that set no field: they are about the command itself.  Each
# comes after the settings of its group (a setting is declared on its
# field: serverio.config.setting).
_COMMANDS = (
    _O(
        None,
        ("--version",),
        "print 'serverio X.Y.Z' and exit",
        "Where and what",
        kind="version",
        toml=False,
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
        spelling=Spelling(port_alias=True),
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

# A field name (RFC 9110 §5.1: a token), lower-cased as both protocols
# deliver names; never one the server reads itself.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_OWN_FIELDS = frozenset(
    (
        *("authorization", "cookie", "host", "content-length", "transfer-encoding"),
        *("forwarded", "x-forwarded-for", "origin", "content-type", "user-agent", "referer"),
    )
)


def _field_name(text: str) -> str:
    name = text.strip().lower()
    if _TOKEN.fullmatch(name) is None or name in _OWN_FIELDS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a request field name one may trust")
    return name


_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "seconds": _seconds,
    "bytes": _bytes,
    "mount": _mount,
    "cidr": _cidr,
    "user": _inline_user,
    "workers": _workers,
    "field": _field_name,
}


def _option(name: str, d: Declared) -> Option:
    """The Option of the setting declared on field ``name``."""
    more: dict[str, Any] = dict(d.more)
    for bound in ("ge", "le", "gt", "cap"):
        more.pop(bound, None)  # checked by the policies' validate()
    parse = more.pop("parse", None)
    two_token, alias = more.pop("two_token", False), more.pop("equals_alias", None)
    if two_token or alias is not None:
        more["spelling"] = Spelling(two_token, alias)
    if d.group not in GROUPS or (parse is not None and parse not in _PARSERS):
        # mypy --strict says so first (SettingKw); this is for untyped callers.
        raise TypeError(f"setting {name!r}: group {d.group!r} or parse {parse!r} is unknown")
    return Option(name, d.flags, d.help, d.group, parse=_PARSERS.get(parse or ""), **more)


def _options() -> tuple[Option, ...]:
    """Every option in --help's order: by group (GROUPS), within a group
    the positional port first, then the settings in field order (Config's
    own, then each policy's), then the group's command options."""
    settings = [_option(n, d) for cls in (Config, *POLICIES.values()) for n, d in declared(cls)]
    rank = {g: i for i, g in enumerate(GROUPS)}
    # The positional port leads its group: the usage line's [DIR] [PORT].
    order = {o: (rank[o.group], o.kind != "positional") for o in (*settings, *_COMMANDS)}
    return tuple(sorted(order, key=order.__getitem__))


OPTIONS: tuple[Option, ...] = _options()

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
        "hide",
        "hide_tables",
        '[[hide]]: names = ["*.tmp", ...] (as --hide), path = folder glob (default: every '
        "folder); not an access rule (docs/reference/hiding.md)",
    ),
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
