"""NM415-NM416: Python code that reads or writes the XLA-era environment.

* NM415: ``os.environ.get("XLA_USE_BF16")`` (and ``XLA_DOWNCAST_BF16``) read in Python. The
  launchers of the old stack set these variables (``export XLA_USE_BF16=1``) and the migrated
  launchers no longer do (NM512/NM521 remove them), so a branch like ``if
  os.environ.get("XLA_USE_BF16"): model = model.to(torch.bfloat16)`` silently turns a bf16 run
  into float32. When a launcher of the run launches this very script with the variable set (a launch
  fact, ``Rule.launch_facts``: ``XLA_USE_BF16=1 torchrun train.py``, ``export`` before the launch, a
  Dockerfile ``ENV`` before ``CMD``, a notebook's ``!`` line or ``%env``), the read becomes the value
  it set and a branch on it keeps only the branch the launcher chose; elsewhere NM409 leaves a
  marker (see :func:`mark_reads`).
* NM416: Python writes of XLA-only variables (``os.environ["NEURON_FUSE_SOFTMAX"] = "1"``,
  ``NEURON_PARALLEL_COMPILE_MAX_RETRIES``...) are removed like NM512 removes them from launchers,
  and ``NEURON_CC_FLAGS`` written from Python gets NM513's treatment: the XLA-era compiler flags
  go, the others are kept and flagged.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.accelerators import NeuronXlaOnly
from codemods.common.statements import with_blank_line
from codemods.project.neuron_cc_flags import (
    CC_CHECK_FLAGS,
    CC_DROP_FLAGS,
    cache_dir_message,
    cc_check_message,
    split_cc_flags,
)
from codemods.project.launch_env import ENV_FACT, launch_env
from codemods.project.serving import SERVER_SCRIPT_MARKER, SERVER_SCRIPT_WHY, neuron_sdk_server
from codemods.project.xla_env import BF16_VARS, MARKED_VARS, XLA_ONLY_PREFIXES, XLA_ONLY_VARS, xla_only_reason
from codemods.xla.base import _bind_args, _code, _expression_statement, _index_in_stack
from codemods.xla.env_writes import (
    bf16_on,
    drop_entry,
    environment_subscript,
    is_bf16_line,
    mapping_entries,
    removable,
    setting_stays,
    update_statement,
    value_on,
)
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule

_READS = ("os.environ.get", "os.getenv")
#: calls that unset the variable named by their first argument
_UNSET_CALLS = ("os.environ.pop", "os.unsetenv")
_WRAPPERS = {"int": int, "bool": bool, "str": str}
#: what the launchers set (``XLA_USE_BF16=1``), as the script reads it
_LAUNCHER_VALUE = "1"


def _bf16_read(node: cst.CSTNode, ctx: PythonContext) -> str | None:
    """The variable when ``node`` reads XLA_USE_BF16/XLA_DOWNCAST_BF16 from the environment."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and ctx.qualname(node.func) in _READS:
        bound = _bind_args(node, ("key", "default"))
        if bound and "key" in bound and isinstance(bound["key"].value, cst.SimpleString):
            name = bound["key"].value.evaluated_value
            return name if name in BF16_VARS else None
    if isinstance(node, cst.Subscript) and ctx.qualname(node.value) == "os.environ" and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            name = index.value.evaluated_value
            return name if name in BF16_VARS else None
    return None


#: calls that write (or unset) an environment variable named by their first argument
_WRITE_CALLS = ("os.environ.setdefault", "os.environ.pop", "os.putenv", "os.unsetenv")
_TARGET_HOLDERS = (cst.Tuple, cst.List, cst.Element, cst.StarredElement)


def _targets(stmt: cst.CSTNode) -> list[cst.BaseExpression]:
    """The expressions ``stmt`` assigns, augments or deletes (``a[k] = v``, ``a[k] += v``, ``del a[k]``)."""
    if isinstance(stmt, cst.Assign):
        return [t.target for t in stmt.targets]
    if isinstance(stmt, (cst.AugAssign, cst.AnnAssign, cst.Del)):
        return [stmt.target]
    return []


