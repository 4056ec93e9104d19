"""``serverio manpage``: the manual page, roff with the man(7) macros.

Generated from the option declarations (:data:`serverio.ops.options.OPTIONS`:
groups, flags, metavars, help texts with their defaults, choices) and the
subcommands of :mod:`serverio.ops.completions`, so it cannot fall behind
``--help``.  Install it with ``serverio manpage > serverio.1`` into a
``man1`` directory, or read it with ``serverio manpage | man -l -``.

Text is escaped for roff (:func:`roff_text`): a backslash is ``\\e``, a
line that would start with ``.`` or ``'`` (a request) starts with ``\\&``,
a hyphen in a flag is ``\\-`` (a real minus, so the flag can be searched
for and copied), and any character outside ASCII is ``\\[uXXXX]``, so the
page renders the same whatever encoding the formatter assumes.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence

from .completions import SUBCOMMANDS, Flag
from .options import ENV_PREFIX, GROUPS, OPTIONS, PORT_ENV, POSITIONAL_HELP, Option

__all__ = ["manpage", "manpage_main", "roff_text"]


def roff_text(text: str) -> str:
    """``text`` safe anywhere in a roff text line (see the module docstring)."""
    out = []
    for ch in text.replace("\\", "\\e"):
        o = ord(ch)
        if o > 0x7E or (o < 0x20 and ch != "\n"):
            out.append(f"\\[u{o:04X}]" if o > 0x7E else " ")
        else:
            out.append(ch)
    lines = "".join(out).split("\n")
    return "\n".join("\\&" + ln if ln[:1] in (".", "'") else ln for ln in lines)


def _flag(name: str) -> str:
    return "\\fB" + roff_text(name).replace("-", "\\-") + "\\fR"


def _item(flags: Sequence[str], metavar: str | None, text: str) -> list[str]:
    """One ``.TP`` paragraph: the spellings (and metavar), then the text."""
    head = ", ".join(_flag(f) for f in flags)
    if metavar:
        head += " \\fI" + roff_text(metavar) + "\\fR"
    return [".TP", head, roff_text(text)]


def _option_items(opt: Option) -> list[str]:
    out: list[str] = []
    if opt.switch is not None:
        flag, _, text = opt.switch
        out += _item((flag,), None, f"{text} (default: off)")
    if opt.kind == "positional":  # serverio [DIR] [PORT], then --port
        where = [".TP", "\\fI[DIR] [PORT]\\fR", roff_text(POSITIONAL_HELP)]
        return [*out, *where, *_item(opt.flags, opt.metavar, opt.full_help())]
    if opt.kind == "version":
        return out + _item(opt.flags, None, opt.help)
    metavar = None
    if opt.kind not in ("flag", "toggle"):
        metavar = opt.metavar or opt.dest.upper()
    text = opt.full_help()
    if opt.choices:
        text += "; one of " + ", ".join(opt.choices)
    return out + _item(opt.flags, metavar, text)


def _environment(options: Sequence[Option]) -> list[str]:
    """ENVIRONMENT: every variable the options declare (``Option.env``, and
    a switch flag's own, ``SERVERIO_SPA``), then ``PORT``, with the
    precedence :func:`serverio.ops.options.env_values` applies."""
    lines = [
        ".SH ENVIRONMENT",
        roff_text(
            f"Every option with a configuration-file key is also read from {ENV_PREFIX}"
            "<KEY> (upper case, _ for -). Precedence: command line > environment > "
            "--config file > PORT (the port only) > default. A bad value is one line "
            "naming the variable, exit status 2."
        ),
    ]
    for opt in options:
        if opt.switch is not None:
            flag, _, _ = opt.switch
            name = ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()
            lines += _item((name,), None, f"as {flag}")
        if opt.env is not None:
            spelled = opt.flags[-1] if opt.flags else opt.dest
            lines += _item((opt.env,), None, f"as {spelled}")
    lines += _item(
        (PORT_ENV,),
        None,
        "the port, as http-server and serve read it, when neither the command line, "
        f"{ENV_PREFIX}PORT nor the --config file names one",
    )
    return lines


# The statuses ops.cli, ops.run and ops.workers return (docs/cli.md "Exit status").
_EXIT_STATUSES: tuple[tuple[str, str], ...] = (
    (
        "0",
        "stopped on request (SIGINT, SIGTERM, POST /shutdown on the admin endpoint) "
        "after the drain; --help, --help-all, --version, --print-config; --check URL answered 2xx",
    ),
    (
        "1",
        "a runtime failure: --workers crashing more than 5 times within 60 s, an "
        "unexpected exception; --check URL did not answer 2xx",
    ),
    (
        "2",
        "a usage or configuration error (one line on standard error naming the flag, "
        "variable or file and key), a certificate that does not load, a bind refused "
        "for another reason than address in use",
    ),
    ("3", "an address already in use (EADDRINUSE) for a listener or --admin-bind"),
)


def _sub_flag(f: Flag) -> list[str]:
    return _item(f.flags, f.metavar if f.kind != "none" else None, f.help)


def manpage(
    *,
    description: str,
    version: str,
    options: Sequence[Option] = OPTIONS,
    groups: Sequence[str] = GROUPS,
) -> str:
    """The page: NAME, SYNOPSIS, DESCRIPTION, one OPTIONS subsection per
    group (in ``groups`` order), SUBCOMMANDS, ENVIRONMENT, EXIT STATUS,
    SEE ALSO."""
    lines = [
        ".\\\" Generated by 'serverio manpage' from serverio/ops/options.py; do not edit.",
        f'.TH SERVERIO 1 "" "{roff_text(version)}" "User Commands"',
        ".nh",  # no hyphenation: "--no-http2" must not break at its hyphens
        ".ad l",
        ".SH NAME",
        "serverio \\- a static file server (HTTP/1.1 and HTTP/2) on trio",
        ".SH SYNOPSIS",
        ".B serverio",
        "[\\fIoptions\\fR] [\\fIport\\fR]",
    ]
    for s in SUBCOMMANDS:
        lines += [".br", f".B serverio {roff_text(s.name)}"]
        args = [
            f"[{_flag(f.flags[-1])} \\fI{roff_text(f.metavar)}\\fR]"
            for f in s.flags
            if f.kind != "none"
        ]
        if s.argument:
            args.append("\\fI" + "\\fR|\\fI".join(s.argument) + "\\fR")
        if args:
            lines.append(" ".join(args))
    lines += [".SH DESCRIPTION", roff_text(description), ".SH OPTIONS"]
    for group in groups:
        members = [o for o in options if o.group == group]
        if not members:
            continue
        lines.append(f'.SS "{roff_text(group)}"')
        if group == groups[0]:
            lines += _item(("-h", "--help"), None, "show the short help and exit")
            lines += _item(("--help-all",), None, "show every option and exit")
        for opt in members:
            lines += _option_items(opt)
    lines.append(".SH SUBCOMMANDS")
    for s in SUBCOMMANDS:
        lines += [".TP", _flag(s.name), roff_text(s.summary)]
        if s.flags:
            lines.append(".RS")
            for f in s.flags:
                lines += _sub_flag(f)
            lines.append(".RE")
    lines += _environment(options)
    lines.append(".SH EXIT STATUS")
    for status, meaning in _EXIT_STATUSES:
        lines += [".TP", "\\fB" + status + "\\fR", roff_text(meaning)]
    lines += [
        ".SH SEE ALSO",
        "docs/cli.md (every option, its default and why), docs/features.md,",
        "docs/deployment.md in the serverio repository.",
        "",
    ]
    return "\n".join(lines)


def manpage_main(argv: Sequence[str], description: str) -> int:
    """``serverio manpage``: the page on stdout (``description`` is the
    one ``--help`` opens with); any argument is one line on stderr, exit 2."""
    if list(argv) in (["-h"], ["--help"]):
        print(
            "usage: serverio manpage\n\nPrint the manual page (roff), e.g.\n"
            "  serverio manpage | man -l -"
        )
        return 0
    if argv:
        print(f"serverio: error: manpage takes no argument (got {' '.join(argv)})", file=sys.stderr)
        return 2
    try:
        version = "serverio " + importlib.metadata.version("serverio")
    except importlib.metadata.PackageNotFoundError:
        version = "serverio"
    sys.stdout.write(manpage(description=description, version=version))
    return 0
