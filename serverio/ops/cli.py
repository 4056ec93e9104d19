"""``python -m serverio``: a drop-in for ``python -m http.server``'s flags."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from ..errors import ConfigError
from .options import (
    DEFAULTS,
    ENV_PREFIX,
    GROUPS,
    OPTIONS,
    PORT_ENV,
    POSITIONAL_HELP,
    POSITIONALS,
    Option,
    PortOrProtocol,
    add_option,
    blame_env,
    by_dest,
    config_fields,
    env_option,
    env_values,
    port_from_env,
)
from .tomlconfig import dump, load, parse_with_config

if TYPE_CHECKING:
    from ..config import Config

# Start-up (docs/performance.md "Start-up"): this module imports only what
# parsing the command line needs, so that --version, --help, --print-config
# and the subcommands never import trio, ssl or the server; what serving
# needs is imported in main() once the command line asks for a server.

__all__ = ["build_parser", "config_from_args", "main"]


# The command-line spellings the declarations ask for (see _Parser).
_TWO_TOKEN = frozenset(f for o in OPTIONS if o.spelling.two_token for f in o.flags)
_EQUALS_ALIASES = tuple(
    (alias + "=", next(f for f in o.flags if f.startswith("--")) + "=")
    for o in OPTIONS
    if (alias := o.spelling.equals_alias) is not None
)


class _Parser(argparse.ArgumentParser):
    """argparse without abbreviations (``--auth`` is not ``--auth-file``),
    with one-line errors that suggest the flag meant, and the positional
    ``[DIR] [PORT]`` sorted by what each value is."""

    _argv: Sequence[str] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if not isinstance(action, PortOrProtocol):  # -p 8080: the action decides
            super()._check_value(action, value)

    def format_help(self) -> str:
        if self.epilog is None and self.prog == "serverio":
            self.epilog = _epilog()  # made on demand (see _epilog)
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        # One clear line and exit status 2, like every other invalid input.
        self.exit(2, f"serverio: error: {message}{_hint(self, message, self._argv)}\n")

    def parse_known_args(  # type: ignore[override]  # same signature, narrower types
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = sys.argv[1:] if args is None else list(args)
        self._argv = argv
        ns, extra = super().parse_known_args(_respell(argv), namespace)
        # An unknown flag is the error to report (its value was taken for a
        # positional): parse_args says "unrecognized arguments" and the hint.
        if hasattr(ns, POSITIONALS[0]) and not extra:
            _place_positionals(self, ns)
        return ns, extra


def _place_positionals(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """``serverio [DIR] [PORT]``: each positional value is the port if it is
    a number, else the directory if one exists there (either order; the
    same as ``-d`` and ``--port``, which must not be given too)."""
    values = [getattr(ns, d) for d in POSITIONALS if getattr(ns, d) is not None]
    for dest in POSITIONALS:
        setattr(ns, dest, None)  # placed once: a second parse sees none
    port: str | None = None
    directory: str | None = None
    for value in values:
        if value.isascii() and value.isdigit():
            if port is not None:
                parser.error(f"two ports given: {port} and {value}")
            port = value
        elif os.path.isdir(value):
            if directory is not None:
                parser.error(f"two directories given: {directory!r} and {value!r}")
            directory = value
        elif os.path.exists(value):
            parser.error(f"{value!r} is not a directory (serverio serves directories)")
        else:
            parser.error(f"{value!r} is neither a port (0-65535) nor an existing directory")
    if port is not None:
        given = getattr(ns, "_given_port", None)
        if given is not None:
            parser.error(f"the port is given twice: {port} and {given} {ns.port}")
        ns.port = int(port)
    if directory is not None:
        given = getattr(ns, "_given_directory", None)
        if given is not None:
            parser.error(
                f"the directory is given twice: {directory!r} and {given} {ns.directory!r}"
            )
        ns.directory = directory


def _hint(parser: argparse.ArgumentParser, message: str, argv: Sequence[str]) -> str:
    """The flag probably meant, for an unknown one (``--uplaod``: did you
    mean --upload?), from the parser's own flags (difflib)."""
    if not message.startswith("unrecognized arguments"):
        return ""
    flags = [f for a in parser._actions for f in a.option_strings]
    for arg in argv:
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if not name.startswith("-") or name in flags:
            continue
        # An abbreviation (refused: --auth must not become --auth-file)
        # names what it abbreviates; a typo, the closest flag.
        close = [f for f in flags if f.startswith(name) and name.startswith("--")][:3]
        if not close:
            import difflib

            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.8)
        if close:
            return f" (did you mean {' or '.join(close)}?)"
    return ""


