"""NM206: ``NeuronORPOConfig`` / ``NeuronORPOTrainer`` (optimum-neuron 0.0.26-0.3.0) -> TRL's ORPO.

TRL 1.16 keeps ORPO only under ``trl.experimental.orpo`` (``ORPOConfig``, ``ORPOTrainer``); the
rename table (NM200) renames the classes and this rule rewrites their calls:

* the config gets NM201's Neuron field handling (plumbing dropped, behaviour changes marked,
  ``zero_1=True`` -> ``fsdp_size``, static shapes), loses the TRL 0.x fields that TRL 1.16 removed
  (``max_prompt_length``, ``truncation_mode``, ``label_pad_token_id``), and, when the trainer loads
  the model from a string, ``model_init_kwargs`` gets ``"device_map": None`` (ORPOTrainer, like
  SFTTrainer, picks ``"auto"`` otherwise);
* tensor/pipeline parallel sizes are dropped: NeuronORPOTrainer refused model parallelism;
* the trainer call: ``tokenizer=`` -> ``processing_class=``.
"""

from __future__ import annotations

import libcst as cst

from codemods.training.arguments import SFTConfigFields, _plan_fields, _record_config_name
from codemods.training.layouts import _code, _is_model_id
from codemods.training.sources import sources
from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    ArgPlan,
    apply_plan,
    fsdp_size_code,
    keywords,
    line_prefix,
    literal,
    quote_of,
    statement_indent,
    tokenizer_to_processing_class,
)
from migrator.rules import PythonContext, PythonRule

ORPO_CONFIG_SOURCES = sources("trl.experimental.orpo.ORPOConfig")
ORPO_TRAINER_SOURCES = sources("trl.experimental.orpo.ORPOTrainer")

_PROMPT = ("Filter out prompts longer than {value} from the dataset: TRL 1.16's ORPOTrainer never truncates them.",
           "TRL 1.16's ORPOTrainer never truncates the prompt: it cuts the completion so that prompt + completion fit "
           "max_length")
#: fields of TRL 0.x's ORPOConfig that TRL 1.16's has no more: (values whose old behaviour is native, (what to
#: do, why))
REMOVED = {
    "max_prompt_length": ((), _PROMPT),
    "truncation_mode": ((), ("Filter out over-long prompts from the dataset: TRL 1.16's ORPOTrainer never truncates "
                             "them.", _PROMPT[1])),
    "label_pad_token_id": ((-100,), ("Pad the labels with -100 where the loss relied on {value}: that is the native "
                                     "value.", "labels are padded with -100 natively (and the loss ignores -100)")),
}
ORPO_DEVICE_MAP = ("Set model_init_kwargs = {..., \"device_map\": None} on the ORPOConfig: ORPOTrainer loads on "
                   "device_map=\"auto\".")


