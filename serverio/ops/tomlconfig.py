"""``--config serverio.toml``: every command-line option as a TOML key.

The key set is derived from the argparse parser, which is generated from
the declarations of :mod:`serverio.ops.options`, so an option declared
there gets its TOML key automatically:

* the key is the long option name without its leading dashes
  (``--max-connections`` -> ``max-connections``; the port, ``--port`` or
  positional, is ``port``);
* the TOML type follows the option: flags are booleans, ``type=int``
  options integers, repeatable options arrays, other typed options (seconds)
  numbers or strings passed through the option's own converter, the rest
  strings (checked against ``choices``);
* a ``--x`` / ``--no-x`` pair (:class:`~serverio.ops.options.Toggle`) is
  one boolean key ``x``; ``no-x = true`` is read too (files written before
  the pair existed) and means ``x = false``;
* a filesystem path (``directory``, ``certfile``, ``auth-file``...: the
  options declared ``fs_path``; ``[[mount]] dir``, ``users-file``) is
  relative to the file's directory.

Precedence: file values (overridden by the environment's, when given)
become the parser's defaults and the command line is parsed again, so only
options actually given on the command line win.
Unknown keys and wrong types are :class:`ConfigError` naming the key and the
file.  :func:`dump` writes the effective configuration back as TOML
(``--print-config``), in a form ``--config`` accepts unchanged.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import PROXY_HOST_MODES, hide_glob_ok, parse_proxy_spec, proxy_route
from ..errors import ConfigError
from .options import OPTIONS, POSITIONALS, Toggle, by_dest
from .options import TABLES as _TABLE_DECLARATIONS

__all__ = [
    "CLI_ONLY",
    "OPTION_TABLES",
    "TABLES",
    "dump",
    "load",
    "option_keys",
    "parse_with_config",
]

# Options about the configuration itself (and help) have no TOML key.
CLI_ONLY = frozenset(
    {"help", argparse.SUPPRESS, *POSITIONALS} | {o.dest for o in OPTIONS if not o.toml}
)


def option_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """TOML key -> argparse action, for every option that has a key."""
    out: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest in CLI_ONLY or action.dest == argparse.SUPPRESS:
            continue
        longs = [o for o in action.option_strings if o.startswith("--")]
        key = longs[0][2:] if longs else action.dest
        out[key] = action
    return out


def _is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+")


def _kind(v: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}.get(
        type(v), "table" if isinstance(v, dict) else type(v).__name__
    )


def _scalar(action: argparse.Action, key: str, value: object, where: str) -> object:
    conv = action.type
    if conv is int:
        if type(value) is not int:
            raise ConfigError(f"{where}: key {key!r} must be an integer, got {_kind(value)}")
        out: object = value
    elif conv is None:
        if type(value) is not str:
            raise ConfigError(f"{where}: key {key!r} must be a string, got {_kind(value)}")
        out = value
    else:
        # A converter of our own (seconds, sizes...): numbers and strings go
        # through it exactly as the command-line text would.
        if type(value) not in (int, float, str):
            raise ConfigError(
                f"{where}: key {key!r} must be a number or string, got {_kind(value)}"
            )
        try:
            out = conv(str(value))  # type: ignore[operator]  # argparse types are callables
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: key {key!r}: {exc}") from None
    if action.choices is not None and out not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: key {key!r} must be one of {choices}, got {out!r}")
    return out


def _negations(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """``no-x`` -> the Toggle action of ``--x`` / ``--no-x``."""
    return {
        flag[2:]: action
        for action in parser._actions
        if isinstance(action, Toggle)
        for flag in action.option_strings[1:]
        if flag.startswith("--no-")
    }


def _typed(action: argparse.Action, key: str, value: object, where: str) -> object:
    if _is_flag(action):
        if type(value) is not bool:
            raise ConfigError(f"{where}: key {key!r} must be a boolean, got {_kind(value)}")
        if isinstance(action, Toggle):
            return value
        return action.const if value else action.default
    if _is_list(action):
        items = value if isinstance(value, list) else [value]
        return [_scalar(action, key, item, where) for item in items]
    return _scalar(action, key, value, where)


def load(parser: argparse.ArgumentParser, path: str) -> dict[str, object]:
    """Read ``path`` -> {dest: typed value}.  Raises ConfigError."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    keys = option_keys(parser)
    negations = _negations(parser)
    out: dict[str, object] = {}
    for key, value in data.items():
        if key == "proxy" and isinstance(value, list):
            # One key, two spellings: ``proxy = ["/api=http://..."]`` (the
            # --proxy option) and ``[[proxy]]`` tables (items that are tables).
            specs = [v for v in value if not isinstance(v, dict)]
            value = [v for v in value if isinstance(v, dict)]
            if specs:
                out["proxy"] = _typed(keys["proxy"], key, specs, path)
            if not value:
                continue
        if key == "hide":
            # One key, two spellings: ``hide = ["*.tmp"]`` (the --hide
            # option) and ``[[hide]]`` tables (items that are tables).
            items = value if isinstance(value, list) else [value]
            globs = [v for v in items if not isinstance(v, dict)]
            value = [v for v in items if isinstance(v, dict)]
            if globs or not value:
                out["hide"] = _typed(keys["hide"], key, globs, path)
            if not value:
                continue
        if key in TABLES:
            dest, reader = TABLES[key]
            out[dest] = reader(value, path)
            continue
        if key in OPTION_TABLES:
            out[keys[key].dest] = OPTION_TABLES[key](value, path)
            continue
        action = keys.get(key)
        if action is None and key in negations:
            action = negations[key]
            value = not _typed(action, key, value, path)
        if action is None:
            raise ConfigError(f"{path}: unknown key {key!r}")
        out[action.dest] = _typed(action, key, value, path)
        opt = by_dest(action.dest)
        if opt is not None and opt.fs_path and isinstance(out[action.dest], str):
            out[action.dest] = _file_relative(str(out[action.dest]), path, key)
    return out