def _respell(argv: list[str]) -> list[str]:
    """The declared alternative spellings, rewritten to the parser's own.

    No option takes an optional value (a bare number after one would be
    ambiguous with the port), but a ``spelling.equals_alias`` such as
    "--spa=FILE" (one token, so unambiguous) is still accepted as
    "--spa-file=FILE"; and a ``spelling.two_token`` option takes CPython
    http.server's "-H Name value" form: a first token without ':' cannot be
    the one-token form.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out.extend(argv[i:])
            break
        if arg in _TWO_TOKEN and i + 2 < len(argv) and ":" not in argv[i + 1]:
            out += [arg, f"{argv[i + 1]}: {argv[i + 2]}"]
            i += 3
            continue
        for alias, spelling in _EQUALS_ALIASES:
            if arg.startswith(alias):
                arg = spelling + arg[len(alias) :]
                break
        out.append(arg)
        i += 1
    return out


_DESCRIPTION = (
    "Serve a directory over HTTP/1.1 and HTTP/2 (h2 by ALPN over TLS, h2c by prior "
    "knowledge in clear), built on trio, h11 and h2: TLS, site rules (headers, redirects, "
    "rewrites, auth, error pages) from a TOML file, live reload (--watch), several "
    "worker processes (--workers), socket activation, metrics. Binds 127.0.0.1 by "
    "default - safer than http.server, which listens on all interfaces; pass "
    "-b 0.0.0.0 (or -b ::) to serve the network."
)
USAGE = "serverio [DIR] [PORT] [options]"


def _subcommands_text() -> str:
    """Every subcommand with its summary (the list completions know too)."""
    from .completions import SUBCOMMANDS  # a help page only (start-up)

    lines = ["subcommands:"]
    for sub in SUBCOMMANDS:
        arg = " " + "|".join(sub.argument) if sub.argument else ""
        lines.append(f"  serverio {sub.name}{arg}")
        lines += [f"{'':24}{line}" for line in textwrap.wrap(sub.summary, 54)]
    lines.append(f"{'':24}('serverio SUBCOMMAND --help' for more)")
    return "\n".join(lines)


def _epilog() -> str:
    """The long page's epilog, made when a help page is (start-up: a
    server's start imports no completions)."""
    return f"""{_subcommands_text()}

{_EPILOG_REST}"""


# Indented lines are kept as written (see _Formatter); the rest is wrapped.
_EPILOG_REST = f"""environment:
  {ENV_PREFIX}<OPTION>     every option with a TOML key, as shown [env: ...]
                        after its help; lists comma-separated, flags and
                        --x/--no-x pairs 1/0, true/false, yes/no or on/off
  {PORT_ENV}                  the port when no port is given (argument,
                        {ENV_PREFIX}PORT or file) and no --listen, --fd or
                        socket activation names the listeners

Precedence: command line > {ENV_PREFIX}* > --config file > {PORT_ENV} > default. \
Every option is also a key of the --config TOML file; docs/cli.md explains each."""