def _written_by(stmt: cst.CSTNode, ctx: PythonContext) -> set[str]:
    """The bf16 variables a small statement writes: an assignment (plain, augmented, annotated) to
    ``os.environ[VAR]``, ``del os.environ[VAR]``, ``os.environ.setdefault/pop(VAR)``, ``os.putenv``,
    ``os.unsetenv``, ``os.environ.update(VAR=...)`` / ``update({VAR: ...})``."""
    out: set[str] = set()
    todo = _targets(stmt)
    while todo:
        target = todo.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            todo.extend(el.value for el in target.elements)
        elif isinstance(target, cst.Subscript):
            var = _bf16_read(target, ctx)
            if var is not None:
                out.add(var)
    call = stmt.value if isinstance(stmt, cst.Expr) else None
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
        qual = ctx.qualname(call.func)
        if qual in _WRITE_CALLS and call.args and isinstance(call.args[0].value, cst.SimpleString):
            out.add(call.args[0].value.evaluated_value)
        elif qual == "os.environ.update":
            for arg in call.args:
                if arg.keyword is not None:
                    out.add(arg.keyword.value)
                elif isinstance(arg.value, cst.Dict):
                    out.update(el.key.evaluated_value for el in arg.value.elements
                               if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString))
    return out & set(BF16_VARS)


def _setting_value(line: cst.SimpleStatementLine) -> cst.BaseExpression | None:
    small = line.body[0]
    if isinstance(small, cst.Assign):
        return small.value
    call = small.value if isinstance(small, cst.Expr) else None
    return call.args[1].value if isinstance(call, cst.Call) and len(call.args) > 1 else None


def written_vars(ctx: PythonContext) -> frozenset[str]:
    """The bf16 variables the unit itself writes anywhere and that the migration keeps writing (computed
    once per unit): their reads hold what the program set, not what the launchers set. A setting NM409
    deletes does not count (after it the variable reads as unset, as on a second run)."""
    state = ctx.local_state()
    if "written" not in state:
        found: set[str] = set()

        class Writes(cst.CSTVisitor):
            def _body(self, body) -> None:
                for k, stmt in enumerate(body):
                    if not isinstance(stmt, cst.SimpleStatementLine):
                        continue
                    if is_bf16_line(stmt):
                        value = _setting_value(stmt)
                        if value is not None and not setting_stays(body, k, value_on(value)):
                            continue
                    for small in stmt.body:
                        found.update(_written_by(small, ctx))

            def visit_Module(self, node: cst.Module) -> bool:
                self._body(node.body)
                return True

            def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
                self._body(node.body)
                return True

            def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> bool:
                for small in node.body:
                    found.update(_written_by(small, ctx))
                return False

        ctx.module.visit(Writes())
        state["written"] = frozenset(found)
    return state["written"]


def _in_write(ctx: PythonContext) -> bool:
    """Whether the node being handled is written (an assignment or ``del`` target) or sits in a
    statement that writes a bf16 variable: writes are NM409's and NM416's, never NM415's."""
    stack = ctx.stack
    for i in range(len(stack) - 1, 0, -1):
        parent, node = stack[i - 1], stack[i]
        if isinstance(parent, cst.AssignTarget) or (
                isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.Del, cst.For, cst.CompFor))
                and parent.target is node) or (isinstance(parent, cst.AsName) and parent.name is node):
            return True
        if isinstance(parent, cst.BaseSmallStatement):
            return bool(_written_by(parent, ctx))
        if not isinstance(parent, _TARGET_HOLDERS + (cst.BaseExpression, cst.Arg, cst.BaseSlice, cst.SubscriptElement,
                                                       cst.ComparisonTarget, cst.DictElement)):
            return False
    return False


def _literal(node: cst.BaseExpression):
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        values = [_literal(el.value) for el in node.elements]
        return None if any(v is _UNKNOWN for v in values) else tuple(values)
    return _UNKNOWN


_UNKNOWN = object()


def atom(node: cst.CSTNode, ctx: PythonContext):
    """``(variable, value)`` when ``node`` is a test of a bf16 variable whose value follows from
    the launcher's setting: the read itself ("1"), ``int(...)``/``bool(...)`` of one, a comparison
    of one with literals, ``"XLA_USE_BF16" in os.environ``; else None."""
    var = _bf16_read(node, ctx)
    if var is not None:
        return var, _LAUNCHER_VALUE
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in _WRAPPERS \
            and len(node.args) == 1 and not node.args[0].keyword and not node.args[0].star:
        inner = atom(node.args[0].value, ctx)
        if inner is not None:
            try:
                return inner[0], _WRAPPERS[node.func.value](inner[1])
            except ValueError:
                return None
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        target = node.comparisons[0]
        op, right = target.operator, target.comparator
        if isinstance(op, (cst.In, cst.NotIn)) and isinstance(node.left, cst.SimpleString) \
                and node.left.evaluated_value in BF16_VARS and ctx.qualname(right) == "os.environ":
            return node.left.evaluated_value, isinstance(op, cst.In)
        inner = atom(node.left, ctx)
        other = _literal(right)
        if inner is None:
            inner, other = atom(right, ctx), _literal(node.left)
            if inner is None or isinstance(op, (cst.In, cst.NotIn)):
                return None
        if other is _UNKNOWN:
            return None
        value = inner[1]
        if isinstance(op, cst.Equal):
            return inner[0], value == other
        if isinstance(op, cst.NotEqual):
            return inner[0], value != other
        if isinstance(op, (cst.In, cst.NotIn)) and isinstance(other, tuple):
            return inner[0], (value in other) == isinstance(op, cst.In)
    return None


