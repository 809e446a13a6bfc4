"""NM410: torch_neuronx (XLA tracing) -> torch.compile(backend="neuron") on the ``neuron`` device.

``torch_neuronx.trace(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None,
compiler_args=None, partitioner_config=None, inline_weights_to_neff=True, ...)`` compiled a module
ahead of time for the shapes of ``example_inputs`` and returned a ``torch.jit.ScriptModule`` that
took and returned CPU tensors. TorchNeuron has no ``trace``: the module runs on the ``neuron``
device and ``torch.compile(backend="neuron")`` compiles it on the first call (one graph per input
shape; ``dynamic=True`` is unsupported). Facts: source-apis §4.3.
"""

from __future__ import annotations

import libcst as cst

from codemods.xla.base import (
    _XlaRule, _atomic, _bind_args, _code, _expr, _expression_statement, _quote, _remove_small_statement, _torch)
from migrator.rules import PythonContext

NX = "torch_neuronx"

#: owned names that only get a marker: what to do instead
MANUAL = {
    f"{NX}.DataParallel": (
        "torch_neuronx.DataParallel ran one traced copy per NeuronCore and split the batch between them: run one "
        "process per NeuronCore (torchrun) on its own device torch.device(\"neuron\", LOCAL_RANK) and shard the "
        "inputs between the processes"
    ),
    f"{NX}.dynamic_batch": "drop torch_neuronx.dynamic_batch: pad every batch to the compiled batch size instead",
    f"{NX}.async_load": "drop torch_neuronx.async_load: the model is on the neuron device once moved with .to()",
    f"{NX}.lazy_load": "drop torch_neuronx.lazy_load: the model is on the neuron device once moved with .to()",
    f"{NX}.move_trace_to_device": "replace torch_neuronx.move_trace_to_device(model, i) by model.to(f\"neuron:{i}\")",
}

#: owned calls that only loaded a traced artifact onto the NeuronCores: a statement of their own is deleted
DROPPED = {
    f"{NX}.async_load": "the model is on the neuron device once moved there with .to()",
    f"{NX}.lazy_load": "the model is on the neuron device once moved there with .to()",
}

TRACE_PARAMS = ("func", "example_inputs")
TRACE_KEYWORDS = ("input_output_aliases", "compiler_workdir", "compiler_args", "partitioner_config",
                  "inline_weights_to_neff", "cpu_backend", "state")


