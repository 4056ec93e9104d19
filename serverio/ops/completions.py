"""``serverio completions SHELL``: bash, zsh and fish completion scripts.

Generated from the option declarations (:data:`serverio.ops.options.OPTIONS`),
never written by hand, so a new :class:`~serverio.ops.options.Option` is
completed the moment it is declared.  What a value completes to is read
from the declaration too (:func:`value_kind`):

* an option with ``choices`` completes to them (``--etag`` auto/content);
* a path-valued option (metavar ``PATH`` or ``FILE``) completes file names,
  ``--directory`` directory names;
* any other valued option (a number, an address) completes nothing, but
  the shell knows it takes a value, so the next word is not an option;
* flags and ``--x`` / ``--no-x`` toggles take no value (zsh and fish are
  told the two spellings of one toggle exclude each other).

The subcommands (:data:`SUBCOMMANDS`) complete in the first position.

Every text that reaches a script (a help line, a metavar) is quoted for
that shell; a choice or flag is checked to be a plain word first, so an
odd declaration fails here, at generation, not in a user's shell.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .options import OPTIONS, Option

__all__ = [
    "SHELLS",
    "SUBCOMMANDS",
    "Flag",
    "Subcommand",
    "completion_script",
    "completions_main",
    "flags_of",
    "value_kind",
]

SHELLS = ("bash", "zsh", "fish")

ValueKind = Literal["none", "choices", "file", "dir", "value"]

_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$")  # a choice that needs no quoting
_FLAG = re.compile(r"^(-[A-Za-z0-9]|--[a-z0-9][a-z0-9-]*)$")


@dataclass(frozen=True, slots=True)
class Flag:
    """One option as the shells see it (an Option can give two: ``--spa``)."""

    flags: tuple[str, ...]
    help: str
    kind: ValueKind
    metavar: str = ""
    choices: tuple[str, ...] = ()
    repeatable: bool = False
    excludes: tuple[str, ...] = ()  # other spellings that contradict this one

    @property
    def longs(self) -> tuple[str, ...]:
        return tuple(f for f in self.flags if f.startswith("--"))

    @property
    def shorts(self) -> tuple[str, ...]:
        return tuple(f for f in self.flags if not f.startswith("--"))


@dataclass(frozen=True, slots=True)
class Subcommand:
    name: str
    summary: str
    flags: tuple[Flag, ...] = ()
    argument: tuple[str, ...] = ()  # the choices of its one positional argument


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "hash-password",
        "print a password hash for a users file (--auth-file, [[auth]])",
        (
            Flag(("--iterations",), "PBKDF2 iterations", "value", "N"),
            Flag(("--user",), "print NAME:HASH, a users-file line", "value", "NAME"),
            Flag(("-h", "--help"), "show the subcommand's help and exit", "none"),
        ),
    ),
    Subcommand("completions", "print a completion script for SHELL", argument=SHELLS),
    Subcommand("manpage", "print the manual page (roff, man(7))"),
)


def value_kind(opt: Option) -> ValueKind:
    """What the value of ``opt`` completes to (see the module docstring)."""
    if opt.kind in ("flag", "toggle", "version"):
        return "none"
    if opt.choices:
        return "choices"
    meta = (opt.metavar or opt.dest).upper()
    if opt.field == "directory" or meta in ("DIR", "DIRECTORY"):
        return "dir"
    if meta in ("PATH", "FILE"):
        return "file"
    return "value"


def _summary(text: str) -> str:
    """A help text made one short line: what a completion menu shows."""
    return " ".join(text.split())


def flags_of(options: Sequence[Option] = OPTIONS) -> list[Flag]:
    """Every option spelling of the main command, in declaration order,
    with ``-h/--help`` (argparse's own) first."""
    out = [
        Flag(("-h", "--help"), "show the short help and exit", "none"),
        Flag(("--help-all",), "show every option and exit", "none"),
    ]
    for opt in options:
        if opt.switch is not None:
            flag, _, text = opt.switch
            out.append(Flag((flag,), _summary(text), "none"))
        kind = value_kind(opt)
        excludes: tuple[str, ...] = ()
        if opt.kind == "toggle":
            excludes = opt.flags
        out.append(
            Flag(
                opt.flags,
                _summary(opt.help),
                kind,
                opt.metavar or opt.dest.upper(),
                tuple(opt.choices or ()),
                opt.kind in ("list", "extend"),
                excludes,
            )
        )
    for f in out:
        for name in f.flags:
            if not _FLAG.match(name):
                raise ValueError(f"{name!r}: not a flag the completion scripts can spell")
        for c in f.choices:
            if not _WORD.match(c):
                raise ValueError(f"{f.flags[-1]}: choice {c!r} is not a plain word")
    return out


def completion_script(shell: str, options: Sequence[Option] = OPTIONS) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    flags = flags_of(options)
    if shell == "bash":
        return _bash(flags)
    if shell == "zsh":
        return _zsh(flags)
    if shell == "fish":
        return _fish(flags)
    raise ValueError(f"unknown shell {shell!r} (one of {', '.join(SHELLS)})")


# ---------------------------------------------------------------- bash


def _bash_value_cases(flags: Sequence[Flag], indent: str) -> list[str]:
    """``case "$prev"`` arms: what follows each valued flag."""
    arms: list[str] = []
    for f in flags:
        if f.kind == "none":
            continue
        pattern = "|".join(f.flags)
        if f.kind == "choices":
            action = f'COMPREPLY=($(compgen -W "{" ".join(f.choices)}" -- "$cur"))'
        elif f.kind == "file":
            action = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
        elif f.kind == "dir":
            action = 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur"))'
        else:
            action = ":"  # a value is expected; nothing to offer
        arms.append(f"{indent}{pattern}) {action}; return ;;")
    return arms


def _bash(flags: Sequence[Flag]) -> str:
    words = " ".join(n for f in flags for n in f.flags)
    subs = " ".join(s.name for s in SUBCOMMANDS)
    sub_arms = []
    for s in SUBCOMMANDS:
        sub_flags = " ".join(n for f in s.flags for n in f.flags)
        lines = [f"        {s.name})"]
        if s.flags:
            lines.append('            case "$prev" in')
            lines += _bash_value_cases(s.flags, "                ")
            lines.append("            esac")
        if s.argument:
            lines.append(
                f"            [[ $COMP_CWORD -eq 2 ]] && "
                f'COMPREPLY=($(compgen -W "{" ".join(s.argument)}" -- "$cur"))'
            )
        if sub_flags:
            reply = f'COMPREPLY=($(compgen -W "{sub_flags}" -- "$cur"))'
            lines.append(f'            [[ "$cur" == -* ]] && {reply}')
        lines.append("            return ;;")
        sub_arms += lines
    return "\n".join(
        [
            "# bash completion for serverio (generated by 'serverio completions bash')",
            "_serverio() {",
            "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
            "    COMPREPLY=()",
            '    case "${COMP_WORDS[1]}" in',
            *sub_arms,
            "    esac",
            '    case "$prev" in',
            *_bash_value_cases(flags, "        "),
            "    esac",
            '    if [[ "$cur" == -* ]]; then',
            f'        COMPREPLY=($(compgen -W "{words}" -- "$cur"))',
            "    elif [[ $COMP_CWORD -eq 1 ]]; then",
            f'        COMPREPLY=($(compgen -W "{subs}" -- "$cur"))',
            "    fi",
            "}",
            "complete -F _serverio serverio",
            "",
        ]
    )


# ---------------------------------------------------------------- zsh


def _zsh_quote(text: str) -> str:
    """``text`` inside single quotes (a quote is closed, escaped, reopened)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_spec(f: Flag) -> str:
    """One ``_arguments`` spec: ``(excl)*{-x,--xx}[help]:message:action``."""
    # In the explanation a backslash and the brackets are special; in the
    # message a colon ends it.
    expl = f.help.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    excl = f.excludes or (f.flags if len(f.flags) > 1 and not f.repeatable else ())
    prefix = f"({' '.join(excl)})" if excl else ""
    star = "*" if f.repeatable else ""
    tail = ""
    if f.kind != "none":
        message = re.sub(r"[^A-Za-z0-9_ -]", "", f.metavar).strip() or "value"
        action = {
            "choices": f"({' '.join(f.choices)})",
            "file": "_files",
            "dir": "_files -/",
            "value": " ",
        }[f.kind]
        tail = f":{message}:{action}"
    if len(f.flags) == 1:
        return _zsh_quote(f"{prefix}{star}{f.flags[0]}[{expl}]{tail}")
    # zsh brace expansion gives one spec per spelling, sharing the rest.
    head = _zsh_quote(f"{prefix}{star}")
    names = "{" + ",".join(f.flags) + "}"
    return f"{head}{names}{_zsh_quote(f'[{expl}]{tail}')}"


def _zsh(flags: Sequence[Flag]) -> str:
    sub_cases = []
    for s in SUBCOMMANDS:
        specs = [_zsh_spec(f) for f in s.flags]
        if s.argument:
            specs.append(_zsh_quote(f"1:{s.name} argument:({' '.join(s.argument)})"))
        body = "_arguments " + " ".join(specs) if specs else ":"
        sub_cases.append(f"        {s.name}) shift words; (( CURRENT-- )); {body}; return ;;")
    described = " ".join(_zsh_quote(f"{s.name}:{s.summary}") for s in SUBCOMMANDS)
    main_specs = "".join(f" \\\n        {_zsh_spec(f)}" for f in flags)
    return "\n".join(
        [
            "#compdef serverio",
            "# zsh completion for serverio (generated by 'serverio completions zsh')",
            "_serverio() {",
            "    case $words[2] in",
            *sub_cases,
            "    esac",
            "    local -a subcommands",
            f"    subcommands=({described})",
            f"    _arguments -s -S{main_specs} \\",
            "        '1: :->first' && return",
            "    [[ $state == first ]] && _describe -t subcommands 'subcommand (or a port)' "
            "subcommands",
            "}",
            'if [[ $zsh_eval_context[-1] == loadautofunc ]]; then _serverio "$@"; '
            "else compdef _serverio serverio; fi",
            "",
        ]
    )


# ---------------------------------------------------------------- fish


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_line(f: Flag, condition: str) -> str:
    parts = ["complete -c serverio", f"-n {_fish_quote(condition)}"]
    parts += [f"-s {s[1:]}" for s in f.shorts]
    parts += [f"-l {name[2:]}" for name in f.longs]
    if f.kind == "choices":
        parts += ["-x", f"-a {_fish_quote(' '.join(f.choices))}"]
    elif f.kind == "file":
        parts += ["-r", "-F"]
    elif f.kind == "dir":
        parts += ["-x", "-a '(__fish_complete_directories)'"]
    elif f.kind == "value":
        parts.append("-x")
    parts.append(f"-d {_fish_quote(f.help)}")
    return " ".join(parts)


def _fish(flags: Sequence[Flag]) -> str:
    names = " ".join(s.name for s in SUBCOMMANDS)
    main = f"not __fish_seen_subcommand_from {names}"
    lines = [
        "# fish completion for serverio (generated by 'serverio completions fish')",
        "complete -c serverio -f",
    ]
    for s in SUBCOMMANDS:
        lines.append(
            f"complete -c serverio -n '__fish_use_subcommand' -a {s.name} "
            f"-d {_fish_quote(s.summary)}"
        )
    for f in flags:
        lines.append(_fish_line(f, main))
    for s in SUBCOMMANDS:
        cond = f"__fish_seen_subcommand_from {s.name}"
        for f in s.flags:
            lines.append(_fish_line(f, cond))
        if s.argument:
            lines.append(
                f"complete -c serverio -n {_fish_quote(cond)} -x "
                f"-a {_fish_quote(' '.join(s.argument))}"
            )
    return "\n".join(lines) + "\n"


def completions_main(argv: Sequence[str]) -> int:
    """``serverio completions SHELL``: the script on stdout, exit 0; a
    missing or unknown SHELL is one line on stderr and exit 2."""
    if list(argv) in (["-h"], ["--help"]):
        print(
            "usage: serverio completions {bash,zsh,fish}\n\n"
            "Print a completion script generated from the options, e.g.\n"
            "  serverio completions bash > ~/.local/share/bash-completion/completions/serverio\n"
            "  serverio completions zsh > ~/.zfunc/_serverio\n"
            "  serverio completions fish > ~/.config/fish/completions/serverio.fish"
        )
        return 0
    if len(argv) != 1 or argv[0] not in SHELLS:
        given = " ".join(argv) or "nothing"
        print(
            f"serverio: error: completions takes one of {', '.join(SHELLS)} (got {given})",
            file=sys.stderr,
        )
        return 2
    sys.stdout.write(completion_script(argv[0]))
    return 0
