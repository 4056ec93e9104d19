"""http/ knows no feature: each feature registers the request fields it
reads (serverio.http.extra), and none reads another's (issue 42, item 3).

* The field scan (wire/fields.py) and the request facts (http/core.py) name
  no feature's field: RequestFacts has the core's attributes only, and the
  scan keeps what is registered, nothing it names itself.
* Every registration is a module-level constant of a feature (not of
  http/ or wire/), and only modules of the registering package import it:
  two features that read one field each register it.
* ``req.extra.<name>`` (the old fixed class of every feature's fields) is
  gone: a field is read with its registered reader.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import serverio
from serverio.http.core import NO_EXTRA, RequestFacts
from serverio.http.extra import HOST, KEPT, request_field
from serverio.http.target import parse_target
from serverio.wire.fields import scan_fields

PACKAGE = Path(serverio.__file__).resolve().parent

# What the HTTP core itself reads of a request; a feature's field is not one.
CORE_FACTS = {
    "method",
    "target",
    "keep_alive",
    "if_match",
    "if_none_match",
    "if_modified_since",
    "if_unmodified_since",
    "range",
    "if_range",
    "has_body",
    "accept",
    "accept_encoding",
    "want_repr_digest",
    "authorization",
    "tls",
    "client",
    "extra",
}


@functools.cache
def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# Modules that also register one field whose name the configuration gives
# (the login feature's --trusted-user-header): a call with a variable there.
_CONFIGURED = frozenset(("serverio.login.identity",))


def _registrations(modules: dict[str, ast.Module]) -> dict[str, dict[str, str]]:
    """module -> {constant: field name} of every ``request_field("...")``,
    and every call found anywhere (a call not assigned at module level is
    returned under the constant ``""``)."""
    out: dict[str, dict[str, str]] = {}
    for name, tree in modules.items():
        top = {id(n.value): n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "request_field"):
                continue
            if name in _CONFIGURED and not isinstance(node.args[0], ast.Constant):
                continue  # a field the configuration names (--trusted-user-header)
            assert node.args and isinstance(node.args[0], ast.Constant), ast.unparse(node)
            field = str(node.args[0].value).lower()
            stmt = top.get(id(node))
            target = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
            elif isinstance(stmt, ast.AnnAssign):
                target = stmt.target
            const = target.id if isinstance(target, ast.Name) else ""
            out.setdefault(name, {})[const] = field
    return out


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def test_request_facts_carry_the_cores_fields_and_one_extra() -> None:
    names = {f.name for f in dataclasses.fields(RequestFacts)}
    assert names == CORE_FACTS, f"a feature's field in RequestFacts: {names - CORE_FACTS}"
    assert NO_EXTRA == () and RequestFacts(b"GET", parse_target(b"GET", b"/")).extra is NO_EXTRA
    assert not hasattr(serverio.http.core, "ExtraFields")


def test_the_scan_and_the_core_name_no_feature_field() -> None:
    modules = _modules()
    registered = {f for fields in _registrations(modules).values() for f in fields.values()}
    # Every feature's field the old ExtraFields held is registered by its feature.
    assert {"depth", "destination", "if", "origin", "upgrade", "forwarded"} <= registered
    assert {"content-digest", "access-control-request-method", "sec-fetch-site"} <= registered
    for module in ("serverio.wire.fields", "serverio.http.core", "serverio.http.extra"):
        literals = {
            (n.value.decode("latin-1") if isinstance(n.value, bytes) else n.value).lower()
            for n in ast.walk(modules[module])
            if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))
        }
        if module == "serverio.wire.fields":
            assert not literals & registered, f"{module} names {literals & registered}"
        else:  # core: response fields share names (Content-Type): only not registered
            assert not [m for m in _registrations({module: modules[module]})]


def test_each_registration_is_a_features_constant_read_only_by_that_feature() -> None:
    modules = _modules()
    registrations = _registrations(modules)
    assert registrations, "no request_field call found"
    for module, fields in registrations.items():
        assert "" not in fields, f"{module}: request_field() not assigned to a module constant"
        assert _package(module) not in {"http", "wire"}, f"{module} registers a field"
    constants = {(m, c) for m, fields in registrations.items() for c in fields}
    packages = {p.parent for p in PACKAGE.rglob("__init__.py")}
    for name, tree in modules.items():
        is_package = (PACKAGE.parent / name.replace(".", "/")) in packages
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _resolve(name, node, is_package)
            for alias in node.names:
                if (source, alias.name) in constants:
                    assert _package(name) == _package(source), (
                        f"{name} imports {alias.name}, {source}'s field: register it instead"
                    )


def test_no_module_reads_a_field_as_an_attribute_of_extra() -> None:
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                assert node.value.attr != "extra", f"{name}: {ast.unparse(node)}"


def test_the_scan_keeps_a_field_once_registered() -> None:
    name = "x-serverio-test-field"
    headers = [(b"host", b"h"), (name.encode(), b"a"), (name.encode(), b"b"), (b"x-other", b"c")]
    assert name.encode() not in KEPT
    assert scan_fields(headers).extra == ()
    field = request_field("X-Serverio-Test-Field")  # any case
    assert KEPT[name.encode()] == name and request_field(name) == field  # idempotent
    kept = scan_fields(headers)
    # Joined as RFC 9110 §5.3 says; the Host kept beside it; x-other not.
    assert kept.extra == ((name, "a, b"), ("host", "h"))
    req = RequestFacts(b"GET", parse_target(b"GET", b"/"), extra=kept.extra)
    assert field.of(req) == "a, b" and HOST.of(req) == "h"
    assert request_field("depth").of(req) is None
    plain = scan_fields([(b"host", b"h"), (b"accept", b"*/*")])
    assert plain.extra is NO_EXTRA  # a plain GET still shares the empty tuple


def test_a_field_name_that_is_no_token_or_the_hosts_is_refused() -> None:
    for bad in ("", "a b", "x:y", "host", "Host", "caf\u00e9"):
        try:
            request_field(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} registered")


def test_the_core_reads_no_features_settings_and_computes_no_features_allow() -> None:
    # The Allow of OPTIONS and 405 is the write feature's (route's ``allow``,
    # the pipeline's hook): the core reads the files and content policies only.
    tree = _modules()["serverio.http.core"]
    policies = {
        node.value.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "cfg"
    }
    assert policies <= {"files", "content"}, policies
    assert not hasattr(serverio.http.core, "webdav_at")
    assert not hasattr(serverio.http.core, "ALLOW_DAV")
    assert not hasattr(serverio.http.core, "ALLOW_WRITES")
