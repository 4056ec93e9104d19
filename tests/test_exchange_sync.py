"""The exchange's step is synchronous; only the driver and its fulfillers
await (issue 42 item 1's AST gate).

Read from the source, not run:

* the step modules (``serverio/pipeline/exchange.py``, the exchange and
  the files; ``serverio/pipeline/stages.py``, the stage list) import no
  trio and define no coroutine (but a Protocol's declaration of what the
  driver awaits of the site rules);
* every function the step functions reach inside ``serverio/pipeline/``
  (followed through calls, transitively: ``handler.respond_now``, the
  content service's cache lookups, ...) has no ``await``, no
  ``async for``/``async with`` and is no coroutine; of trio such a
  function may read the clock (``trio.current_time``), nothing else;
* the coroutines of ``serverio/pipeline/`` (but a Protocol's
  declarations: the hooks', what the driver asks of the site rules) are
  the driver and the fulfillers it names (the handler's deferred steps,
  the content follow-ups, the access hook): a new one is a decision,
  made here.

A nested ``async def`` inside a reached function is work handed to a
job or the driver, not a call: it is not followed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import serverio

PIPELINE = Path(serverio.__file__).resolve().parent / "pipeline"
STEP_MODULES = ("exchange.py", "stages.py")

# The pipeline's coroutines: the driver and the fulfillers it names.
AWAITING = {
    "driver.py": {"drive", "_fulfil", "access", "_write", "_upstream", "_NoContent.next_chunk"},
    "handler.py": {
        "watching_client",
        "client_gone",
        "run_watched",
        "Handler.running",
        "Handler.fulfil",
        "Handler._transformed",
        "Handler._settled",
        "Handler._pooled",
        "Revalidations._run",
    },
    "content.py": {
        "_nothing",
        "ContentService.running",
        "ContentService.finish",
        "ContentService._compressed",
        "ContentService._digest",
        "ContentService._readme",
        "ContentService._listing",
        "ContentService._search",
        "ContentService._scan",
        "ContentService._rendered",
    },
    # The recursive search (?q=): its first hop is part of the Listing
    # need's fulfilment (ContentService._search awaits prime); the rest is
    # a streamed body's source, pulled by the transport (the streamed-body
    # seam, like an archive's).
    "search.py": {
        "SearchStream.prime",
        "SearchStream.next_chunk",
        "SearchStream._step",
        "SearchStream._render",
    },
    # The access hook a write step is handed without site rules
    # (hooks.NO_RULES): the Admit coroutine's shape, deciding nothing.
    "hooks.py": {"_no_rules"},
}

Func = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.Module) -> dict[str, Func]:
    """Module-level functions and methods, by qualified name."""
    out: dict[str, Func] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + child.name] = child

    walk(tree, "")
    return out


def _pipeline() -> dict[str, tuple[str, Func]]:
    """Every pipeline function: ``module:qualname`` -> (file name, node)."""
    out: dict[str, tuple[str, Func]] = {}
    for path in sorted(PIPELINE.glob("*.py")):
        for name, node in _functions(ast.parse(path.read_text())).items():
            out[f"{path.name}:{name}"] = (path.name, node)
    return out


def _own_nodes(func: Func) -> list[ast.AST]:
    """The nodes of ``func``'s body, not of the functions nested in it."""
    nested = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    out: list[ast.AST] = []
    todo: list[ast.AST] = [node for node in func.body if not isinstance(node, nested)]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, nested))
    return out


# What a receiver names, where the step and the handler call the pipeline's
# own objects: ``machine.handler.respond_now``, ``self.content.finish_cached``,
# ``self.revalidations.start``.
RECEIVERS = {"handler": "Handler", "content": "ContentService", "revalidations": "Revalidations"}


def _callees(key: str, func: Func, every: dict[str, tuple[str, Func]]) -> set[str]:
    """The pipeline functions ``func`` calls: a function of its module or
    imported by name from another pipeline module (``f(...)``), a method of
    its own class (``self.m(...)``), or of the pipeline class its receiver
    names (:data:`RECEIVERS`).  Calls on other objects (the site rules, a
    cache, a plan) leave the pipeline and are not followed."""
    qualname = key.partition(":")[2]
    own_class = qualname.rpartition(".")[0]
    out: set[str] = set()
    for node in _own_nodes(func):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Name):
            out |= {k for k in every if k.partition(":")[2] == callee.id}
        elif isinstance(callee, ast.Attribute):
            receiver = callee.value
            if isinstance(receiver, ast.Attribute):
                owner = RECEIVERS.get(receiver.attr)
            elif isinstance(receiver, ast.Name):
                owner = own_class if receiver.id == "self" else RECEIVERS.get(receiver.id)
            else:
                owner = None
            if owner:
                out |= {k for k in every if k.partition(":")[2] == f"{owner}.{callee.attr}"}
    return out


def _reached() -> dict[str, tuple[str, Func]]:
    """The pipeline functions the step module's functions reach."""
    every = _pipeline()
    todo = [key for key in every if key.partition(":")[0] in STEP_MODULES]
    seen = set(todo)
    while todo:
        key = todo.pop()
        for callee in _callees(key, every[key][1], every):
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return {key: every[key] for key in seen}


def _awaits(func: Func) -> bool:
    """A coroutine with a body, or a function that awaits (a Protocol's
    declaration of a coroutine awaits nothing)."""
    if isinstance(func, ast.AsyncFunctionDef) and _declaration(func):
        return False
    return isinstance(func, ast.AsyncFunctionDef) or any(
        isinstance(node, ast.Await | ast.AsyncFor | ast.AsyncWith) for node in _own_nodes(func)
    )


def _trio_uses(func: Func) -> set[str]:
    return {
        node.attr
        for node in _own_nodes(func)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "trio"
    }


@pytest.mark.parametrize("module", STEP_MODULES)
def test_the_step_modules_import_no_trio_and_define_no_coroutine(module: str) -> None:
    tree = ast.parse((PIPELINE / module).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    assert "trio" not in imported
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Await)]
    # A coroutine's declaration in a Protocol (what the driver awaits of
    # the site rules: ``SiteSteps.route``) has no body; none has one here.
    coroutines = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]
    assert [n.name for n in coroutines if not _declaration(n)] == []


def _declaration(func: ast.AsyncFunctionDef) -> bool:
    """A protocol member: a docstring and/or ``...``, nothing else."""
    body = [
        n for n in func.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    return not body


def test_what_the_step_reaches_in_the_pipeline_is_synchronous() -> None:
    reached = _reached()
    # The walk follows the step into the handler (the check can fail).
    assert "handler.py:Handler.respond_now" in reached
    assert "content.py:ContentService.finish_cached" in reached
    assert "handler.py:Handler.followups" in reached
    assert "handler.py:Revalidations.start" in reached
    assert "stages.py:SiteStage.step" in reached
    awaiting = sorted(key for key, (_, func) in reached.items() if _awaits(func))
    assert awaiting == []
    # Of trio: the clock, and the Event of a background revalidation the
    # warm path starts without waiting for it (Revalidations.start: the
    # request is answered from the entry meanwhile).
    uses = {key: _trio_uses(func) for key, (_, func) in reached.items()}
    assert {key: u for key, u in uses.items() if u - {"current_time", "Event"}} == {}


def test_only_the_driver_and_its_fulfillers_await() -> None:
    found: dict[str, set[str]] = {}
    for key, (module, func) in _pipeline().items():
        if _awaits(func):
            found.setdefault(module, set()).add(key.partition(":")[2])
    assert found == AWAITING