def _test_value(test: cst.BaseExpression, ctx: PythonContext, atoms: list):
    """The value of an ``if`` test made only of bf16 atoms, ``and``/``or``/``not``; else _UNKNOWN."""
    found = atom(test, ctx)
    if found is not None:
        if found[0] in written_vars(ctx):
            return _UNKNOWN  # the program sets it itself: not the launchers' value
        atoms.append(test)
        return bool(found[1])
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        value = _test_value(test.expression, ctx, atoms)
        return _UNKNOWN if value is _UNKNOWN else not value
    if isinstance(test, cst.BooleanOperation):
        left = _test_value(test.left, ctx, atoms)
        right = _test_value(test.right, ctx, atoms)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        return (left and right) if isinstance(test.operator, cst.And) else (left or right)
    return _UNKNOWN


def _top_atom(node: cst.CSTNode, ctx: PythonContext) -> bool:
    """Whether ``node`` is an atom that no larger atom contains (that one is handled instead)."""
    if atom(node, ctx) is None:
        return False
    parent = ctx.parent
    if isinstance(parent, cst.Comparison) and atom(parent, ctx) is not None:
        return False
    if isinstance(parent, cst.ComparisonTarget) and len(ctx.stack) > 2 and atom(ctx.stack[-3], ctx) is not None:
        return False
    if isinstance(parent, cst.Arg) and len(ctx.stack) > 2 and atom(ctx.stack[-3], ctx) is not None:
        return False
    return True


_INTENT = ("load the model with dtype=torch.bfloat16, train with bf16=True, or wrap the forward pass in "
           "torch.autocast(\"neuron\", dtype=torch.bfloat16)")


#: the values of XLA_USE_BF16/XLA_DOWNCAST_BF16 that certainly turned bf16 on
_ON = frozenset({"1", "true", "True"})


def launcher_sets_bf16(ctx: PythonContext) -> bool:
    """Whether the launchers of this file set bf16: a launcher of the run (shell or Slurm script,
    Dockerfile, a notebook's `!` line) launches this very script with `XLA_USE_BF16=1` /
    `XLA_DOWNCAST_BF16=1` in its environment, or this code is the launcher's own (a notebook with
    `%env XLA_USE_BF16=1`, a shell script's Python heredoc). Every value stated must turn bf16 on:
    a script launched once with 1 and once with 0 (or `$BF16`) is not known to run in bf16."""
    values = [v for var in BF16_VARS for v in ctx.fact_values(ENV_FACT + var)]
    return bool(values) and all(v in _ON for v in values)


def mark_reads(node: cst.CSTNode, ctx: PythonContext) -> None:
    """NM409 where the launchers of the run are not known to set the variable: a marker."""
    if not _top_atom(node, ctx) or _in_write(ctx):
        return  # a write (`os.environ["XLA_USE_BF16"] = "1"`) has NM409's own marker
    if atom(node, ctx)[0] in written_vars(ctx):
        return  # the unit sets it itself: NM415's marker (the program's choice is read, not the launchers')
    # one marker per function: the same cause on every read of it there
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, (cst.FunctionDef, cst.ClassDef))), None)
    seen = ctx.scratch.setdefault("NM409-bf16-reads", set())
    if id(scope) in seen:
        return
    seen.add(id(scope))
    ctx.marker(node, BF16_READ_MARKER, detail=(
        "XLA_USE_BF16/XLA_DOWNCAST_BF16 is read here: the old launchers set it for torch-xla, TorchNeuron ignores it and the migrated "
        "launchers no longer set it, so this reads as unset and the run silently falls back to float32: "
        f"replace the test by the precision you want ({_INTENT})"))


BF16_READ_MARKER = "Replace this code's XLA_USE_BF16/XLA_DOWNCAST_BF16 tests by the precision you want: they now read as unset."