class _Formatter(argparse.HelpFormatter):
    """argparse's wrapping, except for indented lines (the epilog's lists),
    and never inside a flag (``--auth-`` / ``file``)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            if block.startswith(" ") or "\n " in block:
                blocks.append(block)
            else:
                blocks.append(super()._fill_text(block, width, indent))
        return "\n\n".join(blocks)


# The short --help: the options most first runs use (issue 45), by their
# first flag; the page itself is generated from their declarations.
COMMON = (
    "--port",
    "-b",
    "-d",
    "--upload",
    "--webdav",
    "--auth",
    "--auth-file",
    "--spa-file",
    "--cors",
    "-H",
    "--watch",
    "--open",
    "--certfile",
    "--dev-tls",
    "--proxy",
    "-q",
    "--config",
)
_SHORT_DESCRIPTION = (
    "Serve a directory over HTTP/1.1 and HTTP/2. Binds 127.0.0.1 unless told otherwise "
    "(-b 0.0.0.0 serves the network)."
)


def _more_text(total: int) -> str:
    return (
        f"More: serverio --help-all (all {total} options, grouped, with defaults and "
        "variables), the manual page (serverio manpage | man -l -) and docs/cli.md."
    )


class _ShortHelp(argparse._HelpAction):
    """``-h/--help``: the short page (:func:`short_help`), then exit 0."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser._print_message(short_help(parser), sys.stdout)
        parser.exit()


def short_help(parser: argparse.ArgumentParser) -> str:
    """The short ``--help`` page: usage, the positional rule, the
    :data:`COMMON` options (their declarations' help, without defaults),
    every subcommand and where the rest is."""
    p = argparse.ArgumentParser(
        prog="serverio",
        usage=USAGE,
        description=_SHORT_DESCRIPTION,
        epilog=f"{_subcommands_text()}\n\n{_more_text(_option_count(parser))}",
        formatter_class=_Formatter,
        add_help=False,
    )
    p.add_argument("DIR", nargs="?", help=POSITIONAL_HELP.rsplit(" (default", 1)[0])
    p.add_argument("PORT", nargs="?", help="the port (default 8000); also --port or -p PORT")
    common = p.add_argument_group("common options")
    common.add_argument("-h", "--help", action="store_true", help="this page")
    common.add_argument("--help-all", action="store_true", help="every option")
    by_flag = {f: o for o in OPTIONS for f in o.flags}
    for flag in COMMON:
        opt = by_flag[flag]
        flags = [f for f in opt.flags if f != "-p"]  # -p: --port's alias, told above
        if opt.switch is not None:
            common.add_argument(opt.switch[0], action="store_true", help=opt.switch[2])
        text = opt.help.replace("%", "%%")
        if opt.kind in ("flag", "toggle"):
            common.add_argument(*flags, action="store_true", help=text)
        else:
            common.add_argument(*flags, metavar=opt.metavar or opt.dest.upper(), help=text)
    return p.format_help()


def _option_count(parser: argparse.ArgumentParser) -> int:
    return sum(1 for a in parser._actions if a.option_strings)


def build_parser() -> argparse.ArgumentParser:
    """The command line, generated from :data:`serverio.ops.options.OPTIONS`;
    its ``format_help()`` is the long page (``--help-all``)."""
    p = _Parser(
        prog="serverio",
        usage=USAGE,
        description=_DESCRIPTION,
        epilog=None,  # _Parser.format_help makes it
        formatter_class=_Formatter,
        add_help=False,
    )
    # dest=SUPPRESS: no namespace attribute, so no TOML key or variable.
    short, every = "show the short help and exit", "show this page (every option) and exit"
    p.add_argument("-h", "--help", action=_ShortHelp, dest=argparse.SUPPRESS, help=short)
    p.add_argument("--help-all", action="help", dest=argparse.SUPPRESS, help=every)
    groups = {title: p.add_argument_group(title) for title in GROUPS}
    for opt in OPTIONS:
        add_option(groups[opt.group], opt)
    return p