_WARNED: set[tuple[str, str, str]] = set()


def _file_relative(value: str, path: str, key: str) -> str:
    """A path a file names, relative to the file's directory, like
    ``[[mount]] dir`` and ``users-file`` (docs/cli.md "Configuration file").

    A file written for the old rule (``directory`` relative to the working
    directory) keeps working for now: when only the working-directory
    reading exists, it is used, with one warning line saying what to write.
    """
    if os.path.isabs(value):
        return value
    here = os.path.join(os.path.dirname(os.path.abspath(path)), value)
    old = os.path.abspath(value)
    if not os.path.exists(here) and os.path.exists(old) and here != old:
        if (path, key, value) not in _WARNED:  # the file is read more than once
            _WARNED.add((path, key, value))
            print(
                f"serverio: WARNING: {path}: key {key!r} = {value!r} is read relative to the "
                f"file ({here}), which does not exist; using {old}, relative to the working "
                "directory, as before. Write a path relative to the file or an absolute one: "
                "a later version will not look there.",
                file=sys.stderr,
                flush=True,
            )
        return old
    return here


# ---------------------------------------------------------------- site tables
#
# The site rules that need more than one value per rule are TOML tables with
# fixed key names (docs/cli.md "TOML reference"); they have no command-line
# option.  Each reader checks types and returns the Config field's value.