class XlaPrecisionReads(NeuronXlaOnly, PythonRule):
    id = "NM415"
    title = "XLA_USE_BF16 / XLA_DOWNCAST_BF16 read in Python -> the precision the launchers set"
    fix = "auto"
    kinds = ("python", "notebook", "markdown", "shell")
    triggers = BF16_VARS
    # the launchers that set them (shell, Slurm, Dockerfile ENV, notebook `!` lines and `%env`): the
    # value they set holds for the scripts they launch (Rule.launch_facts)
    launch_probes = BF16_VARS
    why = """
        The old launchers set `XLA_USE_BF16=1` / `XLA_DOWNCAST_BF16=1` for torch-xla, and scripts
        read them to pick their own precision (`if os.environ.get("XLA_USE_BF16"): model =
        model.to(torch.bfloat16)`). TorchNeuron ignores the variables and the migrated launchers
        no longer set them, so every such test would silently turn the run into float32. When a
        launcher of the same run launches this script with the variable set to 1 (`XLA_USE_BF16=1
        torchrun train.py`, `export` before the launch line of a shell or Slurm script, Dockerfile
        `ENV` before the `CMD` that runs it, a notebook's `!` line; a notebook's `%env` or a shell
        script's Python heredoc for their own code), the read becomes the value the launcher set: an
        `if` on it keeps the branch the launcher chose, any other read becomes the constant.
        Elsewhere (a script no launcher of the run names, text that only mentions the setting in a
        string or a docstring) NM409 leaves a marker.
    """
    before = """
        # run.sh of the same project: XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py
        import os

        import torch

        if os.environ.get("XLA_USE_BF16") or os.environ.get("XLA_DOWNCAST_BF16"):
            model = model.to(torch.bfloat16)
        use_bf16 = os.getenv("XLA_USE_BF16", "0") == "1"
    """
    after = """
        # run.sh of the same project: XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py
        import torch

        model = model.to(torch.bfloat16)
        use_bf16 = True
    """
    caveats = """
        The launchers are those of the same run: a launcher outside the migrated paths is not
        seen. A script launched with different values (1 here, 0 or `$BF16` there) gets the
        marker. The launched script is found relative to the launcher's directory (after a literal
        `cd`), then the directories above it, then as the one file of the run with that name; a
        launcher that runs another launcher (`bash inner.sh`) does not pass its settings on. Reads
        held in a variable are replaced where they are read; the tests on that variable are left
        as they are. Writes (`os.environ[...] = ...`, `+=`, `del`, `setdefault`, a read inside a
        write) are NM409's and NM416's, never read here; where the unit itself writes the variable
        (`if args.bf16: os.environ[...] = "1"`), its reads hold the program's choice, not the
        launchers': they get a marker instead.
    """

    @classmethod
    def launch_facts(cls, kind: str, text: str):
        return launch_env(kind, text, BF16_VARS)

    def handlers(self):
        return {cst.If: self._on_if, cst.Call: self._on_atom, cst.Subscript: self._on_atom,
                cst.Comparison: self._on_atom}

    def _on_if(self, node: cst.If, ctx: PythonContext) -> None:
        if not launcher_sets_bf16(ctx) or not isinstance(node.body, cst.IndentedBlock):
            return
        parent = ctx.parent
        if isinstance(parent, cst.If):  # an `elif`: its test is replaced where it is
            return
        atoms: list = []
        value = _test_value(node.test, ctx, atoms)
        if value is _UNKNOWN:
            return
        ctx.local_state().setdefault("done", set()).update(id(a) for a in atoms)
        if not value and node.orelse is None:
            ctx.remove_statement(node)
            ctx.finding(node, f"`if {_code(node.test)}:` removed: the launchers of this run set bf16 "
                              "(XLA_USE_BF16=1), which the migrated launchers no longer do")
            return
        if not value and isinstance(node.orelse, cst.Else) and not isinstance(node.orelse.body, cst.IndentedBlock):
            return

        def unwrap(updated: cst.If):
            if value:
                kept = list(updated.body.body)
            elif isinstance(updated.orelse, cst.Else) and isinstance(updated.orelse.body, cst.IndentedBlock):
                kept = list(updated.orelse.body.body)
            else:
                return updated.orelse.with_changes(leading_lines=updated.leading_lines)
            kept[0] = kept[0].with_changes(leading_lines=[*updated.leading_lines, *kept[0].leading_lines])
            return cst.FlattenSentinel(kept)

        ctx.replace(node, unwrap)
        ctx.finding(node, f"`if {_code(node.test)}:` -> the {'if' if value else 'else'} branch: the launchers of "
                          "this run set bf16 (XLA_USE_BF16=1), which the migrated launchers no longer do")

    def _on_atom(self, node: cst.CSTNode, ctx: PythonContext) -> None:
        if id(node) in ctx.local_state().get("done", ()) or not _top_atom(node, ctx):
            return
        if _in_write(ctx):
            return  # `os.environ["XLA_USE_BF16"] = "1"`, `del os.environ[...]`: a write, not a read
        var, value = atom(node, ctx)  # type: ignore[misc]
        if var in written_vars(ctx):
            # the unit sets it itself (`if args.bf16: os.environ["XLA_DOWNCAST_BF16"] = "1"`): what is read
            # here is the program's choice, not the launchers', whatever the launchers set (so the marker
            # is the same once the migrated launchers no longer set it)
            ctx.marker(node, f"{var} is set by this program and read here, but TorchNeuron ignores it: "
                             "choose the precision explicitly.")
            return
        if not launcher_sets_bf16(ctx):
            return
        new = cst.parse_expression(repr(value) if not isinstance(value, str) else f'"{value}"')
        ctx.replace(node, new)
        ctx.finding(node, f"{_code(node)} -> {_code(new)}: the launchers of this run set {var}=1, which the "
                          "migrated launchers no longer do")


