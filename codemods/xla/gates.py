"""NM420: availability gates that ask for the old stack.

``importlib.util.find_spec("torch_xla") is not None``, ``is_torch_xla_available()`` and
``try: import torch_xla ... except ImportError:`` used as a device switch answer "no" on a
TorchNeuron host (torch-xla, optimum-neuron, transformers-neuronx are not installed there), so the
migrated script silently takes its other branch (CUDA, CPU, or an early exit). TorchNeuron's own
test is ``hasattr(torch, "neuron") and torch.neuron.is_available()`` (torch has ``neuron`` only with
torch-neuronx installed). Which branch is the migrated one cannot be decided from
the gate alone, so each gate gets a marker; the migrated code inside it is left as it is.
"""

from __future__ import annotations

import re
import sys

import libcst as cst

from codemods.common.leftovers import old_stack
from codemods.common.accelerators import serves_other_accelerators
from codemods.common.export_only import kept_names
from codemods.common.renames import load_table
from migrator.imports import catches_import_error, dotted, falls_back
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule
from migrator.tree import walk

#: functions of the target libraries that report whether torch-xla is usable: False on TorchNeuron
XLA_PROBES = (
    "transformers.is_torch_xla_available", "transformers.utils.is_torch_xla_available",
    "transformers.utils.import_utils.is_torch_xla_available", "transformers.is_torch_tpu_available",
    "transformers.utils.is_torch_tpu_available", "transformers.utils.import_utils.is_torch_tpu_available",
    "accelerate.utils.is_torch_xla_available", "accelerate.utils.imports.is_torch_xla_available",
    "accelerate.utils.is_tpu_available",
)
FIND_SPEC = ("importlib.util.find_spec", "importlib.find_loader", "pkgutil.find_loader")
#: the same question asked by a package's name or requirement (Lightning's caches, transformers' helper), answered
#: "no" on a TorchNeuron host for every old-stack package
PACKAGE_PROBES = (
    "lightning_utilities.core.imports.RequirementCache", "lightning_utilities.core.imports.ModuleAvailableCache",
    "lightning_utilities.core.imports.module_available", "lightning_utilities.core.imports.package_available",
    "lightning.fabric.utilities.imports.RequirementCache", "lightning.pytorch.utilities.imports.RequirementCache",
    "pytorch_lightning.utilities.imports.RequirementCache", "pytorch_lightning.utilities.imports._module_available",
    "pytorch_lightning.utilities.imports._package_available", "transformers.utils.import_utils._is_package_available",
)
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
#: (torch has a `neuron` attribute only with torch-neuronx installed: a bare torch.neuron raises AttributeError)
NATIVE_TEST = 'hasattr(torch, "neuron") and torch.neuron.is_available()'
#: libraries whose import in a gate's except branch makes that branch the native path
TARGET_LIBRARIES = frozenset({"transformers", "diffusers", "trl", "peft", "accelerate"})
#: a gate whose try body is the old stack and whose except branch loads the model with a target library
NATIVE_FALLBACK_MARKER = ("On TorchNeuron these imports fail and the except branch runs: keep its path and drop the "
                          "old-stack one.")
#: a module that patches Lightning's TPU/XLA accelerator (`tpu.TPUAccelerator.is_available = ...`): its gates
#: answer Lightning's XLA path, which TorchNeuron (no XLA device) must not take
_LIGHTNING_XLA_PATCH = re.compile(r"^[ \t]*[\w.]*\b(?:TPUAccelerator|XLAAccelerator)\.\w+[ \t]*=(?!=)", re.M)
LIGHTNING_GATE_MARKER = ("This check answers for the Lightning XLA accelerator patched here: delete it with the "
                         "patches, never make it True.")
LIGHTNING_PATCH_MARKER = ("Delete these patches of Lightning's TPU/XLA accelerator: TorchNeuron is no XLA device, "
                          "Lightning needs a neuron one.")
#: the gate of a module that serves other accelerators through torch_xla (TPUs): its XLA branch stays
SIDE_BY_SIDE_MARKER = (f"Add a {NATIVE_TEST} branch beside this torch_xla one (it serves TPUs).")