class ORPOArguments(PythonRule):
    id = "NM206"
    markers = (
        (_PROMPT[0], _PROMPT[1]),
        (ORPO_DEVICE_MAP, """Given a model id, ORPOTrainer loads the model itself with device_map="auto" unless
        the config's model_init_kwargs says otherwise, and on neuron that spreads it over devices the run did not
        ask for."""),
    )
    title = "NeuronORPOConfig / NeuronORPOTrainer -> trl.experimental.orpo ORPOConfig / ORPOTrainer (fields, tokenizer)"
    fix = "mixed"
    triggers = ("NeuronORPOConfig", "NeuronORPOTrainer")
    owns = ORPO_CONFIG_SOURCES + ORPO_TRAINER_SOURCES
    why = """
        NeuronORPOConfig = NeuronTrainingArguments + TRL 0.x's ORPOConfig. TRL 1.16 ships ORPO only
        as trl.experimental.orpo.ORPOConfig / ORPOTrainer: the Neuron-only fields are handled as
        NM201 does; max_prompt_length, truncation_mode and label_pad_token_id no longer exist
        (the prompt is never truncated, labels are padded with -100); tensor/pipeline parallel
        sizes are dropped (NeuronORPOTrainer refused model parallelism); `tokenizer=` is
        `processing_class=`; and when the trainer loads the model from a string,
        `model_init_kwargs` gets `"device_map": None` (ORPOTrainer otherwise picks "auto", which
        on neuron loads the model off the NeuronCores).
    """
    before = """
        from optimum.neuron import NeuronORPOConfig, NeuronORPOTrainer

        config = NeuronORPOConfig(output_dir="out", beta=0.1, max_length=512, label_pad_token_id=-100)
        trainer = NeuronORPOTrainer(model="Qwen/Qwen3-0.6B", args=config, train_dataset=ds, tokenizer=tok)
    """
    after = """
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer

        config = ORPOConfig(
            output_dir="out",
            beta=0.1,
            max_length=512,
            torch_compile=True,
            dataloader_drop_last=True,
            model_init_kwargs={"device_map": None},
        )
        trainer = ORPOTrainer(model="Qwen/Qwen3-0.6B", args=config, train_dataset=ds, processing_class=tok)
    """
    caveats = """
        trl.experimental is TRL's unstable API (it warns on import; TRL_EXPERIMENTAL_SILENCE=1
        silences it). ORPO's collator pads each batch to its longest sequence, as it did under
        optimum-neuron: shapes vary between batches unless the dataset is filtered to one
        length. A model "passed as a string" is recognised as for NM203; configs built
        elsewhere (parsed from the command line) get a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual in ORPO_CONFIG_SOURCES:
            _record_config_name(node, ctx)
            self._config(node, ctx)
        elif qual in ORPO_TRAINER_SOURCES:
            self._trainer(node, ctx)

    def _config(self, call: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(call)
        plan = ArgPlan()
        for name, (same, message) in REMOVED.items():
            if name not in kw:
                continue
            if name == "truncation_mode" and "max_prompt_length" in kw:
                plan.drop.add(name)  # the max_prompt_length marker says it
                ctx.finding(kw[name], "ORPOConfig: dropped truncation_mode (the prompt is not truncated natively)")
                continue
            plan.drop.add(name)
            value = literal(kw[name].value)
            if value is not NOT_LITERAL and value in same:
                ctx.finding(kw[name], f"ORPOConfig: dropped {name} (native behaviour is the same)")
            else:
                action, why = message
                ctx.marker(call, action.format(value=_code(ctx, kw[name].value)),
                           detail=f"{name}={_code(ctx, kw[name].value)} was dropped: {why}")
        sizes = _plan_fields(call, ctx, plan)
        parallel = [k for k in ("tp_size", "pp_size") if k in sizes]
        if parallel:
            layout = ", ".join(f"{k}={_code(ctx, sizes.pop(k))}" for k in parallel)
            if "fsdp_size" in sizes:  # every process is a data-parallel rank now
                sizes["fsdp_size"] = cst.parse_expression(fsdp_size_code("os.environ", None, quote_of(call)))
            ctx.marker(call, f"Pass distributed_config=DistributedConfig(tp_size=...) to the model load to shard it: "
                             f"{layout} was dropped.",
                       detail="NeuronORPOTrainer refused model parallelism, so the old run was data parallel")
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, call), ctx.module.default_indent
        ctx.replace(call, lambda new: new if plan.empty()
                    else apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))
        ctx.local_state().setdefault("orpo_configs", []).append((call, plan, sizes, ctx.statement()))

    def _trainer(self, call: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(call)
        plan = ArgPlan()
        tokenizer_to_processing_class(call, ctx, plan, "ORPOTrainer")
        model = kw.get("model")
        expr = model.value if model is not None else (
            call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else None)
        if expr is not None and _is_model_id(expr):
            ctx.local_state().setdefault("orpo_id_trainers", []).append((call, ctx.statement()))
        if plan.empty():
            return
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, call), ctx.module.default_indent
        ctx.replace(call, lambda new: apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        names = state.get("config_names", {})
        fed = set()  # the config calls an ORPOTrainer loading a model id gets
        for trainer, statement in state.get("orpo_id_trainers", ()):
            args = keywords(trainer).get("args")
            value = args.value if args is not None else None
            if isinstance(value, cst.Name) and names.get(value.value) is not None:
                fed.add(id(names[value.value]))
                continue
            if isinstance(value, cst.Call) and ctx.qualname(value.func) in ORPO_CONFIG_SOURCES:
                fed.add(id(value))
                continue
            ctx.marker(statement, ORPO_DEVICE_MAP)
        for node, plan, sizes, statement in state.get("orpo_configs", ()):
            if id(node) in fed:
                SFTConfigFields._device_map(self, node, ctx, keywords(node), plan, quote_of(node), statement, sizes,
                                            trainer="ORPOTrainer")
            elif sizes:
                layout = ", ".join(f"{k}={_code(ctx, v)}" for k, v in sizes.items())
                ctx.marker(statement, "Shard the model where it is loaded with a DistributedConfig, and launch with torchrun.",
                           detail=f"from_pretrained(..., distributed_config=DistributedConfig({layout}))")


RULES = (ORPOArguments,)