# --------------------------------------------------------------------------- NM416


class XlaEnvironmentWrites(NeuronXlaOnly, PythonRule):
    id = "NM416"
    markers = ((SERVER_SCRIPT_MARKER, SERVER_SCRIPT_WHY),)
    title = "XLA-only environment variables set from Python removed; NEURON_CC_FLAGS stripped of XLA-era flags"
    fix = "mixed"
    # every variable it removes or marks (the shell rule NM512's set): a unit that sets only one of them is seen
    triggers = ("NEURON_CC_FLAGS", *sorted(XLA_ONLY_VARS), *XLA_ONLY_PREFIXES, *MARKED_VARS)
    why = """
        What the shell rules do to launchers (NM512, NM513), done to the same settings written from
        Python: `os.environ["NEURON_FUSE_SOFTMAX"] = "1"`, `os.environ["PJRT_DEVICE"] = "NEURON"`,
        `os.environ.setdefault("NEURON_PARALLEL_COMPILE_MAX_RETRIES", "1")` and the other variables
        only the XLA stack (or neuron_parallel_compile) reads are removed, and so is a statement
        that only unsets one (`os.environ.pop("XLA_IR_DEBUG", None)`, `del os.environ[...]`,
        `os.unsetenv(...)`): nothing reads it on TorchNeuron. `NEURON_CC_FLAGS` set
        from string literals (directly, through a variable assigned one literal, or appended to
        the inherited value) loses the XLA-era compiler flags (`--distribution-strategy`,
        `--cache_dir`, `--retry_failed_compilation`); the other flags (`--model-type` among them)
        are kept and flagged, as NM513 does. The same holds for the variables set through a mapping
        (`codemods/xla/env_writes.py`, shared with NM409): `os.environ.update({...})` / `update(K=v)`,
        a child's environment (`env={**os.environ, ...}`, `dict(os.environ, K=v)`, `env =
        os.environ.copy(); env["K"] = v`, a dict later passed as `env=`), Ray's
        `runtime_env={"env_vars": {...}}`: the entry is removed. A dict with such a key whose use
        as an environment is not seen gets a marker. `NEURON_COMPILE_CACHE_URL` (the XLA stack's
        NEFF cache: TorchNeuron's cache directory is `TORCH_NEURONX_NEFF_CACHE_DIR`, which a person
        chooses), `NEURON_PLATFORM_TARGET_OVERRIDE` (its effect on TorchNeuron is not established)
        and Transformers 4's `TRANSFORMERS_CACHE` (Transformers 5 ignores it: `HF_HUB_CACHE`) are
        kept with a marker, in every form.
    """
    before = """
        import os

        os.environ["NEURON_FUSE_SOFTMAX"] = "1"
        flags = " --distribution-strategy=llm-training --auto-cast=none -O1 "
        os.environ["NEURON_CC_FLAGS"] = os.environ.get("NEURON_CC_FLAGS", "") + flags
    """
    after = """
        import os

        flags = " --auto-cast=none -O1 "
        # TODO(neuron-migrate NM416): Check that TorchNeuron's compiler still needs NEURON_CC_FLAGS --auto-cast=none (set for the XLA stack).
        os.environ["NEURON_CC_FLAGS"] = os.environ.get("NEURON_CC_FLAGS", "") + flags
    """
    caveats = """
        `XLA_USE_BF16`/`XLA_DOWNCAST_BF16` writes are NM409's (they carry a precision). A write
        alone in its block, flags built at run time (`" ".join(flags)` in a unit that adds an
        XLA-era flag somewhere), and flags in an f-string (`f"--optlevel {level} ..."`), get a marker
        instead.
    """

    def handlers(self):
        return {cst.Assign: self._on_assign, cst.AugAssign: self._on_assign, cst.Call: self._on_call,
                cst.Name: self._on_name, cst.Dict: self._on_mapping, cst.Del: self._on_del}

    # ---- mappings: os.environ.update({...}), env={**os.environ, ...}, runtime_env={"env_vars": {...}}
    def _on_mapping(self, node: cst.CSTNode, ctx: PythonContext) -> None:
        found = mapping_entries(node, ctx)
        if found is None:
            return
        entries, known = found
        if known:
            for name in dict.fromkeys(e.name for e in entries if e.name in MARKED_VARS):
                ctx.marker(node, MARKED_VARS[name])
        mine = [e for e in entries if e.name not in BF16_VARS
                and (e.name == "NEURON_CC_FLAGS" or xla_only_reason(e.name) is not None)]
        if not mine:
            return
        statement = ctx.statement()
        if not known:
            names = ", ".join(sorted({e.name for e in mine}))
            ctx.marker(node, fitted(f"if this dict is a process environment, drop its XLA-era settings ({names})",
                                    "if this dict is a process environment, drop its XLA-era settings"))
            return
        found_line = update_statement(node, ctx)
        if found_line is not None and all(removable(e) for e in entries) and not any(bf16_on(e) for e in entries):
            line, body = found_line
            ctx.remove_statement(line)
            ctx.local_state().setdefault("removed", []).append((line, body))
            ctx.finding(node, "removed the XLA-only settings " + ", ".join(e.name for e in mine))
            return
        for entry in mine:
            if entry.name == "NEURON_CC_FLAGS":
                self._cc_flags(statement, entry.value, ctx, remove=lambda e=entry: _drop(e, node, ctx))
                continue
            drop_entry(entry, node, ctx)
            ctx.finding(entry.node, f"removed the setting of {entry.name}: {xla_only_reason(entry.name)}")

    def finish(self, ctx: PythonContext) -> None:
        _blank_lines(ctx)

    # ---- string literals assigned to names (the flags of NEURON_CC_FLAGS often sit in one)
    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(parent, cst.AssignTarget) and len(ctx.stack) > 2:
            assign = ctx.stack[-3]
            if isinstance(assign, cst.Assign):
                literals = ctx.local_state().setdefault("literals", {})
                value = assign.value if isinstance(assign.value, cst.SimpleString) and len(assign.targets) == 1 else None
                literals[node.value] = None if node.value in literals else value

    def _on_assign(self, node: cst.Assign | cst.AugAssign, ctx: PythonContext) -> None:
        if isinstance(node, cst.AugAssign):
            if not isinstance(node.operator, cst.AddAssign):
                return
            target = node.target
        elif len(node.targets) != 1:
            return
        else:
            target = node.targets[0].target
        name = environment_subscript(target, ctx)  # os.environ["K"], env["K"] of env = os.environ.copy()
        if name is not None:
            self._write(node, name, node.value, ctx)

    def _on_del(self, node: cst.Del, ctx: PythonContext) -> None:
        name = environment_subscript(node.target, ctx)  # del os.environ["XLA_IR_DEBUG"]
        if name is not None:
            self._unset(node, name, ctx)

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        self._on_mapping(node, ctx)
        if ctx.qualname(node.func) in _UNSET_CALLS and node.args and isinstance(node.args[0].value, cst.SimpleString) \
                and not node.args[0].keyword and not node.args[0].star:
            statement = _expression_statement(ctx, node)  # the value popped is used: not only an unsetting
            if statement is not None:
                self._unset(statement[0], node.args[0].value.evaluated_value, ctx)
            return
        if not isinstance(node.func, cst.Attribute) or node.func.attr.value not in ("setdefault", "putenv"):
            return
        if ctx.qualname(node.func) not in ("os.environ.setdefault", "os.putenv"):
            return
        bound = _bind_args(node, ("key", "value"))
        if not bound or "key" not in bound or "value" not in bound or not isinstance(bound["key"].value, cst.SimpleString):
            return
        statement = _expression_statement(ctx, node)
        if statement is not None:
            self._write(statement[0], bound["key"].value.evaluated_value, bound["value"].value, ctx)

    def _write(self, small: cst.BaseSmallStatement, name: str, value: cst.BaseExpression, ctx: PythonContext) -> None:
        if name in BF16_VARS:
            return  # NM409: the precision it carried needs a marker of its own
        state = ctx.local_state()
        if "server" not in state:
            state["server"] = neuron_sdk_server(ctx.source)
        if state["server"]:
            # a Neuron SDK model server (vLLM on NxD Inference) needs its own compiler flags and cache: one marker
            if not state.get("server marked") and (name.startswith("NEURON") or xla_only_reason(name)):
                state["server marked"] = True
                ctx.marker(small, SERVER_SCRIPT_MARKER)
            return
        if name == "NEURON_CC_FLAGS":
            self._cc_flags(small, value, ctx)
            return
        if name in MARKED_VARS:
            ctx.marker(small, MARKED_VARS[name])
            return
        reason = xla_only_reason(name)
        if reason is None:
            return
        if _remove(small, ctx):
            ctx.finding(small, f"removed the setting of {name}: {reason}")
        else:
            ctx.marker(small, fitted(f"{name} is set for the XLA stack only ({reason}): remove this setting",
                                     f"{name} is set for the XLA stack only: remove this setting"))

    def _unset(self, small: cst.BaseSmallStatement, name: str, ctx: PythonContext) -> None:
        """``os.environ.pop("XLA_IR_DEBUG", None)``, ``del os.environ[...]``, ``os.unsetenv(...)`` of a variable only
        the XLA stack reads: nothing reads it on TorchNeuron, so unsetting it does nothing (removed)."""
        reason = xla_only_reason(name) if name not in BF16_VARS and name not in MARKED_VARS else None
        if reason is None:
            return  # bf16 (NM409), the marked variables and everything else: not only the XLA stack's
        if _remove(small, ctx):
            ctx.finding(small, f"removed the unsetting of {name}: {reason}")
        else:
            ctx.marker(small, f"{name} is read by the XLA stack only: remove this line.")

    def _cc_flags(self, small: cst.CSTNode, value: cst.BaseExpression, ctx: PythonContext, remove=None) -> None:
        """``remove``: removes the setting (default: the statement ``small``); False when it cannot."""
        if remove is None:
            def remove():
                return _remove(small, ctx)
        literals = _strings_in(value)
        names = [n.value for n in _names_in(value)]
        held = ctx.local_state().get("literals", {})
        for n in names:
            if held.get(n) is not None:
                literals.append(held[n])
        drop_seen = check_seen = False
        kept_all: list[str] = []
        for fstring in _fstrings_in(value):
            # an f-string (`f"--optlevel {level} --enable-saturate-infinity"`): its flags are read, never edited
            text = "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in fstring.parts)
            split = split_cc_flags(text)
            if split is None:
                continue
            kept, dropped = split
            if dropped:
                names = list(dict.fromkeys(d.split()[0].partition("=")[0] for d in dropped))
                ctx.local_state().setdefault("cc_marked", set()).update(names)
                ctx.marker(small, fitted(f"Remove the XLA-era flags of NEURON_CC_FLAGS ({', '.join(names)}).",
                                         "NEURON_CC_FLAGS holds XLA-era flags: remove them (neuron-migrate explain "
                                         "NM416) and check the others."))
                return
            kept_all.extend(kept)
            check_seen = check_seen or bool(kept)
        for lit in literals:
            text = lit.evaluated_value
            if not isinstance(text, str) or not any(f in text for f in (*CC_DROP_FLAGS, *CC_CHECK_FLAGS)):
                continue
            split = split_cc_flags(text)
            if split is None:  # (quotes inside the value: `--cache_dir="./cc"`): the flags it holds, by name
                present = [f for f in CC_DROP_FLAGS if re.search(re.escape(f) + r"(?![\w-])", text)]
                ctx.local_state().setdefault("cc_marked", set()).update(present)
                if present:
                    ctx.marker(small, fitted(f"Remove the XLA-era flags of NEURON_CC_FLAGS ({', '.join(present)})",
                                             "NEURON_CC_FLAGS holds XLA-era flags: remove them (neuron-migrate explain "
                                             "NM416) and check the others"))
                    return
                continue
            kept, dropped = split
            tokens = text.split()
            if dropped and lit is not value and tokens and tokens[-1] in " ".join(dropped).split() and (
                    not text[-1:].isspace() or tokens[-1].endswith("=") or "=" not in tokens[-1]):
                # the literal's last flag is dropped and the value is built from more than it (`"--cache_dir=" + d`):
                # its value may be the next operand, which cutting the flag would leave on its own
                names = list(dict.fromkeys(d.split()[0].partition("=")[0] for d in dropped))
                ctx.local_state().setdefault("cc_marked", set()).update(names)
                ctx.marker(small, fitted(f"Remove the XLA-era flags of NEURON_CC_FLAGS ({', '.join(names)}) with the "
                                         "values joined to them.",
                                         "NEURON_CC_FLAGS holds XLA-era flags: remove them (neuron-migrate explain "
                                         "NM416) and check the others"))
                return
            if dropped and not kept and lit is value and cache_dir_message(dropped) is None and remove():
                ctx.finding(small, "removed the setting of NEURON_CC_FLAGS: it only held XLA-era compiler flags")
                return
            kept_all.extend(kept)
            check_seen = check_seen or bool(kept)
            if dropped:
                drop_seen = True
                ctx.local_state().setdefault("cc_marked", set()).update(d.split()[0].partition("=")[0] for d in dropped)
                lead = text[: len(text) - len(text.lstrip())]
                tail = text[len(text.rstrip()):]
                new_text = lead + " ".join(kept) + tail if kept else lead + tail
                q = lit.quote
                if q in new_text or "\\" in new_text:
                    ctx.marker(small, "remove the XLA-era flags from NEURON_CC_FLAGS: " + " ".join(dropped))
                    return
                ctx.replace(lit, cst.SimpleString(f"{lit.prefix}{q}{new_text}{q}"))
                ctx.finding(lit, "removed XLA-era flags from NEURON_CC_FLAGS: " + " ".join(dropped))
                cache = cache_dir_message(dropped)
                if cache:
                    ctx.marker(small, cache)
        if not drop_seen and not check_seen:
            if isinstance(value, (cst.Attribute, cst.Subscript)):
                return  # an argument's or a config's value (args.cc_flags): not built from the unit's flags
            # (`--cache_dir` only as `--cache_dir=...`: scripts name their own --cache_dir argument)
            done = ctx.local_state().get("cc_marked", set())  # (flags a statement above got its edit or marker for)
            built = [f for f in CC_DROP_FLAGS if f not in done
                     and re.search(rf"['\"][^'\"\n]*{re.escape(f)}" + ("=" if f == "--cache_dir" else r"(?![\w-])"),
                                  ctx.code)]
            if built and not any(f in (lit.evaluated_value or "") for lit in literals for f in built):
                # the value is built at run time (`" ".join(flags)`) and the unit writes XLA-era flags somewhere
                ctx.marker(small, fitted(f"NEURON_CC_FLAGS is built at run time: remove the XLA-era {', '.join(built)} "
                                         "where the code adds it.",
                                         "NEURON_CC_FLAGS is built at run time: remove the XLA-era flags where the "
                                         "code adds them."))
            return
        if check_seen and (message := cc_check_message(kept_all)) is not None:
            ctx.marker(small, message)


