"""Export-only code: a script or test whose purpose is to compile a model for Neuron and save it.

::

    model = NeuronModelForCausalLM.from_pretrained(model_id, export=True, num_cores=2, ...)
    model.save_pretrained("llama_neuron/")

TorchNeuron has no ahead-of-time export: the consumer of ``llama_neuron/`` loads the original
checkpoint with ``from_pretrained(model_id, device_map="neuron")`` and compiles at its first call.
Rewriting such a load into a native load followed by ``save_pretrained`` makes a pointless load and
re-save (a tensor-parallel one needs torchrun); the step is obsolete instead. The rules that migrate
``from_pretrained`` of optimum.neuron classes leave an export-only load as it is, with a marker saying
so and what its consumer should load (:func:`marker_text`), and the renamers leave its class name
alone (:func:`kept_names`), so that the statement stays consistent.

An export-only load is ``<optimum.neuron class>.from_pretrained(..., export=True, ...)``

* whose result is saved at once: ``X.from_pretrained(...).save_pretrained(dir)``; or
* assigned to a plain name, assigned once in its function (or module), whose every other use is
  ``name.save_pretrained(...)`` / ``name.push_to_hub(...)`` as a statement (at least one save), or, in a
  test function (``test*``), an argument of ``assert`` / ``self.assert*(...)`` (a test of the export).

In a test function that runs ``optimum-cli export neuron`` (through ``subprocess`` / ``os.system``:
:func:`cli_export`), a load of an optimum.neuron class used only by assertions is a test of the export
too, with or without ``export=True``. The statements that use an export-only load (its saves and
assertions) are kept with it (:func:`inside_export_only`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import libcst as cst

from migrator.model import OUTSIDE_NAMES, fitted
from migrator.tree import child_nodes

SAVES = ("save_pretrained", "push_to_hub")
MODEL_ID_KEYWORDS = ("model_id", "model_name_or_path", "pretrained_model_name_or_path", "model")


SUBPROCESS = ("subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
              "subprocess.check_output", "os.system", "os.popen")


def _words(node: cst.BaseExpression) -> list[str] | None:
    """The words of a command: a list/tuple of strings, or one string split at spaces."""
    if isinstance(node, (cst.List, cst.Tuple)):
        out = []
        for el in node.elements:
            if isinstance(el.value, cst.SimpleString) and isinstance(el.value.evaluated_value, str):
                out.extend(el.value.evaluated_value.split())
            elif isinstance(el, cst.StarredElement):
                out.append("\0*")
            else:
                out.append("\0" + cst.Module([]).code_for_node(el.value))  # a word known only at run time
        return out
    if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
        return node.evaluated_value.split()
    if isinstance(node, cst.FormattedString):
        return "".join(p.value if isinstance(p, cst.FormattedStringText) else "\0 " for p in node.parts).split()
    return None


class CliExport(NamedTuple):
    model: str | None  # the --model / -m word, as source (a string literal), None when not a literal
    output: str | None  # the last word (the output directory), likewise


def cli_export(call: cst.Call, ctx) -> CliExport | None:
    """``subprocess.run(["optimum-cli", "export", "neuron", ...])`` (or Popen/call/check_*; ``os.system(...)``
    with the command as a string): its model and output directory."""
    if (ctx.qualname(call.func) or "") not in SUBPROCESS or not call.args:
        return None
    words = _words(call.args[0].value)
    if not words:
        return None
    for i, w in enumerate(words):
        if w.rsplit("/", 1)[-1] == "optimum-cli" and words[i + 1:i + 3] in (["export", "neuron"],
                                                                             ["export", "neuronx"]):
            rest = words[i + 3:]
            model = next((rest[k + 1] for k, v in enumerate(rest[:-1]) if v in ("--model", "-m")), None)
            model = model or next((v.split("=", 1)[1] for v in rest if v.startswith("--model=")), None)
            output = rest[-1] if rest and not rest[-1].startswith("-") and len(rest) > 1 else None
            return CliExport(*(None if v is None or v == "\0*" or "\0" in v[1:] else v[1:] if v.startswith("\0")
                               else repr(v) for v in (model, output)))
    return None


class ExportOnly(NamedTuple):
    call: cst.Call
    model_id: str | None  # the source of the checkpoint argument
    saved_to: str | None  # the source of the first save_pretrained argument
    test: bool  # in a test function
    target: str | None = None  # the name the load is assigned to
    scope: cst.CSTNode | None = None  # the function (or module) of that name
    uses: tuple[cst.CSTNode, ...] = ()  # the statements that use it (saves, assertions): kept with it


def _export_true(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "export" and isinstance(a.value, cst.Name)
               and a.value.value == "True" for a in call.args)


def _is_load(call: cst.Call, ctx) -> bool:
    """``<optimum.neuron class>.from_pretrained(...)``."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained"):
        return False
    qual = ctx.class_qualname(func.value) or ""
    return qual.startswith("optimum.neuron.")