def _table_list(value: object, name: str, where: str) -> list[dict[str, object]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{where}: key {name!r} must be an array of tables ([[{name}]])")
    return value


def _only(item: dict[str, object], allowed: tuple[str, ...], where: str) -> None:
    for k in item:
        if k not in allowed:
            raise ConfigError(f"{where}: unknown key {k!r}")


def _str(item: dict[str, object], key: str, where: str, default: str | None = None) -> str:
    v = item.get(key, default)
    if not isinstance(v, str):
        raise ConfigError(
            f"{where} key {key!r} must be a string, got {_kind(v) if v is not None else 'nothing'}"
        )
    return v


def _read_headers(value: object, path: str) -> tuple[object, ...]:
    out = []
    for i, item in enumerate(_table_list(value, "headers", path)):
        where = f"{path}: [[headers]] #{i + 1}"
        _only(item, ("path", "set", "remove"), where)
        glob = _str(item, "path", where)
        sets = item.get("set", {})
        if not isinstance(sets, dict) or not all(isinstance(v, str) for v in sets.values()):
            raise ConfigError(f"{where} key 'set' must be a table of header = \"value\"")
        rm = item.get("remove", [])
        if not isinstance(rm, list) or not all(isinstance(v, str) for v in rm):
            raise ConfigError(f"{where} key 'remove' must be an array of header names")
        out.append((glob, tuple((str(k), str(v)) for k, v in sets.items()), tuple(rm)))
    return tuple(out)


def _read_redirects(value: object, path: str) -> tuple[object, ...]:
    out = []
    for i, item in enumerate(_table_list(value, "redirects", path)):
        where = f"{path}: [[redirects]] #{i + 1}"
        _only(item, ("from", "to", "status"), where)
        status = item.get("status", 301)
        if type(status) is not int:
            raise ConfigError(f"{where} key 'status' must be an integer, got {_kind(status)}")
        out.append((_str(item, "from", where), _str(item, "to", where), status))
    return tuple(out)


def _read_rewrites(value: object, path: str) -> tuple[object, ...]:
    out = []
    for i, item in enumerate(_table_list(value, "rewrites", path)):
        where = f"{path}: [[rewrites]] #{i + 1}"
        _only(item, ("from", "to"), where)
        out.append((_str(item, "from", where), _str(item, "to", where)))
    return tuple(out)


def _read_errors(value: object, path: str) -> tuple[object, ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: key 'errors' must be a table ([errors])")
    out = []
    for k, v in value.items():
        if not isinstance(v, str):
            raise ConfigError(
                f"{path}: [errors] key {k!r} must be a string (a file below the root)"
            )
        out.append((str(k), v))
    return tuple(out)


def _read_auth(value: object, path: str) -> tuple[object, ...]:
    out = []
    for i, item in enumerate(_table_list(value, "auth", path)):
        where = f"{path}: [[auth]] #{i + 1}"
        _only(item, ("path", "users-file"), where)
        users = _str(item, "users-file", where)
        # Relative to the configuration file, like every path a file names.
        if not os.path.isabs(users):
            users = os.path.join(os.path.dirname(os.path.abspath(path)), users)
        out.append((_str(item, "path", where), users))
    return tuple(out)


def _read_writable(value: object, path: str) -> tuple[object, ...]:
    out: list[object] = []
    for i, item in enumerate(_table_list(value, "writable", path)):
        where = f"{path}: [[writable]] #{i + 1}"
        _only(item, ("path", "allow", "active"), where)
        allow = item.get("allow", ["put", "delete"])
        if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
            raise ConfigError(f"{where} key 'allow' must be a list of strings")
        if "active" in item:
            # How active files under it are served (serverio.http.active);
            # the value is checked with the table (site.rules.compile_writable).
            out.append((_str(item, "path", where), tuple(allow), _str(item, "active", where)))
        else:
            out.append((_str(item, "path", where), tuple(allow)))
    return tuple(out)


def _read_access(value: object, path: str) -> tuple[object, ...]:
    out: list[object] = []
    for i, item in enumerate(_table_list(value, "access", path)):
        where = f"{path}: [[access]] #{i + 1}"
        _only(item, ("path", "allow"), where)
        grants = item.get("allow")
        if not isinstance(grants, dict) or not all(
            isinstance(v, list) and all(isinstance(r, str) for r in v) for v in grants.values()
        ):
            raise ConfigError(
                f"{where} key 'allow' must be a table of PRINCIPAL = [\"right\", ...]"
            )
        # The principals and rights are checked with the users file
        # (serverio.site.rights.compile_access).
        pairs = tuple((str(k), tuple(v)) for k, v in grants.items())
        out.append((_str(item, "path", where), pairs))
    return tuple(out)


def _read_hide(value: object, path: str) -> tuple[object, ...]:
    """[[hide]] tables: ``names`` (globs as --hide's) and an optional
    ``path`` (a folder glob, as [[access]]'s) -> (path or "", names)."""
    out: list[object] = []
    for i, item in enumerate(_table_list(value, "hide", path)):
        where = f"{path}: [[hide]] #{i + 1}"
        _only(item, ("path", "names"), where)
        names = item.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{where} key 'names' must be a non-empty array of globs")
        for name in names:
            if not hide_glob_ok(name):
                raise ConfigError(
                    f"{where} key 'names': {name!r} must be a non-empty relative glob "
                    "(no leading '/')"
                )
        folder = ""
        if "path" in item:
            folder = _str(item, "path", where)
            from ..site.rules import compile_glob  # only with [[hide]] path tables

            try:
                compile_glob(folder)
            except ValueError as exc:
                raise ConfigError(f"{where} key 'path': bad glob {folder!r}: {exc}") from None
        out.append((folder, tuple(names)))
    return tuple(out)


def _read_group(value: object, path: str) -> tuple[object, ...]:
    out: list[object] = []
    for i, item in enumerate(_table_list(value, "group", path)):
        where = f"{path}: [[group]] #{i + 1}"
        _only(item, ("name", "members"), where)
        members = item.get("members", [])
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{where} key 'members' must be a list of user names")
        out.append((_str(item, "name", where), tuple(members)))
    return tuple(out)


def _read_mount(value: object, path: str) -> list[object]:
    out: list[object] = []
    for i, item in enumerate(_table_list(value, "mount", path)):
        where = f"{path}: [[mount]] #{i + 1}"
        _only(item, ("route", "dir"), where)
        directory = _str(item, "dir", where)
        # Relative to the configuration file, like every path a file names.
        if not os.path.isabs(directory):
            directory = os.path.join(os.path.dirname(os.path.abspath(path)), directory)
        out.append((_str(item, "route", where), directory))
    return out


_PROXY_KEYS = (
    "prefix",
    "upstream",
    "strip-prefix",
    "set-request-headers",
    "remove-request-headers",
    "set-response-headers",
    "remove-response-headers",
    "host",
    "connect-timeout",
    "head-timeout",
    "idle-timeout",
    "total-timeout",
    "pass-authorization",
    "case-insensitive",
)


def _fields_table(item: dict[str, object], key: str, where: str) -> tuple[tuple[str, str], ...]:
    sets = item.get(key, {})
    if not isinstance(sets, dict) or not all(isinstance(v, str) for v in sets.values()):
        raise ConfigError(f'{where} key {key!r} must be a table of header = "value"')
    return tuple((str(k), str(v)) for k, v in sets.items())


def _names(item: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    rm = item.get(key, [])
    if not isinstance(rm, list) or not all(isinstance(v, str) for v in rm):
        raise ConfigError(f"{where} key {key!r} must be an array of header names")
    return tuple(rm)


def _read_proxy(value: object, path: str) -> tuple[object, ...]:
    out = []
    for i, item in enumerate(_table_list(value, "proxy", path)):
        where = f"{path}: [[proxy]] #{i + 1}"
        _only(item, _PROXY_KEYS, where)
        strip, passes, fold = (
            _flag(item, key, where)
            for key in ("strip-prefix", "pass-authorization", "case-insensitive")
        )
        host_mode = item.get("host")
        if host_mode is not None and host_mode not in PROXY_HOST_MODES:
            raise ConfigError(f'{where} key \'host\' must be "pass" or "upstream"')
        deadlines = {
            f"{key.split('-')[0]}_timeout": _route_seconds(item, key, where)
            for key in ("connect-timeout", "head-timeout", "idle-timeout", "total-timeout")
            if key in item
        }
        out.append(
            proxy_route(
                _str(item, "prefix", where),
                _str(item, "upstream", where),
                f"{where} key 'upstream'",
                strip_prefix=strip,
                set_up=_fields_table(item, "set-request-headers", where),
                remove_up=_names(item, "remove-request-headers", where),
                set_down=_fields_table(item, "set-response-headers", where),
                remove_down=_names(item, "remove-response-headers", where),
                host_mode=host_mode,
                pass_authorization=passes,
                case_insensitive=fold,
                **deadlines,
            )
        )
    return tuple(out)


def _flag(item: dict[str, object], key: str, where: str) -> bool:
    """A [[proxy]] table's true/false key (false when absent)."""
    value = item.get(key, False)
    if type(value) is not bool:
        raise ConfigError(f"{where} key {key!r} must be true or false")
    return value


def _route_seconds(item: dict[str, object], key: str, where: str) -> float:
    """A [[proxy]] table's deadline: a positive number of seconds."""
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(f"{where} key {key!r} must be a positive number of seconds")
    return float(value)


TableReader = Callable[[object, str], Sequence[object]]
_READERS: dict[str, TableReader] = {
    "headers": _read_headers,
    "redirects": _read_redirects,
    "rewrites": _read_rewrites,
    "errors": _read_errors,
    "auth": _read_auth,
    "writable": _read_writable,
    "access": _read_access,
    "group": _read_group,
    "hide": _read_hide,
    "proxy": _read_proxy,
}
# Options whose TOML form is an array of tables: --mount ROUTE=DIR is
# [[mount]] route = ..., dir = ... (read into the option's own list, so
# the two spellings are one setting; dump() writes it back as tables).
OPTION_TABLES: dict[str, TableReader] = {"mount": _read_mount}
# TOML key -> (namespace attribute, reader), from the declarations of
# serverio.ops.options.TABLES: the attribute is the Config field, which
# config_from_args reads and dump() writes back.
TABLES: dict[str, tuple[str, TableReader]] = {
    t.key: (t.field, _READERS[t.key]) for t in _TABLE_DECLARATIONS
}


def _dump_hide(args: argparse.Namespace) -> list[str]:
    """The [[hide]] tables; with any, the --hide globs as the first one
    (without a path: the same rule), since ``hide`` is one TOML key."""
    lines: list[str] = []
    tables = getattr(args, "hide_tables", ())
    plain = getattr(args, "hide", None) or ()
    if tables and plain:
        tables = (("", tuple(plain)), *tables)
    for folder, names in tables:
        lines += ["", "[[hide]]"]
        if folder:
            lines.append(f"path = {_toml_str(folder)}")
        lines.append(f"names = {_toml_value(list(names))}")
    return lines


def _dump_tables(args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    errors = getattr(args, "error_pages", ())
    for glob, sets, removes in getattr(args, "header_rules", ()):
        lines += ["", "[[headers]]", f"path = {_toml_str(glob)}"]
        if removes:
            lines.append(f"remove = {_toml_value(list(removes))}")
        if sets:
            pairs = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in sets)
            lines.append(f"set = {{ {pairs} }}")
    for src, to, status in getattr(args, "redirects", ()):
        lines += [
            "",
            "[[redirects]]",
            f"from = {_toml_str(src)}",
            f"to = {_toml_str(to)}",
            f"status = {status}",
        ]
    for src, to in getattr(args, "rewrites", ()):
        lines += ["", "[[rewrites]]", f"from = {_toml_str(src)}", f"to = {_toml_str(to)}"]
    for glob, users in getattr(args, "auth", ()):
        lines += ["", "[[auth]]", f"path = {_toml_str(glob)}", f"users-file = {_toml_str(users)}"]
    for glob, allow, *active in getattr(args, "writable", ()):
        lines += [
            "",
            "[[writable]]",
            f"path = {_toml_str(glob)}",
            f"allow = {_toml_value(list(allow))}",
        ]
        lines += [f"active = {_toml_str(a)}" for a in active]
    for glob, grants in getattr(args, "access", ()):
        pairs = ", ".join(f"{_toml_str(k)} = {_toml_value(list(v))}" for k, v in grants)
        lines += ["", "[[access]]", f"path = {_toml_str(glob)}", f"allow = {{ {pairs} }}"]
    for name, members in getattr(args, "groups", ()):
        lines += ["", "[[group]]", f"name = {_toml_str(name)}"]
        lines.append(f"members = {_toml_value(list(members))}")
    for route, directory in getattr(args, "mount", None) or ():
        # Absolute: a relative dir in a file is relative to the file, on
        # the command line to the working directory.
        where = _toml_str(os.path.abspath(directory))
        lines += ["", "[[mount]]", f"route = {_toml_str(route)}", f"dir = {where}"]
    routes = getattr(args, "proxy_routes", ())
    if routes:
        routes = tuple(parse_proxy_spec(t) for t in getattr(args, "proxy", None) or ()) + routes
    for r in routes:
        lines += [
            "",
            "[[proxy]]",
            f"prefix = {_toml_str(r.prefix)}",
            f"upstream = {_toml_str(r.upstream)}",
        ]
        if r.strip_prefix:
            lines.append("strip-prefix = true")
        if r.pass_authorization:
            lines.append("pass-authorization = true")
        if r.case_insensitive:
            lines.append("case-insensitive = true")
        if r.host_mode is not None:
            lines.append(f"host = {_toml_str(r.host_mode)}")
        for key, seconds in (
            ("connect-timeout", r.connect_timeout),
            ("head-timeout", r.head_timeout),
            ("idle-timeout", r.idle_timeout),
            ("total-timeout", r.total_timeout),
        ):
            if seconds is not None:
                lines.append(f"{key} = {seconds!r}")
        for key, sets in (("set-request-headers", r.set_up), ("set-response-headers", r.set_down)):
            if sets:
                pairs = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in sets)
                lines.append(f"{key} = {{ {pairs} }}")
        for key, names in (
            ("remove-request-headers", r.remove_up),
            ("remove-response-headers", r.remove_down),
        ):
            if names:
                lines.append(f"{key} = {_toml_value(list(names))}")
    if errors:
        lines += ["", "[errors]"] + [f"{_toml_str(k)} = {_toml_str(v)}" for k, v in errors]
    return lines


def parse_with_config(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    env: Mapping[str, object] | None = None,
) -> argparse.Namespace:
    """Parse ``argv``; with ``--config FILE``, file values are the defaults.

    ``env`` ({attribute: value}, serverio.ops.options.env_values) overrides
    the file's values and is overridden by the command line.  Raises
    ConfigError for problems in the file; argparse itself exits 2 on
    command-line errors.
    """
    args = parser.parse_args(argv)
    path = getattr(args, "config", None)
    from_file = load(parser, path) if path else {}
    values = {**from_file, **(env or {})}
    if not values:
        return _merge_lists(args, {}, {})
    keys = option_keys(parser)
    lists = {a.dest for a in keys.values() if _is_list(a)}
    # Repeatable options append to their default in argparse, so a file list
    # would be extended rather than replaced by the command line; apply those
    # only when the command line gave none.
    parser.set_defaults(**{d: v for d, v in values.items() if d not in lists})
    args = parser.parse_args(argv)
    for dest in lists & values.keys() - _MERGED:
        if getattr(args, dest) in (None, []):
            setattr(args, dest, values[dest])
    return _merge_lists(args, from_file, env or {})


# The lists declared ``merge`` (-H): the file's items, then the
# environment's, then the command line's, instead of the last replacing.
_MERGED = frozenset(o.dest for o in OPTIONS if o.merge)


def _merge_lists(
    args: argparse.Namespace, from_file: Mapping[str, object], env: Mapping[str, object]
) -> argparse.Namespace:
    """Add up the ``merge`` lists; ``-H "Name:"`` then removes Name from the
    sum (serverio.site.rules.merge_header_lines, docs/cli.md "Precedence")."""
    for dest in _MERGED:
        layers = (from_file.get(dest), env.get(dest), getattr(args, dest, None))
        items = [item for layer in layers if isinstance(layer, list) for item in layer]
        if items:
            from ..site.rules import merge_header_lines  # only with -H lists to add up

            setattr(args, dest, list(merge_header_lines(items)))
    return args


def _toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


# A switch flag's attribute -> the valued option's that implies it
# (``spa`` -> ``spa_file``).
_SWITCHED = {
    o.switch[0].lstrip("-").replace("-", "_"): o.dest for o in OPTIONS if o.switch is not None
}


def dump(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The effective configuration (file + command line) as TOML."""
    lines = ["# serverio effective configuration (--print-config)"]
    for key, action in option_keys(parser).items():
        if key in OPTION_TABLES:
            continue  # --mount: written as [[mount]] tables below
        value = getattr(args, action.dest, None)
        if _is_flag(action):
            value = value == action.const if action.const is not None else bool(value)
            implied = _SWITCHED.get(action.dest)
            if implied is not None and getattr(args, implied, None) is not None:
                value = True  # --spa-file FILE implies --spa: say so (issue 45)
        opt = by_dest(action.dest)
        if value is None and _is_list(action) and opt is not None and opt.field_default:
            value = opt.field_default  # not given: the effective list is the default
        if key == "hide" and getattr(args, "hide_tables", None):
            # A TOML key is a list or tables, not both: the --hide globs are
            # written as a [[hide]] table without a path (the same rule).
            lines.append("# hide: see the [[hide]] tables")
            continue
        if key == "proxy" and value and getattr(args, "proxy_routes", ()):
            # A TOML key is a list or tables, not both: the --proxy routes
            # are written as [[proxy]] tables too (the same routes).
            lines.append("# proxy: see the [[proxy]] tables")
            continue
        if opt is not None and opt.fs_path and isinstance(value, str):
            value = os.path.abspath(value)  # read back the same wherever the file goes
        if value is None:
            lines.append(f"# {key} is not set")
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    # Tables last: every top-level key must come before the first table.
    lines += _dump_tables(args) + _dump_hide(args)
    return "\n".join(lines) + "\n"