def _drop(entry, mapping: cst.CSTNode, ctx: PythonContext) -> bool:
    drop_entry(entry, mapping, ctx)
    return True


def _remove(small: cst.BaseSmallStatement, ctx: PythonContext) -> bool:
    """Remove the statement line of ``small`` (keeping the blank line above the next one); False
    when it is not alone on its line or alone in its block."""
    i = _index_in_stack(ctx, small)
    line, block = ctx.stack[i - 1], ctx.stack[i - 2]
    body = getattr(block, "body", None)
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(body, (list, tuple)) or len(body) < 2 \
            or len(line.body) != 1:
        return False
    ctx.remove_statement(line)
    ctx.local_state().setdefault("removed", []).append((line, body))
    return True


def _blank_lines(ctx: PythonContext) -> None:
    """A removed line that followed a blank line: the next line that stays gets the blank line."""
    removed = ctx.local_state().get("removed", [])
    gone = {id(line) for line, _ in removed}
    for line, body in removed:
        if not any(el.comment is None for el in line.leading_lines):
            continue
        k = next((n for n, st in enumerate(body) if st is line), None)
        if k is not None and (k == 0 or id(body[k - 1]) not in gone):
            following = next((st for st in body[k + 1:] if id(st) not in gone), None)
            if following is not None and not (following.leading_lines and following.leading_lines[0].comment is None):
                ctx.replace(following, with_blank_line)


def _strings_in(expr: cst.CSTNode) -> list[cst.SimpleString]:
    found: list[cst.SimpleString] = []

    class Finder(cst.CSTVisitor):
        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            found.append(node)

        def visit_Call(self, node: cst.Call) -> bool:
            return False  # os.environ.get("NEURON_CC_FLAGS", ""): the inherited value, not new flags

    expr.visit(Finder())
    return found


def _fstrings_in(expr: cst.CSTNode) -> list[cst.FormattedString]:
    """The f-strings of ``expr`` (not inside calls: an inherited value), like ``_strings_in``."""
    found: list[cst.FormattedString] = []

    class Finder(cst.CSTVisitor):
        def visit_FormattedString(self, node: cst.FormattedString) -> bool:
            found.append(node)
            return False

        def visit_Call(self, node: cst.Call) -> bool:
            return False

    expr.visit(Finder())
    return found


def _names_in(expr: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Finder(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            return False

        def visit_Call(self, node: cst.Call) -> bool:
            return False

    expr.visit(Finder())
    return found


RULES = (XlaPrecisionReads, XlaEnvironmentWrites)
