"""LoRA adapters over a tensor-parallel model: which layouts the target can train.

Measured on CPU (tests/test_lora_tensor_parallel.py: torchrun + gloo, 2 processes, a tiny Llama,
transformers 5.23 / PEFT 0.21, ``DistributedConfig(tp_size=2)``, one forward and backward against an
unsharded copy with the same adapter weights):

* LoRA on the column-wise sharded projections of the model's tensor-parallel plan (``q_proj``,
  ``k_proj``, ``v_proj``, ``gate_proj``, ``up_proj``) runs, with the loss and adapter gradients of
  the unsharded model;
* LoRA on a row-wise sharded one (``o_proj``, ``down_proj``, hence ``target_modules="all-linear"``)
  fails at the first forward (``shape '[24, 16]' is invalid for input of size 768`` in the LoRA
  layer: the adapter sees the whole output, the layer one shard of its input);
* the same adapters over ``DistributedConfig(fsdp_size=2)`` (FSDP2, no tensor parallelism) run, on
  every target, with the unsharded model's loss and gradients.

So the training rules keep a tensor-parallel layout for a module that applies PEFT only when every
LoRA config it builds targets a literal list of those column-wise projections; otherwise (other or
unknown targets, a default that depends on the model type, a PEFT config built elsewhere) the layout
becomes FSDP over every process, with a marker that says why and when tp_size may come back."""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import NOT_LITERAL, keywords, literal

#: the projections a Llama-family tensor-parallel plan shards column-wise (LoRA over them runs)
COLUMN_WISE = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
_LORA_CONFIGS = ("peft.LoraConfig", "peft.tuners.lora.LoraConfig", "peft.tuners.lora.config.LoraConfig")


class _Used(cst.CSTVisitor):
    """The names a module reads outside its imports, and whether a call passes ``peft_config=`` a value."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.peft_config = False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value == "peft_config" and literal(node.value) is not None:
            self.peft_config = True  # (`peft_config=None` trains the whole model)


def _uses_peft(ctx) -> bool:
    """Whether the unit applies PEFT: it uses a name imported from peft (an import alone, its uses commented
    out, does not count), or passes a trainer ``peft_config=`` (TRL's ``get_peft_config(model_args)``)."""
    peft = [b for b in ctx.imports.all_bindings()
            if b.qualified == "peft" or b.qualified.startswith("peft.")
            or (b.qualified.startswith("optimum.neuron") and "peft" in b.qualified.lower())]
    used = _Used()
    ctx.module.visit(used)
    return used.peft_config or any(b.local.split(".")[0] in used.names for b in peft)


def lora_blocks_tp(ctx) -> str | None:
    """Why this unit's PEFT adapters rule out tensor parallelism (None: no PEFT here, or only LoRA on the
    column-wise projections). Computed once per unit."""
    cache = ctx.scratch.get("lora blocks tp", NOT_LITERAL)
    if cache is not NOT_LITERAL:
        return cache
    reason = None
    if _uses_peft(ctx):
        targets: list = []

        class _Configs(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                if ctx.imports.resolve(node.func) in _LORA_CONFIGS:
                    targets.append(node)

        ctx.module.visit(_Configs())
        if not targets:
            reason = "the PEFT config is not built in this file"
        for call in targets:
            reason = reason or _lora_reason(call)
    ctx.scratch["lora blocks tp"] = reason
    return reason


def _lora_reason(call: cst.Call) -> str | None:
    if any(a.star for a in call.args) or any(a.keyword is None for a in call.args):
        return "LoraConfig arguments the rule cannot read"
    kw = keywords(call)
    if "modules_to_save" in kw and literal(kw["modules_to_save"].value) is not None:
        return "modules_to_save trains whole copies of sharded modules"
    if "target_modules" not in kw or literal(kw["target_modules"].value) is None:
        return "LoraConfig's default target modules depend on the model type"
    node = kw["target_modules"].value
    value = literal(node)
    if isinstance(value, str):
        return f"target_modules={value!r}"
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        value = [literal(e.value) if isinstance(e, cst.Element) else NOT_LITERAL for e in node.elements]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return "target_modules the rule cannot read"
    rowwise = sorted(set(value) - COLUMN_WISE)
    if rowwise:
        return f"LoRA on {', '.join(rowwise)}"
    return None


def tensor_parallel(sizes: dict) -> bool:
    tp = sizes.get("tp_size")
    return tp is not None and literal(tp) != 1


def fsdp_instead(environ: str, quote: str = '"') -> dict[str, cst.BaseExpression]:
    """The layout that trains any LoRA target: FSDP over every process, no tensor parallelism."""
    return {"fsdp_size": cst.parse_expression(f"int({environ}.get({quote}WORLD_SIZE{quote}, {quote}1{quote}))")}


LORA_MARKER = "Check the memory per core: this load shards with FSDP, since LoRA fails over tensor-parallel layers."
LORA_ADVICE = "Load the model with DistributedConfig(fsdp_size=WORLD_SIZE): LoRA fails over tensor-parallel layers."
LORA_MARKERS = (
    (LORA_MARKER,
     """PEFT's LoRA layers fail over the tensor-parallel layers of transformers 5.23 (the detail says which
     target modules), so the migration shards the model with FSDP over every process instead of the
     tensor-parallel layout the old run used: parameters, gradients and optimizer state are sharded, the
     layers are not split."""),
    (LORA_ADVICE,
     """PEFT's LoRA layers fail over the tensor-parallel layers of transformers 5.23; FSDP over every process
     trains any target module. The rule could not edit the load here."""),
)


def lora_marker(reason: str) -> str:
    del reason  # the finding's detail (LORA_MARKERS) explains; the marker stays the same on every run
    return LORA_MARKER


def lora_advice(reason: str) -> str:
    """For a load the rule cannot edit: what to load it with."""
    del reason
    return LORA_ADVICE