def _save_call(stack: list[cst.CSTNode], i: int) -> cst.Call | None:
    """``stack[i]`` is ``name`` / the load in ``<it>.save_pretrained(...)`` (or push_to_hub) as a statement."""
    if i < 3:
        return None
    attr, call, expr = stack[i - 1], stack[i - 2], stack[i - 3]
    if isinstance(attr, cst.Attribute) and attr.value is stack[i] and attr.attr.value in SAVES \
            and isinstance(call, cst.Call) and call.func is attr and isinstance(expr, cst.Expr):
        return call
    return None


def _first_arg(call: cst.Call, module: cst.Module) -> str | None:
    for a in call.args:
        if a.keyword is None and not a.star:
            return module.code_for_node(a.value)
    for a in call.args:
        if a.keyword is not None and a.keyword.value in ("save_directory", "repo_id", *MODEL_ID_KEYWORDS):
            return module.code_for_node(a.value)
    return None


def _in_assert(stack: list[cst.CSTNode], i: int) -> cst.CSTNode | None:
    """The statement, when ``stack[i]`` is read by ``assert ...`` or a ``self.assert*(...)`` statement."""
    for j in range(i - 1, -1, -1):
        node = stack[j]
        if isinstance(node, cst.Assert):
            return node
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value.startswith("assert") and isinstance(stack[j + 1], cst.Arg) \
                and j > 0 and isinstance(stack[j - 1], cst.Expr):
            return stack[j - 1]
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return None
    return None


class _Inventory(NamedTuple):
    loads: list[tuple[cst.Call, list[cst.CSTNode]]]  # the optimum.neuron loads, with their stacks
    cli_scopes: dict[int, CliExport]  # functions that run `optimum-cli export neuron`
    names: dict[str, list[cst.Name]]  # name -> its Name nodes, in walk order
    parents: dict[int, cst.CSTNode]  # id(node) -> its parent, for the nodes below the module


def _inventory(ctx) -> _Inventory:
    """The unit's optimum.neuron loads and every Name node, by name, with the tree's parent links (one walk
    per unit; a use's ancestors are looked up only for the names asked about: :func:`_uses`)."""
    cache = ctx.scratch
    if "_export_only_inventory" in cache:
        return cache["_export_only_inventory"]
    module = ctx.module
    found = _Inventory([], {}, {}, {})
    cache["_export_only_inventory"] = found
    if "from_pretrained" not in ctx.source:
        return found
    cli = "optimum-cli" in ctx.source
    names, parents = found.names, found.parents
    Call, Name = cst.Call, cst.Name
    todo: list[cst.CSTNode] = [module]
    while todo:
        node = todo.pop()
        t = type(node)
        if t is Name:
            names.setdefault(node.value, []).append(node)
            continue
        if t is Call:
            if _is_load(node, ctx):
                found.loads.append((node, _ancestry(found, node)))
            elif cli:
                command = cli_export(node, ctx)
                if command is not None:
                    found.cli_scopes.setdefault(id(_scope_of(_ancestry(found, node), module)), command)
        children = child_nodes(node)
        for child in children:
            parents[id(child)] = node
        todo.extend(reversed(children))
    return found