def _check_combinations(args: argparse.Namespace) -> None:
    """Rules between options that no single declaration can state."""
    if (args.listen or args.listen_tls) and (
        args.port != DEFAULTS["port"] or args.bind != DEFAULTS["host"]
    ):
        raise ConfigError("--listen/--listen-tls replace -b and the port: give every address there")
    if args.listen and args.certfile and not args.listen_tls:
        raise ConfigError("--certfile with --listen: TLS listeners are given with --listen-tls")


def config_from_args(args: argparse.Namespace) -> Config:
    """The validated Config of a parsed namespace (ConfigError: one line)."""
    from ..config import Config

    _check_combinations(args)
    cfg = Config.of(**config_fields(args)).validate()
    if _has_site_rules(cfg):
        from ..site.service import load_site

        # Compile the site rules now, so a bad rule is a one-line error
        # (exit 2) before anything is bound; the server compiles its own copy.
        load_site(cfg)
    return cfg


def _has_site_rules(cfg: Config) -> bool:
    """Does anything ask for the site rules (serverio.site)?  A plain
    static start does not import them (the server does the same test)."""
    from ..config import wants_site_rules

    return wants_site_rules(cfg)


_HASH_DESCRIPTION = (
    "Print a PBKDF2-SHA256 password hash for a users file (--auth-file, [[auth]]). "
    "The password is read from a prompt on a terminal (twice), else one line of "
    "standard input; never from the command line, where every local user sees it (ps)."
)


