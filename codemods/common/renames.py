"""NM100 / NM200 / NM300: data-driven renames of optimum.neuron symbols (``renames.toml``).

The table maps every public optimum.neuron name that has a one-to-one home in
transformers / trl / diffusers / peft / accelerate / sentence-transformers to
that home. One engine, three rule ids (one per family), so that users can select
or ignore them with the family prefixes. A specific rule that owns a name
(``Rule.owns``) rewrites its calls and arguments while this table still renames
it, unless that rule declares ``renames_owned = True`` and renames it itself.

Renaming follows the file's style:

* ``from optimum.neuron import NeuronTrainer`` + ``NeuronTrainer(...)``
  becomes ``from transformers import Trainer`` + ``Trainer(...)``;
* an alias is kept: ``from optimum.neuron import NeuronTrainer as T`` becomes
  ``from transformers import Trainer as T`` and the uses of ``T`` stay;
* module style stays module style: ``import optimum.neuron as on`` +
  ``on.NeuronTrainer`` becomes ``import transformers`` + ``transformers.Trainer``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import libcst as cst

from codemods.common.export_only import inside_export_only, kept_names
from codemods.common.type_names import rename_type_use
from migrator.model import OUTSIDE_NAMES
from migrator.imports import Binding, reaching
from migrator.rules import NameClash, PythonContext, PythonRule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TABLE_PATH = Path(__file__).with_name("renames.toml")


@dataclass(frozen=True)
class Rename:
    rule: str
    sources: tuple[str, ...]
    target: str
    neuron_kwargs: frozenset[str]
    note: str


@lru_cache(maxsize=None)
def load_table(path: Path = TABLE_PATH) -> dict[str, Rename]:
    """source qualified name -> Rename."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    table: dict[str, Rename] = {}
    for entry in data.get("rename", []):
        r = Rename(
            rule=entry["rule"],
            sources=tuple(entry["from"]),
            target=entry["to"],
            neuron_kwargs=frozenset(entry.get("neuron_kwargs", ())),
            note=entry.get("note", ""),
        )
        for src in r.sources:
            if src in table:
                raise ValueError(f"renames.toml: {src} is listed twice")
            table[src] = r
    return table


class _RenameRule(PythonRule):
    """Shared engine of NM100/NM200/NM300; subclasses only set id/title/docs."""

    fix = "auto"
    triggers = ("optimum.neuron", "optimum import")

    def handlers(self):
        return {cst.Name: self._on_name, cst.Attribute: self._on_attribute}

    # -- which bindings does this rule rename, and how
    def _plan(self, ctx: PythonContext) -> dict[str, list[tuple[Binding, Rename, str]]]:
        """local name -> [(binding, rename, mode)] for from-imported table names (one per import of the
        name: two functions may each import it); mode is "refs" (rename every use) or "rebind" (swap the
        import, keep the local name)."""
        state = ctx.local_state()
        if "plan" in state:
            return state["plan"]
        table = load_table()
        plan: dict[str, list[tuple[Binding, Rename, str]]] = {}
        for b in ctx.imports.all_bindings():
            if not b.is_from or b.alias is None:
                continue
            r = table.get(b.qualified)
            if r is None or r.rule != self.id or ctx.owner_renames(b.qualified):
                continue
            if ctx.is_ignored(b.line):
                continue  # the import is left alone, so are the uses of its name
            target_module, _, target_name = r.target.rpartition(".")
            original_name = b.qualified.rsplit(".", 1)[1]
            kept = b.local in kept_names(ctx)  # an export-only load keeps its class (and the import)
            if kept and (b.local != original_name or b.local == target_name):
                continue
            if b.local != original_name or b.local == target_name:
                _rebind(ctx, b, r)
                plan.setdefault(b.local, []).append((b, r, "rebind"))
            else:
                plan.setdefault(b.local, []).append((b, r, "refs"))
        state["plan"] = plan
        state["renamed"] = set()
        return plan

    def finish(self, ctx: PythonContext) -> None:
        # an imported name that is never used: swap the import itself
        state = ctx.local_state()
        for entries in state.get("plan", {}).values():
            for b, r, mode in entries:
                if mode == "refs" and id(b) not in state["renamed"] and b.local not in kept_names(ctx) \
                        and b.local not in OUTSIDE_NAMES.get():  # (a later block of the page uses it the old way)
                    _rebind(ctx, b, r)

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        plan = self._plan(ctx)
        if node.value not in plan:
            return
        binding, rename, mode = _reaching(plan[node.value], ctx)
        if not _is_reference(node, ctx.parent) or inside_export_only(ctx):
            return
        if rename_type_use(ctx, node, binding.qualified, rename.target, anchor=binding):
            ctx.local_state()["renamed"].add(id(binding))
            return  # `isinstance(m, NeuronModelForCausalLM)`: the base class, not the Auto factory
        if mode != "refs":
            return
        if ctx.bound_locally(node.value, ctx.stack):
            return  # a parameter or local variable spelled like the import (`def run(NeuronSFTConfig)`): not a use of it
        try:
            expr = ctx.name_for(rename.target, anchor=binding)
        except NameClash as exc:
            ctx.marker(node, f"rename {binding.qualified} to {rename.target} by hand ({exc})")
            return
        ctx.replace(node, expr)
        ctx.finding(node, _message(binding.qualified, rename))
        ctx.local_state()["renamed"].add(id(binding))

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        self._plan(ctx)
        if isinstance(ctx.parent, (cst.ImportFrom, cst.Import)):
            return  # `from a.b import c`: the module path is not a use
        qual = ctx.qualname(node)
        if qual is None or not qual.startswith("optimum."):
            return
        rename = load_table().get(qual)
        if rename is None or rename.rule != self.id or ctx.owner_renames(qual):
            return
        if inside_export_only(ctx):
            return  # an export-only load stays as it is (with its marker)
        anchor = ctx.imports.binding_of(node)
        if rename_type_use(ctx, node, qual, rename.target, anchor=anchor, style="module"):
            return
        try:
            expr = ctx.name_for(rename.target, anchor=anchor, style="module")
        except NameClash as exc:
            ctx.marker(node, f"rename {qual} to {rename.target} by hand ({exc})")
            return
        ctx.replace(node, expr)
        ctx.finding(node, _message(qual, rename))