def _ancestry(inv: _Inventory, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The module, ``node``'s ancestors and ``node`` (the walk's stack at ``node``)."""
    out = [node]
    parent = inv.parents.get(id(node))
    while parent is not None:
        out.append(parent)
        parent = inv.parents.get(id(parent))
    out.reverse()
    return out


def _uses(inv: _Inventory, scope: cst.CSTNode, name: str) -> list[tuple[int, list[cst.CSTNode]]]:
    """The Name nodes of ``name`` in ``scope`` (the module, or a function or lambda: a use in a nested
    function counts for the outer scopes too), each as (its index, its stack)."""
    out = []
    for node in inv.names.get(name, ()):
        stack = _ancestry(inv, node)
        if isinstance(scope, cst.Module) or any(n is scope for n in stack):
            out.append((len(stack) - 1, stack))
    return out


def _scope_of(stack: list[cst.CSTNode], module: cst.Module) -> cst.CSTNode:
    return next((n for n in reversed(stack) if isinstance(n, (cst.FunctionDef, cst.Lambda))), module)


def _target(stack: list[cst.CSTNode]) -> cst.Name | None:
    """The plain name the load at the end of ``stack`` is assigned to (``model = X.from_pretrained(...)``)."""
    call, parent = stack[-1], stack[-2]
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, cst.Name):
        return parent.targets[0].target
    return None


def _other_uses(inv: _Inventory, scope: cst.CSTNode, target: cst.Name):
    """The uses of ``target``'s name in ``scope`` other than the assignment itself, attribute names and
    keywords; None when a function or class of that name makes them unknowable."""
    out = []
    for j, use in _uses(inv, scope, target.value):
        node, up = use[j], use[j - 1]
        if node is target:
            continue
        if isinstance(up, cst.Attribute) and up.attr is node or isinstance(up, cst.Arg) and up.keyword is node:
            continue  # `x.model`, `f(model=...)`: not the name
        if isinstance(up, (cst.FunctionDef, cst.ClassDef)) and up.name is node:
            return None  # a function or class of that name
        out.append((j, use))
    return out


def export_only_loads(ctx) -> dict[int, ExportOnly]:
    """id(call) -> ExportOnly for every export-only load of the unit (computed once per unit)."""
    cache = ctx.scratch
    if "_export_only" in cache:
        return cache["_export_only"]
    found: dict[int, ExportOnly] = {}
    cache["_export_only"] = found
    if "export" not in ctx.source or "from_pretrained" not in ctx.source:
        return found
    module = ctx.module
    inv = _inventory(ctx)
    for call, stack in inv.loads:
        i = len(stack) - 1
        model_id = _first_arg(call, module)
        scope = _scope_of(stack, module)
        test = isinstance(scope, cst.FunctionDef) and scope.name.value.startswith("test")
        if not _export_true(call):
            if not (test and id(scope) in inv.cli_scopes):
                continue
            model_id = inv.cli_scopes[id(scope)].model or "the exported model id"  # what the CLI compiled
        saved = _save_call(stack, i)
        if saved is not None:
            found[id(call)] = ExportOnly(call, model_id, _first_arg(saved, module) if saved.func.attr.value
                                         == "save_pretrained" else None, test)
            continue
        target = _target(stack)
        uses = _other_uses(inv, scope, target) if target is not None else None
        if uses is None or (scope is module and target.value in OUTSIDE_NAMES.get()):
            continue  # (a later block of the page uses the loaded model: it is not an export only)
        saved_to: str | None = None
        saves = 0
        statements: list[cst.CSTNode] = []
        for j, use in uses:
            save = _save_call(use, j)
            if save is not None:
                if save.func.attr.value == "save_pretrained":  # type: ignore[union-attr]
                    saves += 1
                    saved_to = saved_to or _first_arg(save, module)
                statements.append(use[j - 3])
                continue
            checked = _in_assert(use, j) if test else None
            if checked is None:
                break
            saves += 1
            statements.append(checked)
        else:
            if saves:
                found[id(call)] = ExportOnly(call, model_id, saved_to, test, target.value, scope, tuple(statements))
    return found


#: attributes whose reads only inspect a model (they run nothing on it)
INSPECTED = frozenset({"config", "generation_config", "name_or_path", "device", "dtype"})


def never_run(ctx, call: cst.Call) -> bool:
    """True when the optimum.neuron load ``call`` is assigned to a name that nothing in its function (or
    module) calls, passes, returns or runs: its only uses are saves and reads of :data:`INSPECTED`
    attributes, or none. Advice on the shapes its inputs should have is then moot."""
    inv = _inventory(ctx)
    stack = next((s for c, s in inv.loads if c is call), None)
    target = _target(stack) if stack is not None else None
    if target is None:
        return False
    uses = _other_uses(inv, _scope_of(stack, ctx.module), target)
    if uses is None:
        return False
    for j, use in uses:
        up = use[j - 1]
        if _save_call(use, j) is not None:
            continue
        if isinstance(up, cst.Attribute) and up.value is use[j] and up.attr.value in INSPECTED \
                and not (j >= 2 and isinstance(use[j - 2], cst.Call) and use[j - 2].func is up):
            continue
        return False
    return True


def export_only_model(ctx, name: str) -> bool:
    """True when ``name``, in the function (or module) being handled, holds an export-only load."""
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, (cst.FunctionDef, cst.Lambda))), ctx.module)
    return any(item.target == name and item.scope is scope for item in export_only_loads(ctx).values())


def kept_names(ctx) -> set[str]:
    """Local names of the classes of export-only loads (``X`` of ``X.from_pretrained``): the renamers leave
    them, and their imports, as they are."""
    out = set()
    for item in export_only_loads(ctx).values():
        value = item.call.func.value  # type: ignore[attr-defined]
        while isinstance(value, cst.Attribute):
            value = value.value
        if isinstance(value, cst.Name):
            out.add(value.value)
    return out


def inside_export_only(ctx, stack=None) -> bool:
    """True when the node being handled lies inside an export-only load or a statement that uses one."""
    loads = export_only_loads(ctx)
    if not loads:
        return False
    kept = ctx.scratch.get("_export_only_kept")
    if kept is None:
        kept = ctx.scratch["_export_only_kept"] = {id(n) for item in loads.values() for n in (item.call, *item.uses)}
    return any(id(n) in kept for n in (ctx.stack if stack is None else stack))


def _short(code: str | None, default: str) -> str:
    if code is None:
        return default
    code = " ".join(code.split())
    return code if len(code) <= 40 else code[:37] + "..."


def marker_text(item: ExportOnly) -> str:
    """The one sentence an export-only load gets (at most 120 characters for short names)."""
    model_id = _short(item.model_id, "the original checkpoint")
    if item.test:
        return fitted(f"Delete this test of a Neuron export, or test from_pretrained({model_id}) instead.",
                      "Delete this test of a Neuron export, or test from_pretrained of the original checkpoint.")
    saved = _short(item.saved_to, "the export") if item.saved_to else "the export"
    swapped = [a for a in item.call.args if a.keyword is not None and a.keyword.value in _SWAPPED_PARTS]
    if swapped:
        # `unet_id=` / `controlnet_ids=`: the export replaced a part of the pipeline; the load must too
        part = swapped[0].keyword.value  # type: ignore[union-attr]
        source = _short(cst.Module([]).code_for_node(swapped[0].value), part)
        return fitted(f"Delete this Neuron export; load {model_id} with its {_SWAPPED_PARTS[part]} from {source} "
                      f"wherever {saved} was loaded.",
                      f"Delete this Neuron export; load {model_id} with its {_SWAPPED_PARTS[part]} from {source} instead.",
                      f"Delete this Neuron export; load the checkpoint with the {_SWAPPED_PARTS[part]} {part}= names.")
    if item.saved_to and not re.match(r"[rbuf]*['\"]", item.saved_to, re.I):
        # saved to a location the code computes (a SageMaker job's model_dir, an output argument): another process
        # loads what lands there, so the plain weights go there instead
        return fitted(f"Save {model_id} itself to {saved} instead of this Neuron export: whatever loads it gets plain "
                      "weights.",
                      "Save the original checkpoint itself where this Neuron export was saved: its loads get plain "
                      "weights.")
    return fitted(f"Delete this Neuron export; load {model_id} wherever {saved} was loaded.",
                  "Delete this Neuron export; load the original checkpoint wherever the export was loaded.")


#: export keywords of optimum-neuron's diffusion pipelines that replace a part of the checkpoint (its
#: replace_stable_diffusion_submodels / ControlNet export): keyword -> the pipeline component it supplies
_SWAPPED_PARTS = {"unet_id": "unet", "controlnet_ids": "controlnet", "lora_model_ids": "LoRA weights"}


def mark_export_only(ctx, call: cst.Call) -> bool:
    """The marker of an export-only load (the load being handled); True when ``call`` is one (the rule then
    leaves it as it is)."""
    item = export_only_loads(ctx).get(id(call))
    if item is None:
        return False
    ctx.marker(call, marker_text(item))
    return True