class OldStackAvailabilityGates(PythonRule):
    id = "NM420"
    title = "Availability gates that test for the old stack (find_spec, is_torch_xla_available, try-import)"
    fix = "mixed"
    triggers = ("find_spec", "find_loader", "RequirementCache", "module_available", "package_available",
                "is_torch_xla_available", "is_torch_tpu_available", "is_tpu_available",
                "torch_xla", "optimum.neuron", "transformers_neuronx", "neuronx_distributed", "torch_neuron",
                "TPUAccelerator", "XLAAccelerator")
    why = """
        A script that chooses its device by asking whether the old stack is installed
        (`importlib.util.find_spec("torch_xla") is not None`, `is_torch_xla_available()`,
        Lightning's `RequirementCache("torch_xla")` / `module_available(...)`, or
        `try: import torch_xla.core.xla_model as xm / except ImportError: xm = None` followed by
        `if xm is not None:`, or `"torch_xla" in sys.modules`, whether something imported it) gets
        "no" on a TorchNeuron host, where none of those packages exists,
        and silently runs its other branch: on CPU or CUDA code, or not at all. TorchNeuron's test
        is `hasattr(torch, "neuron") and torch.neuron.is_available()` (a bare `torch.neuron` raises
        AttributeError where torch-neuronx is not installed). The marker goes on the gate; which branch holds the
        migrated code is for a person to see. The standard-library imports of such a `try:` body
        (`from inspect import currentframe` beside `import torch_xla...`) move out of it, right
        after the statement: the gate fails before them on TorchNeuron, and the module's other uses
        of those names would raise NameError (those the gate's own code uses, or its except branch
        binds, stay). A module that reads nothing of torch_xla but its version (a test suite's
        skip condition) and names Neuron nowhere tests for PyTorch/XLA itself: it gets the
        side-by-side marker below.
    """
    before = """
        import importlib.util

        if importlib.util.find_spec("torch_xla") is not None:
            device = "neuron"
        else:
            device = "cpu"
    """
    after = """
        import importlib.util

        # TODO(neuron-migrate NM420): This asks for `torch_xla`, absent on TorchNeuron: test hasattr(torch, "neuron") and torch.neuron.is_available() instead.
        if importlib.util.find_spec("torch_xla") is not None:
            device = "neuron"
        else:
            device = "cpu"
    """
    caveats = """
        A module that patches Lightning's TPU/XLA accelerator (`tpu.TPUAccelerator.is_available =
        is_available`, Neuron's old Lightning integration) gets one marker on its patches and one
        on its torch_xla checks, which answer Lightning's XLA path (made True, Lightning would take
        it on TorchNeuron and fail on torch_xla): delete them. A module that imports torch_xla only in such gates, dispatches on other accelerators too
        (`cuda`, `mps`) and names Neuron nowhere (a generic library's device selection: its XLA
        branch serves TPUs) keeps its torch_xla code: the torch-xla rules leave it alone, and the
        marker asks for a neuron branch beside the XLA one. A gate that also imports a module TorchNeuron has (`import torch_neuronx`, the plugin) is
        left alone: the migration keeps that import in the gate when it removes the old ones, so
        the gate then tests for TorchNeuron. A `try:` whose body imports an old-stack module is a gate only when one of its handlers
        catches ImportError (or ModuleNotFoundError, Exception) and does something other than
        `pass` or re-raising; an import kept only for its side effects is NM900's business. Nor is a
        `try:` whose old-stack imports are all names the rename table rewrites (`from optimum.neuron
        import NeuronModelForCausalLM` becomes a Transformers import): the migrated import does not fail.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Try: self._on_try, cst.Comparison: self._on_comparison,
                cst.Assign: self._on_assign}

    @staticmethod
    def _patches_lightning_xla(ctx: PythonContext) -> bool:
        return _LIGHTNING_XLA_PATCH.search(ctx.source) is not None

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """The first patch of Lightning's TPU/XLA accelerator in the module (``TPUAccelerator.is_available =
        ...``): one marker for all of them."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Attribute):
            return
        owner = dotted(node.targets[0].target.value) or ""
        if owner.rsplit(".", 1)[-1] not in ("TPUAccelerator", "XLAAccelerator") or ctx.scratch.get("NM420-patch"):
            return
        ctx.scratch["NM420-patch"] = True
        ctx.marker(node, LIGHTNING_PATCH_MARKER)

    def _on_comparison(self, node: cst.Comparison, ctx: PythonContext) -> None:
        """``"torch_xla" in sys.modules``: nothing imports torch_xla after the migration."""
        if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (cst.In, cst.NotIn)):
            return
        if ctx.qualname(node.comparisons[0].comparator) != "sys.modules" or not isinstance(node.left, cst.SimpleString):
            return
        self._imported_test(node, node.left.evaluated_value, ctx)

    def _imported_test(self, node: cst.CSTNode, name, ctx: PythonContext) -> None:
        if not isinstance(name, str) or not old_stack(name):
            return
        if serves_other_accelerators(ctx.source):
            return  # a generic library's check inside its XLA branch (TPUs): not Neuron code
        ctx.marker(node, f"Nothing imports `{name}` after the migration: test {NATIVE_TEST} instead.")

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual == "sys.modules.get" and node.args and isinstance(node.args[0].value, cst.SimpleString):
            self._imported_test(node, node.args[0].value.evaluated_value, ctx)
            return
        if qual in XLA_PROBES:
            if self._patches_lightning_xla(ctx):
                ctx.marker(node, LIGHTNING_GATE_MARKER)
                return
            ctx.marker(node, f"{qual.rsplit('.', 1)[-1]}() is False on TorchNeuron: test {NATIVE_TEST} instead")
            return
        if qual not in FIND_SPEC + PACKAGE_PROBES or not node.args or node.args[0].keyword is not None:
            return
        value = node.args[0].value
        name = value.evaluated_value if isinstance(value, (cst.SimpleString, cst.ConcatenatedString)) else None
        if isinstance(name, str) and qual in PACKAGE_PROBES:
            m = _PACKAGE_NAME.match(name.strip())  # a requirement ("torch_xla>=2.1") or a distribution ("torch-xla")
            name = m.group(0).replace("-", "_") if m else None
        if isinstance(name, str) and (old_stack(name) or name == "optimum"):
            if name.split(".")[0] == "torch_xla" and self._patches_lightning_xla(ctx):
                ctx.marker(node, LIGHTNING_GATE_MARKER)
                return
            ctx.marker(node, fitted(f"This asks for `{name}`, absent on TorchNeuron: test {NATIVE_TEST} instead.",
                                    f"This asks for the old stack: test {NATIVE_TEST} instead."))

    def _on_try(self, node: cst.Try, ctx: PythonContext) -> None:
        modules = []
        for stmt in node.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    modules += [ctx.module.code_for_node(a.name) for a in small.names]
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative \
                        and not _renamed(stmt, small, ctx):
                    modules.append(ctx.module.code_for_node(small.module))
        old = [m for m in modules if old_stack(m)]
        if not old or "torch_neuronx" in modules:
            return  # the gate also imports the TorchNeuron plugin: the engine keeps that import, which decides it
        if falls_back(node):
            if serves_other_accelerators(ctx.source):
                ctx.marker(node, SIDE_BY_SIDE_MARKER)
                return
            self._hoist_stdlib_imports(node, ctx)
            # one text whatever the gate still imports (the migration may remove some of them): a
            # second run finds it above the gate
            if _native_fallback(node):
                ctx.marker(node, NATIVE_FALLBACK_MARKER)
            else:
                ctx.marker(node, f"These old-stack imports fail on TorchNeuron: gate on {NATIVE_TEST}.")

    @staticmethod
    def _hoist_stdlib_imports(node: cst.Try, ctx: PythonContext) -> None:
        """The standard-library imports of an old-stack gate's body (``from inspect import currentframe`` beside
        ``import torch_xla...``) move out of it, right after the ``try`` statement: on TorchNeuron the gate fails
        before them, and the module goes on without names it uses elsewhere (a NameError later). Those the gate
        itself uses (its body, its except branch) stay, as do those the except branch binds."""
        moved = [stmt for stmt in node.body.body if isinstance(stmt, cst.SimpleStatementLine) and stmt.body
                 and all(_stdlib_import(small) for small in stmt.body)]
        if not moved or len(moved) == len(node.body.body) or not isinstance(ctx.parent, (cst.Module, cst.IndentedBlock)):
            return
        own = {id(n) for m in moved for n in walk(m)}  # (the imports' own names are no use)
        used = {n.value for n in walk(node) if isinstance(n, cst.Name) and id(n) not in own}
        used |= {n for h in node.handlers for n in _assigned_names(h.body, ctx)}
        moved = [m for m in moved if not (_bound_by(m, ctx) & used)]
        if not moved:
            return
        ids = {id(m) for m in moved}
        codes = {cst.Module([]).code_for_node(m).strip() for m in moved}

        def hoist(updated: cst.Try) -> cst.FlattenSentinel:
            body = [s for s in updated.body.body if id(s) not in ids
                    and cst.Module([]).code_for_node(s).strip() not in codes]
            return cst.FlattenSentinel([updated.with_changes(body=updated.body.with_changes(body=body)),
                                        *(m.with_changes(leading_lines=[]) for m in moved)])

        ctx.replace(node, hoist)
        names = ", ".join(sorted({n for m in moved for n in _bound_by(m, ctx)}))
        ctx.finding(node, f"standard-library imports ({names}) moved out of the old-stack gate, after it: on "
                          "TorchNeuron its imports fail before them")