def _reaching(entries: list[tuple[Binding, Rename, str]], ctx: PythonContext) -> tuple[Binding, Rename, str]:
    """The entry whose import a use at the current node reads (see :func:`migrator.imports.reaching`)."""
    b = reaching([e[0] for e in entries], ctx.enclosing())
    return next(e for e in entries if e[0] is b)


def _message(source: str, rename: Rename) -> str:
    return f"{source} -> {rename.target}"


def _rebind(ctx: PythonContext, b: Binding, r: Rename) -> None:
    """Swap the import of ``b`` for the target, keeping the local name."""
    target_module, _, target_name = r.target.rpartition(".")
    ctx.remove_import(b)
    ctx.add_import(target_module, target_name, b.local if b.local != target_name else None, anchor=b)
    ctx.finding(b.alias, _message(b.qualified, r))


def _is_reference(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    if parent is None:
        return True
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is node:
        return False
    if isinstance(parent, cst.Param) and parent.name is node:
        return False
    if isinstance(parent, (cst.ImportAlias, cst.AsName)):
        return False
    return True


class InferenceRenames(_RenameRule):
    id = "NM100"
    title = "Rename optimum.neuron inference classes, diffusion pipelines and pipeline() to their Transformers/Diffusers homes"
    why = """
        optimum-neuron's inference classes (NeuronModelFor*, Neuron*Pipeline, pipeline) wrap
        a Transformers/Diffusers class around a compiled Neuron artifact. Under TorchNeuron the
        plain class runs on the `neuron` device, so the import and every use are renamed to it
        (table: codemods/common/renames.toml). Neuron-only arguments such as `export=True` are handled
        by the argument rules or flagged by NM901.
    """
    before = """
        from optimum.neuron import NeuronModelForSequenceClassification

        model = NeuronModelForSequenceClassification.from_pretrained("bert-base-uncased")
    """
    after = """
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
    """
    caveats = """
        Names are renamed wherever the import is visible; a local variable that shadows an
        imported name is not tracked. String annotations are left alone. Where a name that becomes a
        factory (`AutoModelFor*`, `AutoPipelineFor*`) is used as a type (`isinstance`/`issubclass`,
        annotations, `type(m) is X`) it becomes the base class, `transformers.PreTrainedModel` /
        `diffusers.DiffusionPipeline` (codemods/common/type_names.py): an isinstance on a factory is
        always False.
    """


class TrainingRenames(_RenameRule):
    id = "NM200"
    title = "Rename optimum.neuron trainers, arguments, TRL, PEFT and accelerate classes to their native homes"
    why = """
        NeuronTrainer, NeuronTrainingArguments, NeuronSFTTrainer/Config, NeuronHfArgumentParser,
        the PEFT and accelerate wrappers are subclasses of the Transformers/TRL/PEFT/accelerate
        classes that TorchNeuron supports directly, so the import and every use are renamed.
    """
    before = """
        from optimum.neuron import NeuronTrainer as Trainer
        from optimum.neuron import NeuronTrainingArguments

        args = NeuronTrainingArguments(output_dir="out")
    """
    after = """
        from transformers import Trainer
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out")
    """
    caveats = """
        Neuron-only fields (tensor_parallel_size, zero_1, ...) are moved by the training rules
        or flagged by NM901; this rule only renames.
    """


class ParallelismRenames(_RenameRule):
    id = "NM300"
    title = "Rename optimum.neuron parallelism names (TrainingNeuronConfig, training model classes) to transformers"
    why = """
        optimum.neuron.models.training re-implements a few model classes with NxD parallel
        layers configured by TrainingNeuronConfig. Transformers does the same with its own
        classes and `transformers.distributed.DistributedConfig`.
    """
    before = """
        from optimum.neuron.models.training import TrainingNeuronConfig

        trn_config = TrainingNeuronConfig(tensor_parallel_size=8)
    """
    after = """
        from transformers.distributed import DistributedConfig

        # TODO(neuron-migrate NM901): Remove or move the Neuron-only arguments `tensor_parallel_size=` of `TrainingNeuronConfig`.
        trn_config = DistributedConfig(tensor_parallel_size=8)
    """
    caveats = """
        Field names differ (tensor_parallel_size -> tp_size); NM901 flags the call until the
        parallelism rules rewrite it.
    """


RULES = (InferenceRenames, TrainingRenames, ParallelismRenames)