def hash_password_main(argv: Sequence[str]) -> int:
    from ..site.passwords import DEFAULT_ITERATIONS, hash_password

    """``serverio hash-password [--user NAME] [--iterations N]``: print a users-file hash.

    The password is read from a prompt on a terminal, else one line of
    standard input; never from argv (visible to every local user in ``ps``).
    """
    p = _Parser(prog="serverio hash-password", description=_HASH_DESCRIPTION)
    p.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        metavar="N",
        help=f"PBKDF2 rounds, 1000 to 10000000 (default: {DEFAULT_ITERATIONS})",
    )
    p.add_argument(
        "--user",
        metavar="NAME",
        help="print NAME:HASH, a users-file line (default: the hash alone)",
    )
    args = p.parse_args(list(argv))
    if not 1000 <= args.iterations <= 10_000_000:
        print("serverio: error: --iterations must be from 1000 to 10000000", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        import getpass

        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("serverio: error: the passwords differ", file=sys.stderr)
            return 2
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("serverio: error: empty password", file=sys.stderr)
        return 2
    h = hash_password(password, args.iterations)
    print(f"{args.user}:{h}" if args.user else h)
    return 0


def _unset_on_command_line(argv: Sequence[str], dests: Iterable[str]) -> set[str]:
    """The attributes among ``dests`` that the command line itself leaves
    unset (so a value for them came from the environment or the file)."""
    parser = build_parser()  # the command line alone: unset stays unset
    unset = object()
    dests = list(dests)
    parser.set_defaults(**{d: unset for d in dests if parser.get_default(d) is not None})
    given = parser.parse_args(argv)
    return {d for d in dests if getattr(given, d, None) in (unset, None)}


def _env_sources(argv: Sequence[str], env: dict[str, object]) -> dict[str, Option]:
    """{variable: declaration} of the values the environment sets and the
    command line does not override (for blame_env's messages)."""
    if not env:
        return {}
    out: dict[str, Option] = {}
    for dest in _unset_on_command_line(argv, env):
        found = env_option(dest)
        if found is not None:
            out[found[0]] = found[1]
    return out


def _file_sources(
    argv: Sequence[str], path: str | None, env: dict[str, object]
) -> dict[str, Option]:
    """{"FILE, key KEY": declaration} of the values ``--config FILE`` sets
    that neither the environment nor the command line override: a value the
    start-up checks refuse is then reported with the file and key that gave
    it, not only the flag (blame_env's messages)."""
    if not path:
        return {}
    try:
        values = load(build_parser(), path)
    except ConfigError:
        return {}  # reported by parse_with_config already
    out: dict[str, Option] = {}
    for dest in _unset_on_command_line(argv, (d for d in values if d not in env)):
        opt = by_dest(dest)
        if opt is not None and opt.key:
            out[f"{path}, key {opt.key}"] = opt
    return out


def _apply_port_env(args: argparse.Namespace, port: int | None) -> None:
    """PORT, as http-server and serve read it: only when nothing names the
    port or the listeners (the argument, SERVERIO_PORT, the file's key,
    --listen/--listen-tls, --fd and socket activation all win over it)."""
    if args.port is None:  # main's parser default: nothing gave a port
        named = args.listen or args.listen_tls or args.fd
        args.port = DEFAULTS["port"] if port is None or named else port


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The ``serverio`` command; ``environ`` (default: os.environ) holds the
    ``SERVERIO_*`` and ``PORT`` variables (docs/cli.md "Environment variables")."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["hash-password"]:
        return hash_password_main(argv[1:])
    if argv[:1] == ["completions"]:
        from .completions import completions_main

        return completions_main(argv[1:])
    if argv[:1] == ["manpage"]:
        from .manpage import manpage_main

        return manpage_main(argv[1:], parser.description or "")
    variables: Mapping[str, str] = os.environ if environ is None else environ
    sources: dict[str, Option] = {}
    try:
        env = env_values(variables)
        port = port_from_env(variables)
        parser.set_defaults(port=None)  # tells an unset port from an explicit 8000
        args = parse_with_config(parser, argv, env)
        sources = {**_env_sources(argv, env), **_file_sources(argv, args.config, env)}
        if args.check is not None:
            from .check import check_url

            return check_url(args.check)
        if not args.fd and not args.print_config:
            from ..net.activation import systemd_fds

            # systemd socket activation (consumes LISTEN_FDS/LISTEN_PID).
            args.fd = systemd_fds() or None
        _apply_port_env(args, port)
        cfg = config_from_args(args)
        if args.print_config:
            sys.stdout.write(dump(parser, args))
            return 0
        if cfg.live.qr:
            from .qr import check_qr_available

            check_qr_available()
        if cfg.tls.dev_tls:
            from .devtls import apply_dev_tls

            cfg = apply_dev_tls(cfg)
        ssl_context = None
        if cfg.tls.certfile is not None:  # ssl only when TLS is asked for
            from ..net.tls import make_ssl_context

            ssl_context = make_ssl_context(cfg)
    except ConfigError as exc:
        print(f"serverio: error: {blame_env(str(exc), sources)}", file=sys.stderr)
        return 2
    _start_logging(cfg)
    from .fdlimit import fit_fd_limit

    # Before any worker starts: they inherit the raised limit and the config.
    cfg, note = fit_fd_limit(cfg)
    if note is not None:
        print(note, file=sys.stderr, flush=True)
    if cfg.listeners.workers > 1:
        from .workers import supervise

        return supervise(cfg)
    return _serve(cfg, ssl_context)


def _start_logging(cfg: Config) -> None:
    """The server's log (``--log-level``) and, once, the start-up warning
    for basic authentication served over plain HTTP (RFC 7617 §4)."""
    import logging

    # A stderr handler that takes the server's log pipe while it serves
    # (serverio.observe.logpipe): a warning never blocks the event loop.
    from ..observe.logpipe import PipeHandler

    logging.basicConfig(
        level=cfg.log.log_level.upper(),
        format="serverio: %(levelname)s: %(message)s",
        handlers=[PipeHandler()],
    )
    if _has_site_rules(cfg):
        from ..site.service import plain_auth_warning

        warning = plain_auth_warning(cfg)  # once, here: not from each compile of the rules
        if warning is not None:
            logging.getLogger("serverio").warning("%s", warning)


def _serve(cfg: Config, ssl_context: Any) -> int:
    """One serving process: trio and the server, imported now."""
    import functools

    import trio

    from .run import run_server

    return trio.run(functools.partial(run_server, cfg, ssl_context=ssl_context))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