def _native_fallback(gate: cst.Try) -> bool:
    """Whether an ImportError handler of the gate imports a target library (``except ImportError: from
    transformers import AutoModelForCausalLM``): that branch is the TorchNeuron path, the ``try`` the old one."""
    for handler in gate.handlers:
        if not catches_import_error(handler):
            continue
        for node in walk(handler.body):
            if isinstance(node, cst.Import):
                names = [dotted(a.name) or "" for a in node.names]
            elif isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
                names = [dotted(node.module) or ""]
            else:
                continue
            if any(n.split(".")[0] in TARGET_LIBRARIES for n in names):
                return True
    return False


def _stdlib_import(small: cst.BaseSmallStatement) -> bool:
    """``import os`` / ``from inspect import currentframe`` of a standard-library module (absolute, no star)."""
    if isinstance(small, cst.Import):
        return all(_stdlib(cst.Module([]).code_for_node(a.name)) for a in small.names)
    if isinstance(small, cst.ImportFrom):
        return (small.module is not None and not small.relative and not isinstance(small.names, cst.ImportStar)
                and _stdlib(cst.Module([]).code_for_node(small.module)))
    return False


def _stdlib(module: str) -> bool:
    return module.split(".", 1)[0] in sys.stdlib_module_names


def _bound_by(stmt: cst.SimpleStatementLine, ctx: PythonContext) -> set[str]:
    """The names an import line binds (the module's import index has them)."""
    return {b.local for b in ctx.imports.all_bindings() if b.line is stmt and b.alias is not None}