class NeuronTrace(_XlaRule):
    id = "NM410"
    title = "torch_neuronx.trace -> torch.compile(model.to('neuron').eval(), backend='neuron'); traced artifacts -> markers"
    fix = "mixed"
    triggers = ("torch_neuronx",)
    owns = (f"{NX}.trace", *MANUAL)
    natives = {
        f"{NX}.trace": 'torch.compile(model.to("neuron").eval(), backend="neuron", fullgraph=True, dynamic=False)',
        **{k: "see the marker" for k in MANUAL},
    }
    why = """
        `torch_neuronx.trace(model, example_inputs, compiler_args=...)` compiled the model ahead
        of time for the shapes of `example_inputs`. On TorchNeuron the model itself runs on the
        `neuron` device and `torch.compile(..., backend="neuron")` compiles it at the first call,
        once per input shape: `fullgraph=True` keeps the single graph that tracing required and
        `dynamic=False` the static shapes. The example inputs are not needed to compile any more;
        their shapes become the shapes to pad real inputs to (a marker says so), and the compiled
        model takes and returns tensors on the `neuron` device, where the traced one took CPU
        tensors: where the compiled model is called in the scope that traced it
        (`neuron_model(x)`), its inputs are moved with `.to("neuron")`. Saving or loading a
        traced artifact with `torch.jit.save/load` gets a marker (save the weights and compile
        again), as do `torch_neuronx.DataParallel`, `dynamic_batch` and `move_trace_to_device`.
        `torch_neuronx.async_load(m)` / `lazy_load(m)` only loaded the traced artifact onto the
        NeuronCores: as a statement of their own they are deleted. A trace was a frozen artifact and
        `torch.compile` wraps the live module, so, for a name assigned from the trace: a second
        `torch.compile(name)` is dropped (it would not return a module), `name.state_dict()` /
        `load_state_dict()` go through `name._orig_mod` (the compiled module prefixes every key with
        `_orig_mod.`), and `name.save(path)` (the TorchScript artifact's) and an assignment of the
        compiled model into the module it wraps (`model.encoder.forward_neuron = name`: the module
        would contain itself) get a marker. `from_pretrained(..., torchscript=True)`, the usual
        preparation for a trace, is NM615's (dropped, with a marker: `return_dict=False` would not
        do, it breaks the forward of Llama-family models in Transformers 5.23). `traced(*example)` with the trace's own example inputs
        moves each of them: `traced(*(t.to("neuron") for t in example))`.
    """
    before = """
        import torch
        import torch_neuronx

        example = torch.rand(1, 3, 224, 224)
        neuron_model = torch_neuronx.trace(model, example, compiler_args=["--auto-cast", "none"])
        logits = neuron_model(images)
    """
    after = """
        import torch

        example = torch.rand(1, 3, 224, 224)
        # TODO(neuron-migrate NM410): the model now runs on the neuron device and compiles at its first call, once per input shape: its calls as `neuron_model(...)` in this scope get their inputs moved there with .to("neuron"); move inputs given to it anywhere else (the traced model took CPU tensors), pad them to the shapes of `example` to avoid recompiling, and bring outputs back with .cpu() where CPU tensors are needed
        neuron_model = torch.compile(model.to("neuron").eval(), backend="neuron", fullgraph=True, dynamic=False)
        logits = neuron_model(images.to("neuron"))
    """
    caveats = """
        `model.to("neuron")` moves the original module (tracing left it on the CPU): a CPU
        reference run of the same module after this line needs its own copy. `compiler_args` are
        dropped: `--auto-cast`/`--auto-cast-type` become a `dtype=` at load time or
        `torch.autocast("neuron", dtype=torch.bfloat16)` by hand (a marker repeats them). A trace
        whose result is not assigned still gets the rewrite and the marker. Inputs are moved only
        at calls of the assigned name in the same function (a call with `*args` gets a marker);
        literal arguments (numbers, strings, None) are left alone, and outputs stay on the
        neuron device.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Assign] = self._on_assign
        return table

    def rewrite(self, qual, call, func, ctx):
        if qual in DROPPED:
            statement = _expression_statement(ctx, call)
            if statement is not None and not any(a.star for a in call.args):
                _remove_small_statement(ctx, *statement)
                ctx.finding(call, f"{qual}(...) removed: {DROPPED[qual]}")
                return None
        if qual in MANUAL:
            ctx.marker(call, MANUAL[qual])
            return None
        bound = _bind_args(call, TRACE_PARAMS + TRACE_KEYWORDS)
        if bound is None or "func" not in bound:
            return "unsupported arguments"
        torch = _torch(ctx, ctx.imports.binding_of(func))
        q = _quote(ctx)
        params = TRACE_PARAMS + TRACE_KEYWORDS

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, params)
            assert b is not None
            model = b["func"].value
            if (
                isinstance(model, cst.Call) and isinstance(model.func, cst.Attribute)
                and model.func.attr.value == "eval" and not model.args
            ):
                model = model.func.value  # model.eval() -> model.to("neuron").eval()
            return _expr(f"{torch}.compile({_code(_atomic(model))}.to({q}neuron{q}).eval(), "
                         f"backend={q}neuron{q}, fullgraph=True, dynamic=False)")

        ctx.replace(call, build)
        ctx.finding(call, f"{qual}(model, example_inputs) -> torch.compile(model.to(\"neuron\").eval(), "
                          "backend=\"neuron\")")
        target = _assigned_name(call, ctx)
        if target is not None:
            model_arg = bound["func"].value
            ctx.local_state().setdefault("traced", {})[(id(_scope(ctx)), target)] = _code(_uneval(model_arg))
            example_arg = bound.get("example_inputs")
            if example_arg is not None and isinstance(example_arg.value, cst.Name):
                # the tensors the trace took: `traced(*example)` moves each of them
                ctx.local_state().setdefault("examples", {})[(id(_scope(ctx)), target)] = example_arg.value.value
        example = bound.get("example_inputs")
        shapes = "the traced shapes"
        if example is not None:
            value = example.value
            if isinstance(value, cst.Tuple) and value.elements:
                shapes = "the shapes of " + ", ".join(f"`{_code(el.value)}`" for el in value.elements)
            else:
                shapes = f"the shapes of `{_code(value)}`"
        if target is not None:
            moved = (f"its calls as `{target}(...)` in this scope get their inputs moved there with .to({q}neuron{q}); "
                     "move inputs given to it anywhere else (the traced model took CPU tensors)")
        else:
            moved = f"move its inputs there with .to({q}neuron{q}) (the traced model took CPU tensors)"
        ctx.marker(call, (
            f"the model now runs on the neuron device and compiles at its first call, once per input shape: {moved}, "
            f"pad them to {shapes} to avoid recompiling, and bring outputs back with .cpu() where CPU tensors "
            "are needed"
        ))
        dropped = [k for k in TRACE_KEYWORDS if k in bound]
        if "compiler_args" in bound and not _no_auto_cast(bound["compiler_args"].value):
            ctx.marker(call, (
                f"compiler_args={_code(bound['compiler_args'].value)} were neuronx-cc options of the trace: "
                "express --auto-cast choices as the model's dtype or torch.autocast(\"neuron\", dtype=...)"
            ))
        if dropped:
            ctx.finding(call, f"trace options dropped: {', '.join(dropped)}")
        return None

    def _on_call(self, call: cst.Call, ctx: PythonContext) -> None:
        """torch.jit.save/load in a module that traces with torch_neuronx: a traced Neuron artifact;
        a call of a traced model (a name assigned from trace in the same scope): inputs moved."""
        func = call.func
        if isinstance(func, cst.Name):
            traced = ctx.local_state().get("traced")
            if traced and (id(_scope(ctx)), func.value) in traced:
                self._move_inputs(call, func.value, ctx)
            return
        traced = ctx.local_state().get("traced") or {}
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and (id(_scope(ctx)), func.value.value) in traced:
            self._traced_method(call, func, ctx)
            return
        if isinstance(func, cst.Attribute) and ctx.qualname(func) == "torch.compile" and call.args \
                and isinstance(call.args[0].value, cst.Name) and (id(_scope(ctx)), call.args[0].value.value) in traced:
            name = call.args[0].value.value
            parent, line = ctx.stack[-2], ctx.stack[-3]
            if (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)
                    and parent.targets[0].target.value == name and isinstance(line, cst.SimpleStatementLine)
                    and len(line.body) == 1 and len(getattr(ctx.stack[-4], "body", ())) > 1):
                ctx.remove_statement(line)  # `m = torch.compile(m)`: nothing left to do
            else:
                ctx.replace(call, call.args[0].value)
            ctx.finding(call, f"torch.compile({name}) removed: {name} is already the compiled model (it was a "
                              "torch_neuronx.trace), and compiling a compiled module wraps it twice")
            return
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("save", "load"):
            return
        qual = ctx.qualname(func)
        if qual == "torch.jit.save":
            ctx.marker(call, (
                "torch.jit.save of a traced Neuron model: TorchNeuron compiles at run time, so save the weights "
                "instead (model.state_dict() with torch.save, or save_pretrained) and compile again after loading"
            ))
        elif qual == "torch.jit.load":
            ctx.marker(call, (
                "torch.jit.load of a traced Neuron model: build the model, load its weights (load_state_dict / "
                "from_pretrained), then torch.compile(model.to(\"neuron\").eval(), backend=\"neuron\")"
            ))


    def _traced_method(self, call: cst.Call, func: cst.Attribute, ctx: PythonContext) -> None:
        """Methods of the traced artifact: `.save(path)` (a ScriptModule's) and the state dict, which a
        compiled module prefixes with `_orig_mod.`."""
        name, attr = func.value.value, func.attr.value  # type: ignore[attr-defined]
        if attr == "save":
            ctx.marker(call, (
                f"{name}.save(...) saved the traced Neuron artifact (a TorchScript module): TorchNeuron compiles at "
                f"run time, so save the weights instead (torch.save({name}._orig_mod.state_dict(), path) or "
                "save_pretrained) and compile again after loading"))
        elif attr in ("state_dict", "load_state_dict"):
            ctx.replace(func.value, cst.Attribute(value=func.value, attr=cst.Name("_orig_mod")))
            ctx.finding(call, f"{name}.{attr}() -> {name}._orig_mod.{attr}(): the compiled module's own state dict "
                              "prefixes every key with `_orig_mod.`; the original module's keeps the model's keys")

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """`model.encoder.forward_neuron = compiled` where `compiled` wraps `model.encoder`: the compiled
        module (which holds the live module) would sit inside the module it wraps."""
        traced = ctx.local_state().get("traced")
        if not traced or not isinstance(node.value, cst.Name):
            return
        wrapped = traced.get((id(_scope(ctx)), node.value.value))
        if wrapped is None:
            return
        for t in node.targets:
            target = _code(t.target)
            if isinstance(t.target, cst.Attribute) and target.startswith(wrapped + "."):
                ctx.marker(node, (
                    f"`{target} = {node.value.value}` puts the compiled model inside the module it compiles: "
                    f"torch.compile keeps the live `{wrapped}` (a trace was a separate artifact), so `{wrapped}` would "
                    f"contain itself and a forward that calls `{target}` recurses; compile the callable that forward "
                    f"uses instead, or assign to a copy of the module (copy.deepcopy) before compiling"))

    def _move_inputs(self, call: cst.Call, name: str, ctx: PythonContext) -> None:
        example = (ctx.local_state().get("examples") or {}).get((id(_scope(ctx)), name))
        if any(arg.star for arg in call.args):
            if example is not None and len(call.args) == 1 and call.args[0].star == "*" \
                    and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == example:
                q = _quote(ctx)
                moved = _expr(f"(t.to({q}neuron{q}) for t in {example})")
                ctx.replace(call.args[0], lambda updated: updated.with_changes(value=moved))
                ctx.finding(call, f"each example input of {name}(*{example}) moved to the neuron device")
                return
            ctx.marker(call, (
                f"the inputs unpacked into {name}(...) with * / ** are not moved automatically: move each tensor "
                "to the neuron device with .to(\"neuron\") (the compiled model runs there)"
            ))
            return
        if not any(_movable(arg.value) for arg in call.args):
            return
        q = _quote(ctx)

        def build(updated: cst.Call) -> cst.BaseExpression:
            return updated.with_changes(args=[arg.with_changes(value=_to_neuron(arg.value, q)) for arg in updated.args])

        ctx.replace(call, build)
        ctx.finding(call, f"inputs of the compiled model {name}(...) moved to the neuron device")


def _uneval(model: cst.BaseExpression) -> cst.BaseExpression:
    """``model`` of ``model.eval()`` (what the rewrite compiles)."""
    if isinstance(model, cst.Call) and isinstance(model.func, cst.Attribute) and model.func.attr.value == "eval" \
            and not model.args:
        return model.func.value
    return model


def _scope(ctx: PythonContext) -> cst.CSTNode:
    """The innermost function (or the module) around the node being handled."""
    for node in reversed(ctx.stack):
        if isinstance(node, (cst.FunctionDef, cst.Lambda)):
            return node
    return ctx.module


def _assigned_name(call: cst.Call, ctx: PythonContext) -> str | None:
    """``name`` for ``name = <call>`` (one plain name target), else None."""
    parent = ctx.stack[-3] if len(ctx.stack) > 2 and ctx.stack[-2] is call else ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
        target = parent.targets[0].target
        if isinstance(target, cst.Name):
            return target.value
    if isinstance(parent, cst.AnnAssign) and parent.value is call and isinstance(parent.target, cst.Name):
        return parent.target.value
    return None


_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _movable(value: cst.BaseExpression) -> bool:
    """A value that can be a tensor: not a literal, not None/True/False, not already .to(...)."""
    if isinstance(value, _LITERALS):
        return False
    if isinstance(value, cst.Name) and value.value in ("None", "True", "False"):
        return False
    if isinstance(value, (cst.Tuple, cst.List)):
        return any(_movable(el.value) for el in value.elements if not isinstance(el, cst.StarredElement))
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cpu"):
        return value.func.attr.value == "cpu"
    return isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))


def _to_neuron(value: cst.BaseExpression, q: str) -> cst.BaseExpression:
    """``value.to("neuron")`` (element by element for a tuple/list literal)."""
    if not _movable(value):
        return value
    if isinstance(value, (cst.Tuple, cst.List)):
        return value.with_changes(elements=[
            el if isinstance(el, cst.StarredElement) else el.with_changes(value=_to_neuron(el.value, q))
            for el in value.elements])
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "cpu" \
            and not value.args:
        value = value.func.value  # x.cpu() -> x.to("neuron")
    return _expr(f"{_code(_atomic(value))}.to({q}neuron{q})")


def _no_auto_cast(value: cst.BaseExpression) -> bool:
    """True for compiler_args that only ask for no auto-casting (what the native model does)."""
    if isinstance(value, cst.SimpleString):
        tokens = str(value.evaluated_value).replace("=", " ").split()
    elif isinstance(value, (cst.List, cst.Tuple)):
        tokens = []
        for el in value.elements:
            if not isinstance(el.value, cst.SimpleString):
                return False
            tokens.extend(str(el.value.evaluated_value).replace("=", " ").split())
    else:
        return False
    return tokens == ["--auto-cast", "none"]


RULES = (NeuronTrace,)