def _assigned_names(body: cst.BaseSuite, ctx: PythonContext) -> set[str]:
    """The names the simple statements of a block assign or import."""
    out: set[str] = set()
    for stmt in getattr(body, "body", ()):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        out |= _bound_by(stmt, ctx)
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                out |= {t.target.value for t in small.targets if isinstance(t.target, cst.Name)}
    return out


def _renamed(line: cst.SimpleStatementLine, imp: cst.ImportFrom, ctx: PythonContext) -> bool:
    """Whether the rename table gives every name of ``from <old stack> import a, b`` (on ``line``) a native one
    (the renames rewrite the import: it no longer fails on TorchNeuron), none of them kept as it is (an
    export-only load's class, an import whose line silences its rename rule)."""
    if isinstance(imp.names, cst.ImportStar):
        return False
    module = ctx.module.code_for_node(imp.module)
    table, kept = load_table(), kept_names(ctx)
    for alias in imp.names:
        qualified = f"{module}.{alias.name.value}" if isinstance(alias.name, cst.Name) else ""
        rename = table.get(qualified)
        if rename is None or (alias.asname or alias).name.value in kept:
            return False
        renamer = ctx.owner(qualified) if ctx.owner_renames(qualified) else rename.rule  # who rewrites the import
        if ctx.is_ignored(line, renamer):
            return False
    return True


RULES = (OldStackAvailabilityGates,)
