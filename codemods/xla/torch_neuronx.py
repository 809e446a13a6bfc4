"""NM410: torch_neuronx (XLA tracing) -> torch.compile(backend="neuron") on the ``neuron`` device.

``torch_neuronx.trace(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None,
compiler_args=None, partitioner_config=None, inline_weights_to_neff=True, ...)`` compiled a module
ahead of time for the shapes of ``example_inputs`` and returned a ``torch.jit.ScriptModule`` that
took and returned CPU tensors. TorchNeuron has no ``trace``: the module runs on the ``neuron``
device and ``torch.compile(backend="neuron")`` compiles it on the first call (one graph per input
shape; ``dynamic=True`` is unsupported). Facts: source-apis §4.3.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.xla.base import (
    _XlaRule, _atomic, _bind_args, _code, _expr, _expression_statement, _module_local, _quote,
    _remove_small_statement, _torch)
from codemods.common.statements import assigned_values, block_of, clock_after, reads_clock, with_blank_line
from codemods.xla.artifacts import (
    MODULE, NEURON_TRACES, PRETRAINED, TORCHSCRIPT, Traced, artifacts, not_a_module, plain, rebuildable, unchain)
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext
from migrator.tree import walk

NX = "torch_neuronx"

#: owned names that only get a marker: what to do instead
MANUAL = {
    f"{NX}.DataParallel": "Run one process per NeuronCore (torchrun) and shard the inputs, not torch_neuronx.DataParallel.",
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
JIT_LOAD_PARAMS = ("f", "map_location")
#: project facts (Rule.project_probes): some file of the run traces with torch_neuronx / loads a TorchScript file
TRACES = "neuronx:trace"
JIT_LOADS = "neuronx:jit-load"
#: ... some file saves the model a (migrated) trace compiled: as a Transformers model / as a state dict
SAVED_PRETRAINED = "neuronx:saved-pretrained"
SAVED_STATE = "neuronx:saved-state-dict"
#: what the migrated saves of a trace write (NeuronTrace._save): a Transformers model, a module's state dict
MIGRATED_SAVES = ("._orig_mod.save_pretrained(", "._orig_mod.state_dict(),")
#: the instruction both sides of a traced artifact get (the tracing script that saved it, the script that loads it)
#: the start of the marker of a torch.jit.load left to a person (a unit that has it was migrated before: its
#: trace, gone now, decided so, and a second run must decide the same)
LOAD_MARKED = "Replace this load of a Neuron trace"
#: a module imported by SageMaker build-and-deploy code (a notebook that builds what an endpoint serves)
_SAGEMAKER = re.compile(r"^[ \t]*(?:import sagemaker\b|from sagemaker\b)", re.MULTILINE)
BUILD_HOST_MARKER = ("Compile and warm this model up where it is served: this code only saves it for SageMaker (no "
                     "neuron device here).")
#: ... that another file of the project saves: what it traced (a Transformers model or not) is not seen here
ELSEWHERE = " (saved in another file)"
#: what a load marker asks for where what was saved is not known here
LOAD_BY_HAND = " by from_pretrained or load_state_dict, then torch.compile."
ARTIFACT_NOTE = (
    "TorchNeuron has no traced artifact to save or load: the tracing script saves a Transformers model with "
    "save_pretrained(path) (any other module: the state_dict of the module it compiles, "
    "torch.save(module.state_dict(), path)), "
    "and the script that loaded the artifact loads that (from_pretrained; any other module: build it, then "
    "load_state_dict(torch.load(path))) and compiles it again with torch.compile(model.to(\"neuron\").eval(), "
    "backend=\"neuron\", dynamic=False)"
)
TRACE_KEYWORDS = ("input_output_aliases", "compiler_workdir", "compiler_args", "partitioner_config",
                  "inline_weights_to_neff", "cpu_backend", "state")


#: methods that move or change a module in place: after one of them on the traced module, a compiled model
#: that shares the module would change with it (the traced artifact did not)
MUTATORS = frozenset({"cpu", "cuda", "to", "half", "float", "double", "bfloat16", "train", "load_state_dict",
                      "requires_grad_", "apply", "register_forward_hook", "register_forward_pre_hook"})


#: calls that run a module: after the trace the code still runs the CPU module, which an in-place
#: .to("neuron") would move from under its CPU inputs
RUNS = frozenset({"forward", "generate"})


def _changed_later(ctx: PythonContext, name: str) -> bool:
    """Whether a statement after the one being handled (in its block, or a later one of the module)
    calls a :data:`MUTATORS` or :data:`RUNS` method on ``name``, or calls ``name`` itself."""
    stack = ctx.stack
    statement = next((n for n in reversed(stack) if isinstance(n, cst.SimpleStatementLine)), None)
    if statement is not None and any(isinstance(small, cst.Assign) and any(
            isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets) for small in statement.body):
        return False  # `name = trace(name, ...)`: what follows uses the traced (now compiled) model, not the module
    for i in range(len(stack) - 1, 0, -1):
        block = stack[i - 1]
        if isinstance(block, (cst.Module, cst.IndentedBlock)):
            body = list(block.body)
            index = next((k for k, s in enumerate(body) if s is stack[i]), None)
            if index is None:
                continue
            for later in body[index + 1:]:
                if _rebinds(later, name):
                    return False  # `name = ...` again: what follows uses another object
                for node in _calls(later):
                    func = node.func
                    if (isinstance(func, cst.Attribute) and func.attr.value in MUTATORS | RUNS
                            and isinstance(func.value, cst.Name) and func.value.value == name):
                        return True
                    if isinstance(func, cst.Name) and func.value == name:
                        return True
            if isinstance(block, cst.Module) or isinstance(stack[i - 2] if i >= 2 else None, FUNCTION_DEFS):
                return False
    return False


#: the callables that tokenize: `tokenizer(...)`, `tok.encode_plus(...)`, `processor(text=...)`
_TOKENIZERS = re.compile(r"(?:^|_)(?:tokenizer|tok)$|^(?:encode_plus|batch_encode_plus)$")


_GROWS_INPUTS = re.compile(r"\.generate\(|\btorch\.(?:cat|concat|stack)\(")


def _pads_every_tokenization(ctx: PythonContext) -> bool:
    """The unit tokenizes, every tokenizer call pads to a fixed length (``padding="max_length"``,
    ``pad_to_max_length=True``) and nothing grows inputs (generate, torch.cat): the inputs it builds all have the
    shape the trace was given."""
    key = "NM410.pads"
    if key not in ctx.scratch:
        calls = [n for n in walk(ctx.module) if isinstance(n, cst.Call) and _TOKENIZERS.search(
            n.func.value if isinstance(n.func, cst.Name) else n.func.attr.value if isinstance(n.func, cst.Attribute)
            else "")]

        def pads(call: cst.Call) -> bool:
            for a in call.args:
                if a.keyword is None:
                    continue
                v = a.value
                if a.keyword.value == "padding" and isinstance(v, cst.SimpleString) and v.evaluated_value == "max_length":
                    return True
                if a.keyword.value == "pad_to_max_length" and isinstance(v, cst.Name) and v.value == "True":
                    return True
            return False

        # (a generation loop feeds the model inputs it grows itself: their shapes are not the tokenizer's)
        ctx.scratch[key] = bool(calls) and all(pads(c) for c in calls) and not _GROWS_INPUTS.search(ctx.code)
    return ctx.scratch[key]


def _built_from(ctx: PythonContext, name: str) -> list[str]:
    """The objects the module ``name`` was built from in this scope: ``ref`` for ``name = Wrapper(ref.encoder)``
    or ``Wrapper(ref)`` (moving ``name`` to the device in place moves what it shares with ``ref`` too)."""
    out: list[str] = []
    handled = {id(n) for n in ctx.stack}  # (the trace's own `name = trace(name, example)` builds nothing)
    for node in walk(ctx.scope):
        if id(node) in handled or not (isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)):
            continue
        for arg in node.value.args:
            value = arg.value
            while isinstance(value, (cst.Attribute, cst.Subscript)):
                value = value.value
            if isinstance(value, cst.Name) and value.value not in (name, "self") and ctx.qualname(value) is None:
                out.append(value.value)
    return list(dict.fromkeys(out))


def _wraps_module_used_elsewhere(call: cst.Call, ctx: PythonContext) -> bool:
    """``trace(Wrapper(model), ...)`` / ``trace(Wrapper(self.model), ...)`` where the code also runs or moves that
    module itself (``model.generate(...)``, ``self.model(ids)`` in another method): the compiled wrapper, moved
    to the device in place, would take the shared module with it."""
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.Name) and ctx.qualname(value) is None:
            if _changed_later(ctx, value.value):
                return True
        elif isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value == "self":
            code = re.escape(ctx.module.code_for_node(value))
            methods = "|".join(sorted(MUTATORS | RUNS))
            if re.search(rf"(?<![\w.]){code}\s*(?:\(|\.\s*(?:{methods})\s*\()", ctx.code):
                return True
    return False


FUNCTION_DEFS = (cst.FunctionDef,)


def _rebinds(statement: cst.CSTNode, name: str) -> bool:
    """``statement`` is ``name = <value not naming name>`` (a new object bound to the name)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    assign = statement.body[0]
    return (isinstance(assign, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name
                                                   for t in assign.targets)
            and not any(isinstance(n, cst.Name) and n.value == name for n in walk(assign.value)))


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in walk(node) if type(n) is cst.Call]


def _scope_code(node: cst.CSTNode, ctx: PythonContext) -> str:
    """``_code(node)`` of a function, class or module of the unit, generated once per unit (the rules read
    the original tree, which does not change while they run)."""
    cache = ctx.scratch.setdefault("_nm410_code", {})
    found = cache.get(id(node))
    if found is None:
        found = cache[id(node)] = _code(node)
    return found


class NeuronTrace(_XlaRule):
    id = "NM410"
    markers = (
        ("Run one process per NeuronCore (torchrun) and shard the inputs, not torch_neuronx.DataParallel.",
         """torch_neuronx.DataParallel ran one traced copy per NeuronCore and split the batch between them:
         natively run one process per NeuronCore (torchrun), each on its own device
         torch.device("neuron", LOCAL_RANK), and shard the inputs between the processes."""),
        ("Move each tensor in the nested containers given to {name}(...) to the neuron device by hand.",
         """The compiled model runs on the neuron device and the traced model took CPU tensors; the rule moves
         tensors and flat containers of them, but a container of containers has no .to()."""),
        ("Move each tensor unpacked into {name}(...) with * / ** to the neuron device by hand.",
         """The compiled model runs on the neuron device; inputs unpacked with * / ** are not moved
         automatically."""),
        ("Move the inputs of model_fn's model to \"neuron\" here and its outputs back with .cpu().",
         """The model model_fn returns is compiled for the neuron device once migrated; the SageMaker handler
         that calls it (predict_fn) must move its inputs there and bring the outputs back to the CPU."""),
    )
    title = ("torch_neuronx.trace -> torch.compile(model.to('neuron').eval(), backend='neuron'); traced artifacts -> "
             "save_pretrained / state_dict, their loads compiled")
    fix = "mixed"
    #: torch_neuronx, and the saves of a tracing script migrated before (what its serving script then loads)
    triggers = ("torch_neuronx", *MIGRATED_SAVES)
    #: a serving script that loads the traced artifact without importing torch_neuronx
    project_triggers = ("jit.load",)
    project_probes = {TRACES: ("torch_neuronx.trace", "from torch_neuronx import trace", "xla_impl.trace import trace"), JIT_LOADS: ("jit.load",),
                      SAVED_PRETRAINED: (MIGRATED_SAVES[0],), SAVED_STATE: (MIGRATED_SAVES[1],)}
    owns = (*NEURON_TRACES, *MANUAL)
    natives = {
        **dict.fromkeys(NEURON_TRACES, 'torch.compile(model.to("neuron").eval(), backend="neuron", dynamic=False)'),
        **{k: "see the marker" for k in MANUAL},
    }
    why = """
        `torch_neuronx.trace(model, example_inputs, compiler_args=...)` compiled the model ahead
        of time for the shapes of `example_inputs`. On TorchNeuron the model itself runs on the
        `neuron` device and `torch.compile(..., backend="neuron")` compiles it at the first call,
        once per input shape, `dynamic=False` keeping the static shapes of the trace. No
        `fullgraph=True`: tracing recorded a model's data-dependent values as constants, dynamo does
        not (Perceiver's preprocessor reshapes by `np.prod` of a shape: "Could not guard on
        data-dependent expression" under fullgraph), and a graph break runs eagerly instead of failing.
        The traced model recorded no autograd; where the compiled one may be called outside
        `torch.no_grad()` / `torch.inference_mode()` (a call the scope shows outside them, or a model
        that leaves its scope), it is compiled with `.requires_grad_(False)`, so that its outputs carry
        no autograd either (`.numpy()` on them works, no backward graph is compiled); one the scope
        trains (`name.parameters()` to an optimizer, `name.train()`) keeps autograd and train mode, with
        a marker (a trace was inference-only). A trace of a model the scope traced already is that
        compiled model (`torch.compile` of a compiled module is a plain function). The trace took a
        copy: where the code goes on to change the module, call it or run its `forward`/`generate`
        (the CPU reference of a benchmark), the compiled model is built from `copy.deepcopy(module)`;
        so is a wrapper built inline around a module the code runs or moves elsewhere
        (`trace(Prefill(self.base_model), ...)` beside a CPU decode with `self.base_model`).
        A trace or traced-artifact load put into a part of a Diffusers pipeline the unit loads and
        never moves (`pipe.unet.m = torch.jit.load(p)`, no `pipe.to(...)`) gets a marker to move the
        pipeline: the traced part took CPU tensors, the compiled one takes neuron tensors.
        The trace froze the module's Python; the compiled model runs it live, so a process-wide patch
        below the trace (`F.scaled_dot_product_attention = fn`, `SomeAttention.forward = fn`, meant
        for the next trace) now reaches it too: a marker asks to limit the patch.
        The example inputs are not needed to compile any more;
        their shapes become the shapes to pad real inputs to (a marker says so, unless the compiled
        model never leaves its scope and every call there takes the example itself), and the compiled
        model takes and returns tensors on the `neuron` device, where the traced one took CPU
        tensors: where the compiled model is called in the scope that traced it
        (`neuron_model(x)`), its inputs are moved with `.to("neuron")`, and a marker asks to move the
        inputs of its calls elsewhere unless the name never leaves that scope (only assigned, called,
        saved or deleted there). `compiler_args` are neuronx-cc options that `torch.compile` does not
        take: `--auto-cast none` alone is what the native model does; other precision options get a
        marker to express them as the model's dtype or `torch.autocast`, and options that choose no
        precision (`--model-type`, `-O2`) one naming them, to check whether TorchNeuron still needs them. The trace
        created its `compiler_workdir`; code that writes into it next would fail, so a pure path
        expression gets `os.makedirs(path, exist_ok=True)` after the compile, where the unit names that
        path again (a literal's text, a name read again, a part of `os.path.join(...)`) and does not
        create it itself. Compile is lazy: a traced
        model the scope only saves (never calls), assigned to a name, an attribute (`self.neuron`) or
        an item (`models[bs]`), gets one warm-up call under `torch.no_grad()` with
        the example inputs it was traced with, moved to `neuron`, so that the graph is compiled (and
        cached) where the trace compiled it (a marker where the inputs cannot be written again).
        The traced artifact (`traced.save(path)`, `torch.jit.save(traced, path)`) has no native
        form: a Transformers model (loaded with `from_pretrained` in the scope) is saved with
        `traced._orig_mod.save_pretrained(path)`, another module's state dict with
        `torch.save(traced._orig_mod.state_dict(), path)` (and a marker: loading it needs the
        module's class). The loading side, `torch.jit.load(path)`, becomes what the migrated save of
        that path writes (with a marker to run the migrated tracing script first, except where a
        save in the same scope above the load writes it), where the save can be seen: a save of the same path in the same file (the
        same string, or the same name meaning the same there; in any order in the file) of a
        Transformers model -> that model, with the class the file loaded it with (else the class its
        config.json names); of a module whose
        construction the file shows (a `torch.nn` class or a class of the file deriving from one,
        called with literal arguments) -> the module built again, `load_state_dict(torch.load(path))`,
        compiled again. Where the save is in another file (the tracing and serving scripts are often
        two, and the serving one need not import torch_neuronx), the project facts say only that some
        file traces, not what it traced: the load gets a marker (a Transformers load of a state dict
        would fail), except in a project whose tracing scripts are migrated already and save only
        Transformers models (`_orig_mod.save_pretrained(...)` and no trace left: migrate the tracing
        script first). The loaded model's calls get their inputs moved. A load a first run marked
        keeps its marker. A `torch.jit.load` in a project that never traces
        is left alone (a marker when the module imports torch_neuronx: a Neuron artifact made
        elsewhere). `torch_neuronx.DataParallel`, `dynamic_batch` and `move_trace_to_device` get
        a marker.
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
        moves each of them: `traced(*(t.to("neuron") for t in example))`; so does a tuple or list
        of tensors assigned in the scope and passed whole (`traced(inputs)` ->
        `traced(tuple(t.to("neuron") for t in inputs))`: a tuple has no `.to()`), and a container of
        containers gets a marker. An output of the compiled model that reaches `.numpy()`
        (`traced(x)[0].detach().numpy()`, `out.logits.numpy()` for `out = traced(x)`) comes back
        with `.cpu()` first: numpy() takes CPU tensors only. The SageMaker handler shape --
        `model_fn` loads (or traces) the model, `predict_fn(input_data, model)` calls it -- gets the
        same moves at the calls of `model` in `predict_fn` when the load was rewritten, and a marker
        in `predict_fn` when it was left to a person or the model is not called there as that
        parameter.
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
        import torch_neuronx

        example = torch.rand(1, 3, 224, 224)
        # TODO(neuron-migrate NM410): Pad the inputs to the shapes of `example` to avoid a compile per input shape.
        neuron_model = torch.compile(model.to("neuron").eval().requires_grad_(False), backend="neuron", dynamic=False)
        logits = neuron_model(images.to("neuron"))
    """
    caveats = """
        `model.to("neuron")` moves the original module (tracing left it on the CPU): a CPU
        reference run of the same module in another function needs its own copy (in the same
        block the rule compiles a copy). `import torch_neuronx` stays: it is the TorchNeuron plugin
        (PyTorch autoloads it; the seeds keep the import). `compiler_args` are
        dropped: `--auto-cast`/`--auto-cast-type` become a `dtype=` at load time or
        `torch.autocast("neuron", dtype=torch.bfloat16)` by hand (a marker repeats them). A trace
        whose result is not assigned still gets the rewrite and the marker. Inputs are moved only
        at calls of the assigned name in the same function (a call with `*args` gets a marker);
        literal arguments (numbers, strings, None) are left alone, and outputs stay on the
        neuron device except before `.numpy()`. A load keeps a marker where what was saved at its
        path is not known: a save in another file of a run that still traces, a path that is not a
        plain name/string, a module the file does not build with literal arguments (a parameter,
        `pipe.vae.decoder`), a load that is not `name = torch.jit.load(path)` where a module must be
        built. The tracing script gets a marker when no file of the run loads the artifact
        (whatever loads it elsewhere must follow). A warm-up is written only for example inputs that are a tuple
        literal, a name assigned a tuple literal or a torch tensor in the scope, or a torch call. In
        SageMaker build-and-deploy code (it imports sagemaker) a trace whose result is only saved is
        compiled without a move to the neuron device and without a warm-up (the build host may have no
        neuron device; the endpoint's model_fn compiles it), with a marker saying so.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Assign] = self._on_assign
        table[cst.Comparison] = self._on_operands
        table[cst.BinaryOperation] = self._on_operands
        on_reference = table[cst.Attribute]

        def on_attribute(node: cst.Attribute, ctx: PythonContext) -> None:
            on_reference(node, ctx)
            self._on_torchscript_attribute(node, ctx)

        table[cst.Attribute] = on_attribute
        return table

    @staticmethod
    def _on_torchscript_attribute(node: cst.Attribute, ctx: PythonContext) -> None:
        """``traced.code`` / ``traced.graph``: what a TorchScript module (the trace) had, a compiled module has not
        (AttributeError)."""
        if node.attr.value not in TORCHSCRIPT_ATTRIBUTES or not isinstance(node.value, cst.Name):
            return
        name = node.value.value
        state = ctx.local_state()
        if (id(ctx.scope), name) not in (state.get("traced") or {}):
            return
        ctx.marker(node, fitted(f"`{name}.{node.attr.value}` is TorchScript's: drop it, or print the compiled graph "
                                "with TORCH_LOGS=graph_code.",
                                "This is a TorchScript attribute: drop it, or print the compiled graph with "
                                "TORCH_LOGS=graph_code."),
                   detail=f"{name} is a torch.compile'd module now, which has no .{node.attr.value} (TorchScript's "
                          "view of the traced graph); TORCH_LOGS=graph_code or torch._dynamo.explain show what "
                          "dynamo compiled")

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
        traced_arg = _uneval(bound["func"].value)
        state = ctx.local_state()
        if isinstance(traced_arg, cst.Name) and (id(ctx.scope), traced_arg.value) in (state.get("traced") or {}):
            return self._retrace(call, traced_arg.value, ctx)
        problem = not_a_module(bound["func"].value, ctx.scope, ctx)
        if problem:
            return problem
        torch = _torch(ctx, ctx.imports.binding_of(func))
        q = _quote(ctx)
        params = TRACE_PARAMS + TRACE_KEYWORDS
        # the trace was a copy: where the code goes on to move or change the module itself, the compiled
        # model (which shares the module) is built from a copy of it
        root = _uneval(bound["func"].value)
        copy = None
        if (isinstance(root, cst.Name) and (_changed_later(ctx, root.value)
                                            or any(_changed_later(ctx, n) for n in _built_from(ctx, root.value)))) \
                or (isinstance(root, cst.Call) and _wraps_module_used_elsewhere(root, ctx)):
            try:
                copy = _code(ctx.name_for("copy.deepcopy", style="module"))
            except NameClash:
                return "the module is changed after the trace and `copy` is taken"

        trained = _trained_here(call, ctx)
        frozen = "" if trained else _no_autograd(call, ctx)
        mode = "" if trained else ".eval()"
        if trained:
            # the code trains what it traced (its parameters to an optimizer, .train()): a trace was inference-only
            # (the original did not train it either); the compiled module keeps autograd and train mode
            ctx.marker(call, "This traced model is trained below: a trace was inference-only, so check what should "
                             "train (the compiled module does).")

        # a SageMaker build notebook that traces only to save what the endpoint loads: it runs on a host without a
        # neuron device, so the module is not moved (nor warmed up) here; the endpoint's model_fn compiles it
        held0 = _assigned_name(call, ctx) or _assigned_target(call, ctx)
        build_host = bool(_SAGEMAKER.search(ctx.code)) and held0 is not None and _only_saved(
            ctx.code.replace(_code(call), "", 1), held0)
        placed = "" if build_host else f".to({q}neuron{q})"

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, params)
            assert b is not None
            model = b["func"].value
            if (
                isinstance(model, cst.Call) and isinstance(model.func, cst.Attribute)
                and model.func.attr.value == "eval" and not model.args
            ):
                model = model.func.value  # model.eval() -> model.to("neuron").eval()
            module = f"{copy}({_code(model)})" if copy else _code(_atomic(model))
            return _expr(f"{torch}.compile({module}{placed}{mode}{frozen}, "
                         f"backend={q}neuron{q}, dynamic=False)")

        ctx.replace(call, build)
        shown = "" if build_host else '.to("neuron")'
        ctx.finding(call, f"{qual}(model, example_inputs) -> torch.compile(model{shown}.eval(), "
                          "backend=\"neuron\")" + (" of a copy of the module (the code changes or runs it after the trace)"
                                                   if copy else ""))
        if _in_model_fn(ctx):
            ctx.local_state()["model_fn_compiled"] = True  # predict_fn calls the compiled model
        target = _assigned_name(call, ctx)
        saved_only = False
        state = ctx.local_state()
        scope = id(ctx.scope)
        model_arg = _uneval(bound["func"].value)
        if target is not None:
            state.setdefault("traced", {})[(scope, target)] = _code(model_arg)
            example_arg = bound.get("example_inputs")
            if example_arg is not None and isinstance(example_arg.value, cst.Name):
                # the tensors the trace took: `traced(*example)` moves each of them
                state.setdefault("examples", {})[(scope, target)] = example_arg.value.value
            if build_host:
                ctx.marker(call, BUILD_HOST_MARKER)
            else:
                self._warm_up(call, target, bound.get("example_inputs"), ctx)
        else:
            held = _assigned_target(call, ctx)  # `self.neuron = trace(...)`, `models[bs] = trace(...)`
            # `wrapper.m = trace(wrapper.m, ...)` at module level, then only saved in the unit: never called here
            saved_only = (held is not None and isinstance(ctx.scope, cst.Module) and not held.startswith("self.")
                          and _only_saved(ctx.code.replace(_code(call), "", 1), held))
            _pipeline_on_cpu(call, ctx)
            if held is not None:
                state.setdefault("held", set()).add((scope, held))
                if build_host:
                    ctx.marker(call, BUILD_HOST_MARKER)
                else:
                    self._warm_up(call, held, bound.get("example_inputs"), ctx)
            else:
                line = next((n for n in reversed(ctx.stack) if isinstance(n, cst.SimpleStatementLine)), None)
                if line is not None and _timed(line, ctx):
                    # `t0 = time.time(); trace(model, x); took = time.time() - t0`: the compile it timed now happens
                    # at a first call, which nothing here makes
                    ctx.marker(call, "Keep the compiled model and call it once here under torch.no_grad(): the "
                                     "timed compile happens at the first call.")
        example = bound.get("example_inputs")
        shapes = "the traced shapes"
        sliced = False
        if example is not None:
            value = example.value
            parts = [el.value for el in value.elements] if isinstance(value, cst.Tuple) and value.elements else [value]
            names = list(dict.fromkeys(_code(p) for p in parts))
            shapes = "the shapes of " + ", ".join(f"`{n}`" for n in names)
            # `trace(model, batch[:1])`: the example is a slice of the real batch, not the shape to pad to
            scope_code = _scope_code(ctx.scope, ctx)
            sliced = any(isinstance(p, cst.Subscript) or (isinstance(p, cst.Name) and re.search(
                rf"^[ \t]*{p.value}[ \t]*=[ \t]*[\w.]+\[[^\]\n]*:[^\]\n]*\][ \t]*(#.*)?$", scope_code, re.M))
                for p in parts)
        # one marker per action that applies here (device, shapes, precision); the long forms go to the report
        stays = target is not None and _stays_here(ctx.scope, target, ctx, call)
        if build_host:
            pass  # nothing calls it here, and where it is served the marker above says what to do
        elif stays:
            ctx.finding(call, f"inputs of {target}(...) moved to the neuron device: nothing outside this scope calls it")
        elif target is not None:
            ctx.marker(call, fitted(f"Move inputs given to `{target}` outside this scope to the neuron device, outputs back with .cpu().",
                                    "Move this model's inputs outside this scope to the neuron device, outputs back with .cpu()."),
                       detail=f"The model now runs on the neuron device: its calls as `{target}(...)` in this scope get "
                              f"their inputs moved there with .to({q}neuron{q}); the traced model took CPU tensors, so "
                              "inputs given to it anywhere else must be moved, and outputs brought back with .cpu() "
                              "where CPU tensors are needed.")
        elif not saved_only:
            ctx.marker(call, "Move this model's inputs to the neuron device, and its outputs back with .cpu() where needed.",
                       detail="The model now runs on the neuron device; the traced model took CPU tensors.")
        if stays and example is not None and _example_calls_only(ctx.scope, target, example.value):
            pass  # every call takes the example itself: one shape, nothing to pad
        elif (stays and "called" not in set(_uses(_scope_code(ctx.scope, ctx), target))) or saved_only:
            pass  # never called where it is compiled (saved, deleted): the shapes are its loader's business
        elif sliced:
            ctx.marker(call, "Keep the input shapes of the real calls fixed: each new shape compiles again.",
                       detail="torch.compile compiles once per input shape; the example given to the trace here is a "
                              "slice of a batch, so pad the real inputs to the batch shape you run, not to the example.")
        elif _pads_every_tokenization(ctx):
            pass  # every tokenizer call of the unit pads to max_length: the inputs have the traced shape already
        else:
            message = f"Pad the inputs to {shapes} to avoid a compile per input shape."
            ctx.marker(call, message if len(message) <= 120 else "Pad the inputs to the traced shapes to avoid a "
                       "compile per input shape.",
                       detail="torch.compile compiles the model at its first call, once per input shape.")
        result = target if target is not None else _assigned_target(call, ctx)
        patch = _patched_after(call, ctx)
        if patch is not None and not (result is not None and _only_saved(
                _scope_code(ctx.scope, ctx).replace(_code(call), "", 1), result)):
            # the trace froze the module as it was; the compiled one runs its Python live, patches and all
            ctx.marker(call, fitted(
                f"Limit the `{patch}` patch below to the model it was meant for: this compiled model picks it up.",
                "Limit the global patch below to the model it was meant for: this compiled model runs live and picks it up."),
                detail=f"`{patch} = ...` below replaces a function or method for the whole process. The trace had "
                       "recorded this model before that line, so the patch never reached it; the compiled model "
                       "runs its Python at every call, so now it does (a patched attention that takes other "
                       "arguments fails, or computes something else): apply the patch only to the module it was "
                       "written for, e.g. with set_attn_processor or on that instance.")
        dropped = [k for k in TRACE_KEYWORDS if k in bound]
        args_value = bound["compiler_args"].value if "compiler_args" in bound else None
        # neuronx-cc's default (its mixed-precision guide), which options that choose no precision keep: FP32
        # matrix multiplications cast to BF16; a model the scope loads or casts to bf16/fp16 runs them so already
        default_cast = _tokens(_literal_value(args_value, ctx)) if args_value is not None else []
        if (default_cast is not None and not any(t.startswith(PRECISION_OPTIONS) for t in default_cast)
                and not _LOW_PRECISION.search(_scope_code(ctx.scope, ctx))):
            ctx.marker(call, "Run the model in bf16 for the old speed (dtype=torch.bfloat16 or .to(torch.bfloat16)): the trace auto-cast its matmuls.",
                       detail="The trace ran its float32 matmuls in bf16 (neuronx-cc's default auto-cast); the "
                              "compiled model computes them in its own dtype: outputs differ within bf16 rounding.")
        literal = _dead_literal(args_value, ctx) if isinstance(args_value, cst.Name) else None
        if literal is not None:  # `compiler_args = [...]` used only here: dropped with the keyword
            line, args_value, following = literal
            ctx.remove_statement(line)
            if following is not None and any(el.comment is None for el in line.leading_lines):
                ctx.replace(following, with_blank_line)  # the blank line above the removed one stays
            ctx.finding(line, f"{_code(bound['compiler_args'].value)} = ... removed: its only use was the "
                              "trace's compiler_args=")
        tokens = _tokens(args_value) if args_value is not None else None
        if args_value is None or _no_auto_cast(args_value) or tokens == []:
            pass  # no options, only what the native model does, or only logging / scratch-file options
        elif tokens is not None and not any(t.startswith(PRECISION_OPTIONS) for t in tokens):
            flags = " ".join(tokens)
            ctx.marker(call, fitted(f"Check whether TorchNeuron still needs `{flags}`: torch.compile passes no neuronx-cc flags.",
                                    "Check whether TorchNeuron still needs the trace's neuronx-cc options: torch.compile passes none."),
                       detail=f"compiler_args={_code(bound['compiler_args'].value)} were neuronx-cc options of the "
                              "trace, none of them a precision option; torch.compile(backend=\"neuron\") takes no "
                              "compiler options")
        else:
            ctx.marker(call, "Express the trace's compiler_args (neuronx-cc options) as the model's dtype or torch.autocast.",
                       detail=f"compiler_args={_code(bound['compiler_args'].value)} were neuronx-cc options of the "
                              "trace: express --auto-cast choices as the model's dtype or "
                              "torch.autocast(\"neuron\", dtype=...)")
        if dropped:
            ctx.finding(call, f"trace options dropped: {', '.join(dropped)}")
        if "input_output_aliases" in bound:
            # the trace wrote those outputs back into the aliased inputs (state: a KV cache) on every call; the
            # compiled module does not
            ctx.marker(call, "Copy the outputs input_output_aliases named back into their inputs after each call "
                             "(param.copy_(out[j])).",
                       detail=f"input_output_aliases={_code(bound['input_output_aliases'].value)} made the trace "
                              "update those input tensors (state such as a KV cache) from its outputs on every call; "
                              "the compiled module returns the outputs only")
        workdir = bound.get("compiler_workdir")
        line = ctx.statement()
        if workdir is not None and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 \
                and not isinstance(line.body[0], (cst.Return, cst.Raise)) \
                and _pure_path(workdir.value, ctx) and not (isinstance(workdir.value, cst.Name) and workdir.value.value == "None") \
                and _used_elsewhere(workdir.value, ctx):
            # the trace made that folder (os.makedirs): what the script writes there next needs it
            try:
                makedirs = _code(ctx.name_for("os.makedirs", style="module"))
            except NameClash:
                return None
            ctx.insert_after(line, [cst.parse_statement(
                f"{makedirs}({_code(workdir.value)}, exist_ok=True)  # the trace created its compiler_workdir\n")])
            ctx.finding(call, f"{makedirs}({_code(workdir.value)}) added: the trace created its compiler_workdir, "
                              "which the code may write into")
        return None

    def _on_call(self, call: cst.Call, ctx: PythonContext) -> None:
        """torch.jit.save/load in a module that traces with torch_neuronx: a traced Neuron artifact;
        a call of a traced model (a name assigned from trace in the same scope): inputs moved."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "numpy" and not call.args:
            self._numpy(call, ctx)
            return
        if isinstance(func, cst.Name):
            traced = ctx.local_state().get("traced")
            if not (traced and (id(ctx.scope), func.value) in traced):
                traced = self._handler_model(func.value, ctx)
            if traced and (id(ctx.scope), func.value) in traced:
                self._move_inputs(call, func.value, ctx)
            return
        traced = ctx.local_state().get("traced") or {}
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and (id(ctx.scope), func.value.value) in traced:
            self._traced_method(call, func, ctx)
            return
        if isinstance(func, cst.Attribute) and ctx.qualname(func) == "torch.compile" and call.args \
                and isinstance(call.args[0].value, cst.Name) and (id(ctx.scope), call.args[0].value.value) in traced:
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
        if func.attr.value == "save" and (id(ctx.scope), _code(func.value)) in ctx.local_state().get("held", ()):
            ctx.marker(call, "Save the weights (state_dict or save_pretrained) here, not a traced Neuron model.",
                       detail=f"{_code(func.value)} is the compiled model now, which has no .save(): save the weights "
                              "(torch.save of its _orig_mod.state_dict(), or save_pretrained) and compile after loading")
            return
        qual = ctx.qualname(func)
        own_unit = NX in ctx.source  # else a unit shown for its jit.load (project_triggers)
        if qual == "torch.jit.save" and own_unit:
            bound = _bind_args(call, ("m", "f"))
            saved = artifacts(ctx).saves.get(id(call))
            if saved is not None and saved[2].kind == TORCHSCRIPT:
                # a torch.jit.trace / torch.jit.script (what reaches this save: a sibling branch may hold a trace of
                # the same name)
                return
            if bound is not None and set(bound) == {"m", "f"} and isinstance(bound["m"].value, cst.Name) \
                    and (id(ctx.scope), bound["m"].value.value) in traced:
                self._save(call, bound["m"].value.value, bound["f"].value, ctx)
                return
            ctx.marker(call, "Save the weights (state_dict or save_pretrained) here, not a traced Neuron model.",
                       detail="torch.jit.save of a traced Neuron model: TorchNeuron compiles at run time, so save the "
                              "weights instead (model.state_dict() with torch.save, or save_pretrained) and compile "
                              "again after loading")
        elif qual == "torch.jit.load":
            self._load(call, func, own_unit, ctx)


    def _handler_model(self, name: str, ctx: PythonContext) -> dict | None:
        """The SageMaker handler shape: ``model_fn`` loads (or traces) the model, which this rule compiled,
        and ``predict_fn(input_data, model)`` calls it: a call of that parameter there is a call of the
        compiled model (its inputs are moved, its outputs come back with .cpu() before .numpy())."""
        state = ctx.local_state()
        scope = ctx.scope
        if not state.get("model_fn_compiled") or not isinstance(scope, cst.FunctionDef) \
                or scope.name.value != "predict_fn":
            return None
        params = [p.name.value for p in scope.params.params]
        if len(params) < 2 or params[1] != name:
            return None
        state.setdefault("traced", {})[(id(scope), name)] = "\0"
        state.setdefault("handler_calls", set()).add(id(scope))
        return state["traced"]

    def finish(self, ctx: PythonContext) -> None:
        """``predict_fn`` of a unit whose ``model_fn`` now compiles the model, where the model is not called
        as its parameter (unpacked from a tuple, passed on), or whose ``model_fn`` load was left to a person
        (marked): a marker."""
        super_finish = getattr(super(), "finish", None)
        if super_finish is not None:
            super_finish(ctx)
        state = ctx.local_state()
        if not state.get("model_fn_compiled") and not state.get("model_fn_marked"):
            return
        for node in ctx.module.body:
            if isinstance(node, cst.FunctionDef) and node.name.value == "predict_fn" \
                    and id(node) not in state.get("handler_calls", set()):
                first = node.body.body[0] if isinstance(node.body, cst.IndentedBlock) and node.body.body else node
                ctx.marker(first, "Move the inputs of model_fn's model to \"neuron\" here and its outputs back with .cpu().")

    def _on_operands(self, node: cst.Comparison | cst.BinaryOperation, ctx: PythonContext) -> None:
        """``pred == labels`` / ``out - reference`` where ``pred`` is an output of the compiled model (on the neuron
        device now; the traced model returned CPU tensors) and the other operand is a tensor this script never
        moved (on the CPU, as the traced model's outputs were): the output comes back with ``.cpu()``, or a marker
        where the other operand's device is not known (moved by ``.to(...)`` to a device this unit does not name)."""
        if not ctx.local_state().get("traced"):
            return
        operands = [node.left, *(c.comparator for c in node.comparisons)] if isinstance(node, cst.Comparison) \
            else [node.left, node.right]
        outputs = [o for o in operands if _compiled_output(o, ctx)]
        others = [o for o in operands if not any(o is x for x in outputs) and _tensor_like(o)]
        if not outputs or not others:
            return
        if any(_moved(o, ctx) for o in others):
            ctx.marker(node, "Bring the compiled model's output here back with .cpu() if the other operand is on the CPU.")
            return
        for output in outputs:
            ctx.replace(output, cst.Call(func=cst.Attribute(value=_parenthesized(output), attr=cst.Name("cpu"))))
        ctx.finding(node, ".cpu() on the compiled model's output here: it is on the neuron device (the traced one "
                          "returned CPU tensors) and meets a tensor on the CPU")

    def _numpy(self, call: cst.Call, ctx: PythonContext) -> None:
        """``<output of the compiled model>.numpy()``: the output is on the neuron device now (the traced model
        returned CPU tensors), and numpy() refuses a tensor that is not on the CPU: ``.cpu().numpy()``."""
        state = ctx.local_state()
        traced = state.get("traced")
        if not traced:
            return
        if not _compiled_output(call.func.value, ctx):  # type: ignore[attr-defined]
            return

        def build(updated: cst.Attribute) -> cst.Attribute:
            return updated.with_changes(value=cst.Call(func=cst.Attribute(value=updated.value, attr=cst.Name("cpu"))))

        ctx.replace(call.func, build)
        ctx.finding(call, ".cpu() before .numpy(): the compiled model returns tensors on the neuron device (the traced "
                          "one returned CPU tensors), and numpy() takes CPU tensors only")

    def _traced_method(self, call: cst.Call, func: cst.Attribute, ctx: PythonContext) -> None:
        """Methods of the traced artifact: `.save(path)` (a ScriptModule's) and the state dict, which a
        compiled module prefixes with `_orig_mod.`."""
        name, attr = func.value.value, func.attr.value  # type: ignore[attr-defined]
        if attr == "save":
            bound = _bind_args(call, ("f",))
            if bound is not None and "f" in bound and ctx.local_state().get("loaded", {}).get(
                    (id(ctx.scope), name)) is None:
                self._save(call, name, bound["f"].value, ctx)
                return
            ctx.marker(call, (
                f"{name}.save(...) saved the traced Neuron artifact (a TorchScript module): TorchNeuron compiles at "
                f"run time, so save the weights instead (torch.save({name}._orig_mod.state_dict(), path) or "
                "save_pretrained) and compile again after loading"))
        elif attr in ("state_dict", "load_state_dict"):
            ctx.replace(func.value, cst.Attribute(value=func.value, attr=cst.Name("_orig_mod")))
            ctx.finding(call, f"{name}.{attr}() -> {name}._orig_mod.{attr}(): the compiled module's own state dict "
                              "prefixes every key with `_orig_mod.`; the original module's keeps the model's keys")

    def _retrace(self, call: cst.Call, name: str, ctx: PythonContext) -> str | None:
        """``torch_neuronx.trace(traced, ...)`` of a model this scope traced already (now compiled):
        ``torch.compile`` of a compiled module returns a plain function (no ``_orig_mod``, no state dict), so the
        result is the compiled model itself."""
        target = _assigned_name(call, ctx)
        if target is None:
            return f"this traces `{name}`, which is compiled already: use `{name}` itself"
        ctx.replace(call, cst.Name(name))
        state = ctx.local_state()
        scope = id(ctx.scope)
        state["traced"][(scope, target)] = state["traced"][(scope, name)]
        if (scope, name) in state.get("examples", {}):
            state["examples"][(scope, target)] = state["examples"][(scope, name)]
        ctx.finding(call, f"trace of {name} -> {name}: it is the compiled model already (torch.compile of a "
                          "compiled module returns a plain function)")
        return None

    # ------------------------------------------------------------------ the traced artifact
    def _save(self, call: cst.Call, name: str, path: cst.BaseExpression, ctx: PythonContext) -> None:
        """``name.save(path)`` / ``torch.jit.save(name, path)`` of a trace: what the native stack loads. What the
        trace compiled comes from the unit's table (codemods/xla/artifacts.py), which its loads read too."""
        path_code = _code(path)
        if _skipped_while_exists(path, ctx):
            # `if not os.path.exists(p): trace...; save(p)`: the old run's TorchScript file at p keeps the new
            # save from running, and the load after it reads the old file
            ctx.marker(call, fitted(f"Delete the old TorchScript {path_code} before the first run: the check above "
                                    "skips this save while it exists.",
                                    "Delete the old TorchScript file before the first run: the check above skips this "
                                    "save while it exists."))
        saved = artifacts(ctx).saves.get(id(call))
        if saved is not None and saved[2].kind == PRETRAINED:
            ctx.replace(call, _expr(f"{name}._orig_mod.save_pretrained({path_code})"))
            ctx.finding(call, f"the traced artifact of {name} -> {name}._orig_mod.save_pretrained({path_code}): a "
                              "compiled module has no TorchScript form; the Transformers model it wraps is saved")
            if not _project_has(JIT_LOADS, self.project_probes, ctx):
                ctx.marker(call, fitted(f"Load {path_code} with from_pretrained where it is loaded: it is a save_pretrained directory now.",
                                       "Load this path with from_pretrained where it is loaded: it is a save_pretrained directory now."),
                           detail=ARTIFACT_NOTE)
            return
        torch = _torch(ctx, ctx.imports.binding_of(call.func))
        ctx.replace(call, _expr(f"{torch}.save({name}._orig_mod.state_dict(), {path_code})"))
        ctx.finding(call, f"the traced artifact of {name} -> torch.save({name}._orig_mod.state_dict(), {path_code})")
        ctx.marker(call, fitted(f"Load {path_code} with load_state_dict where it is loaded: it holds the state_dict of `{name}` now.",
                               f"Load {path_code} with load_state_dict where it is loaded: it holds a state_dict now.",
                               "Load this path with load_state_dict where it is loaded: it holds a state_dict now."),
                   detail=f"{path_code} now holds the state_dict of the module that `{name}` compiles, no TorchScript "
                          f"file (the module class is needed to load it): {ARTIFACT_NOTE}")

    def _load(self, call: cst.Call, func: cst.Attribute, own_unit: bool, ctx: PythonContext) -> None:
        """``torch.jit.load(path)`` of a traced artifact -> what the migrated save of that path writes: the
        Transformers model (save_pretrained) or a module's state dict. Decided where the save is in this unit
        (its table), or where the project's saves are all migrated save_pretrained calls (the project facts);
        a marker wherever the save cannot be seen: a Transformers load of a state dict would fail."""
        previous = _marked_before(ctx)
        if previous is not None:  # migrated before: the trace that decided is gone now, the marker stays
            ctx.marker(call, previous)
            return
        bound = _bind_args(call, JIT_LOAD_PARAMS)
        path = bound["f"].value if bound is not None and "f" in bound else None
        known = path is not None and plain(path)
        saved = artifacts(ctx).saved_at(path, ctx.scope, ctx) if known else []  # type: ignore[arg-type]
        elsewhere = _saved_elsewhere(self.project_probes, ctx)
        facts = (TRACES, SAVED_PRETRAINED, SAVED_STATE)
        if not saved and not any(_project_has(f, self.project_probes, ctx) for f in facts):
            if own_unit:  # a Neuron artifact traced outside the project (the module imports torch_neuronx)
                ctx.marker(call, f"{LOAD_MARKED}{LOAD_BY_HAND}", detail=ARTIFACT_NOTE)
                _pipeline_on_cpu(call, ctx)
                if _in_model_fn(ctx):
                    ctx.local_state()["model_fn_marked"] = True  # predict_fn gets a marker too
            return  # not an artifact of this project's traces: left alone
        _pipeline_on_cpu(call, ctx)
        patch = _patched_between([sid for sid, (p, _, _) in artifacts(ctx).saves.items() if path is not None
                                  and _same_path(p, path)], call, ctx)
        if patch is not None:
            ctx.marker(call, fitted(
                f"Limit the `{patch}` patch above to the model it was meant for: the model loaded here picks it up.",
                "Limit the global patch above to the model it was meant for: the model loaded here runs live and picks it up."),
                detail=f"`{patch} = ...` above replaces a function or method for the whole process. The traced "
                       "artifact loaded here ran the code it had recorded; the model that replaces it runs its "
                       "Python at every call, patch included: apply the patch only to the module it was written for.")
        if not known or not (saved or elsewhere == PRETRAINED):
            # the save is in another file, or not one of this path: a Transformers load of a state dict (or the
            # reverse) would fail at run time
            unseen = not saved and not artifacts(ctx).traces and not re.search(r"\bsave\s*\(", ctx.code)
            ctx.marker(call, f"{LOAD_MARKED}{ELSEWHERE if unseen else ''}{LOAD_BY_HAND}", detail=ARTIFACT_NOTE)
            if _in_model_fn(ctx):
                ctx.local_state()["model_fn_marked"] = True  # predict_fn gets a marker too
            return
        assert path is not None
        p = _code(path)
        kinds = {t.kind for t in saved}
        if kinds == {TORCHSCRIPT}:
            return  # a torch.jit.trace / torch.jit.script of this unit saved it: still a TorchScript file
        if not saved or kinds == {PRETRAINED}:
            here = ctx.scope  # a save in another function may not run before this load: the marker stays
            saves = [node for node, scope, traced in artifacts(ctx).saves.values() if traced in saved and scope is here]
            loaders = {t.loader for t in saved}
            self._load_pretrained(call, func, path, bool(saves) and _first(ctx.module, saves, call), ctx,
                                  loader=loaders.pop() if len(loaders) == 1 else "")
            return
        ctors = {_code(t.ctor) if t.ctor is not None else None for t in saved}
        if kinds == {MODULE} and len(ctors) == 1 and None not in ctors:
            self._load_state_dict(call, func, path, saved[0], ctx)
            return
        models = ", ".join(f"`{m}`" for m in sorted({t.model for t in saved}))
        if kinds == {MODULE}:
            ctx.marker(call, fitted(f"{LOAD_MARKED}: build {models}, then load_state_dict(torch.load({p})) and compile it.",
                                    f"{LOAD_MARKED}: build {models}, then load_state_dict(torch.load(path)) and compile it.",
                                    f"{LOAD_MARKED}: build the model, then load_state_dict(torch.load(path)) and compile it."))
        else:
            ctx.marker(call, fitted(f"{LOAD_MARKED}: load what the save that ran wrote at {p} (a model or a state_dict).",
                                    f"{LOAD_MARKED}: load what the save that ran wrote there (a model or a state_dict)."))

    def _load_pretrained(self, call: cst.Call, func: cst.Attribute, path: cst.BaseExpression, saved_here: bool,
                         ctx: PythonContext, loader: str = "") -> None:
        """The Transformers model its migrated save writes with save_pretrained: with the class the unit loaded the
        saved model with (``loader``, where that name is the Transformers import of the module), else of the class
        config.json names (``saved_here``: by a save above it in its scope, which runs first; else a person runs
        the tracing script)."""
        anchor = ctx.imports.binding_of(func)
        try:
            near = next((b for b in ctx.imports.all_bindings()
                         if b.qualified == "transformers" or b.qualified.startswith("transformers.")), anchor)
            transformers = _module_local(ctx, "transformers", near)
            torch = _torch(ctx, anchor)
        except NameClash as exc:
            ctx.marker(call, f"{LOAD_MARKED}{LOAD_BY_HAND}", detail=f"{ARTIFACT_NOTE} ({exc})")
            return
        q = _quote(ctx)
        p = _code(path)
        if loader and (ctx.qualname(_expr(loader)) or "").startswith("transformers.") \
                and not ctx.bound_locally(loader.split(".")[0], ctx.stack):
            model = f"{loader}.from_pretrained({p})"  # the class the tracing code loaded it with
        else:
            model = (f"getattr({transformers}, {transformers}.AutoConfig.from_pretrained({p}).architectures[0])"
                     f".from_pretrained({p})")
        ctx.replace(call, _expr(f"{torch}.compile({model}.to({q}neuron{q}).eval(){_no_autograd(call, ctx)}, "
                                f"backend={q}neuron{q}, dynamic=False)"))
        ctx.finding(call, f"torch.jit.load({p}) -> the Transformers model the tracing script saves there with "
                          "save_pretrained (its class from config.json), compiled with torch.compile")
        if _in_model_fn(ctx):
            ctx.local_state()["model_fn_compiled"] = True  # predict_fn calls the compiled model
        if not saved_here:
            ctx.marker(call, f"Run the migrated tracing script of this project first: it saves the model loaded here at {p}.",
                       detail=ARTIFACT_NOTE)
        self._loaded(call, ctx)

    def _load_state_dict(self, call: cst.Call, func: cst.Attribute, path: cst.BaseExpression, saved: Traced,
                         ctx: PythonContext) -> None:
        """``name = torch.jit.load(path)`` of a module traced and saved in this unit: the module built again as
        the unit built it, its state dict loaded from what the migrated save writes there, compiled."""
        ctor = saved.ctor
        assert ctor is not None
        p, built = _code(path), _code(ctor)
        target = _assigned_name(call, ctx)
        line = ctx.stack[-3] if len(ctx.stack) > 2 else None
        if target is None or not isinstance(ctx.parent, cst.Assign) or not isinstance(line, cst.SimpleStatementLine) \
                or len(line.body) != 1 or not rebuildable(ctor, ctx):
            ctx.marker(call, fitted(f"{LOAD_MARKED}: build {built}, then load_state_dict(torch.load({p})) and compile it.",
                                f"{LOAD_MARKED}: build {built}, then load_state_dict(torch.load(path)) and compile it.",
                                f"{LOAD_MARKED}: build the model, then load_state_dict(torch.load(path)) and compile it."))
            return
        try:
            torch = _torch(ctx, ctx.imports.binding_of(func))
        except NameClash as exc:
            ctx.marker(call, f"{LOAD_MARKED}{LOAD_BY_HAND}", detail=f"{ARTIFACT_NOTE} ({exc})")
            return
        q = _quote(ctx)
        ctx.replace(call, ctor.deep_clone())
        ctx.insert_after(line, [
            cst.parse_statement(f"{target}.load_state_dict({torch}.load({p}))\n"),
            cst.parse_statement(f"{target} = {torch}.compile({target}.to({q}neuron{q}).eval(){_no_autograd(call, ctx)}, "
                                f"backend={q}neuron{q}, dynamic=False)\n"),
        ])
        ctx.finding(call, f"torch.jit.load({p}) -> {built} with the state dict the migrated save writes at {p} "
                          "(load_state_dict(torch.load(...))), compiled with torch.compile")
        self._loaded(call, ctx)

    @staticmethod
    def _loaded(call: cst.Call, ctx: PythonContext) -> None:
        """A name assigned the loaded, compiled model: its calls get their inputs moved, like a trace's."""
        target = _assigned_name(call, ctx)
        if target is not None:
            state = ctx.local_state()
            key = (id(ctx.scope), target)
            state.setdefault("traced", {})[key] = "\0"
            state.setdefault("loaded", {})[key] = True

    def _warm_up(self, call: cst.Call, name: str, example: cst.Arg | None, ctx: PythonContext) -> None:
        """A trace compiled where it stood; torch.compile compiles at the first call. A traced model this
        scope only saves (never calls) gets one call with the example inputs, so that the compile (and the
        compile cache) happens as before."""
        scope = ctx.scope
        line = next((n for n in reversed(ctx.stack) if isinstance(n, cst.SimpleStatementLine)), None)
        # the trace's own reading of the module it replaces (`x.m = trace(x.m, ...)`) is no use of the result
        code = _scope_code(scope, ctx).replace(_code(call), "", 1)
        if not _only_saved(code, name) and not (line is not None and _timed(line, ctx)):
            return
        args = _example_call_args(example.value, id(scope), ctx) if example is not None else None
        if line is None or args is None or len(getattr(line, "body", ())) != 1:
            ctx.marker(call, fitted(f"Call {name}(...) once under torch.no_grad() with inputs of the traced shapes to compile it here.",
                                    "Call this model once under torch.no_grad() with inputs of the traced shapes to compile it here."),
                       detail=f"`{name}` is never called here, and torch.compile compiles at the first call (the trace "
                              "compiled at this line): one call with inputs of the traced shapes moved to the neuron "
                              "device compiles (and caches) the graph here as before.")
            return
        torch = _torch(ctx, ctx.imports.binding_of(call.func))
        statement = cst.parse_statement(
            f"with {torch}.no_grad():  # warm-up: torch.compile compiles at the first call (the trace did it here)\n"
            f"    {name}({args})\n")
        ctx.insert_after(line, [statement])
        ctx.finding(call, f"{name}(...) called once with the example inputs: the trace compiled here (it is only "
                          "saved here, or timed), and torch.compile compiles at the first call")

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """`model.encoder.forward_neuron = compiled` where `compiled` wraps `model.encoder`: the compiled
        module (which holds the live module) would sit inside the module it wraps. Also records what the
        warm-up and the saved artifact need: Transformers models loaded, tuples and tensors assigned."""
        _record(node, ctx)
        traced = ctx.local_state().get("traced")
        value = node.value
        if traced and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            # the name holds something else from here on (the latest assignment wins, as in the artifact table):
            # `traced = torch.jit.trace(...)` in the else branch of a torch_neuronx one; a trace or load assigned
            # here registers the name again when its call is handled (after this). `x = f(x)` keeps it
            name = node.targets[0].target.value
            key = (id(ctx.scope), name)
            if key in traced and not any(isinstance(n, cst.Name) and n.value == name for n in walk(value)):
                del traced[key]
        root = _output_root(value)
        if isinstance(root, cst.Call) and isinstance(root.func, cst.Name):
            traced = self._handler_model(root.func.value, ctx) or traced  # `out = model(...)` in predict_fn
        if traced and _compiled_output(value, ctx):
            # `out = traced(x)` / `a, b = traced(x)`: outputs of the compiled model (on the neuron device)
            outputs = ctx.local_state().setdefault("outputs", set())
            for t in node.targets:
                names = [t.target] if isinstance(t.target, cst.Name) else [
                    e.value for e in t.target.elements if isinstance(e.value, cst.Name)] \
                    if isinstance(t.target, (cst.Tuple, cst.List)) else []
                outputs.update((id(ctx.scope), n.value) for n in names)
        if not traced or not isinstance(node.value, cst.Name):
            return
        wrapped = traced.get((id(ctx.scope), node.value.value))
        if wrapped is None:
            return
        for t in node.targets:
            target = _code(t.target)
            if isinstance(t.target, cst.Attribute) and target.startswith(wrapped + "."):
                ctx.marker(node, f"Compile a copy of `{wrapped}` (copy.deepcopy) or the callable forward uses: it would contain itself.", detail=(
                    f"`{target} = {node.value.value}` puts the compiled model inside the module it compiles: "
                    f"torch.compile keeps the live `{wrapped}` (a trace was a separate artifact), so `{wrapped}` would "
                    f"contain itself and a forward that calls `{target}` recurses; compile the callable that forward "
                    f"uses instead, or assign to a copy of the module (copy.deepcopy) before compiling"))

    def _move_inputs(self, call: cst.Call, name: str, ctx: PythonContext) -> None:
        state = ctx.local_state()
        scope = id(ctx.scope)
        example = (state.get("examples") or {}).get((scope, name))
        containers = {k[1] for k in state.get("tuples", set()) if k[0] == scope}
        nested = {k[1] for k in state.get("nested", set()) if k[0] == scope}
        if any(isinstance(a.value, cst.Name) and a.value.value in nested for a in call.args):
            ctx.marker(call, f"Move each tensor in the nested containers given to {name}(...) to the neuron device by hand.")
            return
        if any(arg.star for arg in call.args):
            if len(call.args) == 1 and call.args[0].star == "*" and isinstance(call.args[0].value, cst.Name) \
                    and call.args[0].value.value in (example, *containers):
                example = call.args[0].value.value
                q = _quote(ctx)
                moved = _expr(f"(t.to({q}neuron{q}) for t in {example})")
                ctx.replace(call.args[0], lambda updated: updated.with_changes(value=moved))
                ctx.finding(call, f"each example input of {name}(*{example}) moved to the neuron device")
                return
            ctx.marker(call, f"Move each tensor unpacked into {name}(...) with * / ** to the neuron device by hand.")
            return
        scalars = _scalar_names(ctx)
        # (decided here, with the call's scope: the edit below is built later, outside any scope)
        placed = {arg.value.value for arg in call.args if isinstance(arg.value, cst.Name) and _placed(arg.value, ctx)}
        if not any(_movable(arg.value) and not _scalar(arg.value, scalars)
                   and not (isinstance(arg.value, cst.Name) and arg.value.value in placed) for arg in call.args):
            return
        q = _quote(ctx)
        lists = {k[1] for k in state.get("lists", set()) if k[0] == scope}

        def move(value: cst.BaseExpression) -> cst.BaseExpression:
            if _scalar(value, scalars):
                return value  # a number (a length, a bound): it has no .to(), and the compiled model takes it as it is
            if isinstance(value, cst.Name) and value.value in placed:
                return value  # the script put it on its device itself (`x = x.to(device)`, `torch.randn(..., device=d)`)
            if isinstance(value, cst.Name) and value.value in containers:
                # a tuple (list) of tensors has no .to(): each element moves
                if value.value in lists:
                    return _expr(f"[t.to({q}neuron{q}) for t in {value.value}]")
                return _expr(f"tuple(t.to({q}neuron{q}) for t in {value.value})")
            return _to_neuron(value, q)

        def build(updated: cst.Call) -> cst.BaseExpression:
            return updated.with_changes(args=[arg.with_changes(value=move(arg.value)) for arg in updated.args])

        ctx.replace(call, build)
        ctx.finding(call, f"inputs of the compiled model {name}(...) moved to the neuron device")


#: what a traced TorchScript module has and a compiled one has not: its code and graphs
TORCHSCRIPT_ATTRIBUTES = ("code", "graph", "inlined_graph", "code_with_constants", "graph_for", "original_name")


#: a load or cast to a 16-bit dtype in the code: `dtype=torch.bfloat16`, `.to(torch.float16)`, `.half()`
_LOW_PRECISION = re.compile(r"\b(?:torch_)?dtype\s*=\s*(?:torch\.)?(?:bfloat16|float16|half)\b"
                            r"|\.(?:bfloat16|half)\(\s*\)|\.to\([^)]*\b(?:torch\.)?(?:bfloat16|float16)\b")


#: calls that test whether a path exists (``os.path.exists(p)``, ``Path(p).exists()``, ``p.is_file()``...)
_EXISTS = ("exists", "isfile", "isdir", "is_file", "is_dir")


def _used_elsewhere(path: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether the unit refers to the trace's compiler_workdir other than in the trace (and does not create it
    itself): a later write into that folder needs the folder the trace made. A string literal counts where its
    text occurs again; a name where it is read again; another expression where its code occurs again."""
    code = ctx.code  # (comments blanked)
    if isinstance(path, cst.Call) and path.args:  # os.path.join(WORKDIR, "cc"): where its parts are used again
        return any(_used_elsewhere(a.value, ctx) for a in path.args if not a.star)
    if isinstance(path, cst.SimpleString):
        text = path.evaluated_value
        if not isinstance(text, str) or not text.strip("./"):
            return False
        needle = text.rstrip("/")
        found = code.count(needle) > 1
    elif isinstance(path, cst.Name):
        # read again after the trace's own statement, in its scope (assignments do not count)
        statement = ctx.statement()
        scope_code = _scope_code(ctx.scope, ctx)
        at = scope_code.find(_code(statement)) if statement is not None else -1
        rest = scope_code[at + len(_code(statement)):] if at >= 0 else ""
        found = any(use not in ("assigned", "comment") for use in _uses(rest, path.value))
        needle = path.value
    else:
        needle = _code(path)
        found = code.count(needle) > 1
    if not found:
        return False
    made = re.compile(r"(?:makedirs|mkdir)\(\s*" + re.escape(needle) if not isinstance(path, cst.SimpleString) else
                      r"(?:makedirs|mkdir)\(\s*[\"']" + re.escape(needle))
    return not made.search(code) and not re.search(r"mkdir\s+(?:-p\s+)?[\"']?" + re.escape(needle), code)


def _same_path(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    if isinstance(a, cst.SimpleString) and isinstance(b, cst.SimpleString):
        return a.evaluated_value == b.evaluated_value
    return _code(a) == _code(b)


def _skipped_while_exists(path: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether the statement being handled runs only while ``path`` does not exist: it sits in the body of an
    ``if`` whose test asks whether that very path exists (the cache pattern ``if not os.path.exists(p):``)."""
    for anc in ctx.stack:
        if not isinstance(anc, cst.If):
            continue
        for node in walk(anc.test):
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                    and node.func.attr.value in _EXISTS):
                continue
            target = node.args[0].value if node.args else node.func.value
            if isinstance(target, cst.Call) and target.args and not node.args:  # Path(p).exists()
                target = target.args[0].value
            if _same_path(target, path):
                return True
    return False


def _timed(line: cst.SimpleStatementLine, ctx: PythonContext) -> bool:
    """Whether the statement after ``line`` reads a clock and one before it does (in its block or one around it,
    up to the function): the trace on this line was timed (a compile-time metric), so the compile must still
    happen on this line."""
    found = block_of(ctx, line)
    if found is None:
        return False
    body, k = found
    # the next statement reads the clock (the compile's end), and one before it does (its start), maybe in a
    # block around it: `t0 = time.time()` / `try:` / `m = trace(...)` / `took = time.time() - t0`
    return k + 1 < len(body) and reads_clock(body[k + 1]) and clock_after(ctx, line)


def _literal_value(value: cst.BaseExpression, ctx: PythonContext) -> cst.BaseExpression:
    """``value``, or the literal a name of it holds where :func:`_dead_literal` finds one."""
    if isinstance(value, cst.Name):
        found = _dead_literal(value, ctx)
        return found[1] if found is not None else value
    return value


def _dead_literal(name: cst.Name, ctx: PythonContext) -> tuple[cst.SimpleStatementLine, cst.BaseExpression, cst.CSTNode | None] | None:
    """``name = <literal>`` on a line of its own in the body of the current scope, where the name occurs
    nowhere else in the unit than there and at the call being handled: (that line, the literal, the next
    statement)."""
    scope = ctx.scope
    class Uses(cst.CSTVisitor):
        count = 0

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # not the keyword
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # not the attribute name
            return False

        def visit_Name(self, node: cst.Name) -> None:
            self.count += node.value == name.value

    uses = Uses()
    ctx.module.visit(uses)
    if uses.count != 2:
        return None
    body = scope.body.body if isinstance(scope, cst.FunctionDef) and isinstance(scope.body, cst.IndentedBlock) \
        else scope.body if isinstance(scope, cst.Module) else ()
    literals = (cst.List, cst.Tuple, cst.Dict, cst.SimpleString, cst.ConcatenatedString)
    for k, line in enumerate(body):
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(line.body[0], cst.Assign):
            assign = line.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) \
                    and assign.targets[0].target.value == name.value and isinstance(assign.value, literals):
                return line, assign.value, (body[k + 1] if k + 1 < len(body) else None)
    return None


def _project_has(fact: str, probes: dict[str, tuple[str, ...]], ctx: PythonContext) -> bool:
    """A project fact, or the same fact of this unit alone (a unit migrated outside a project run)."""
    return fact in ctx.facts or any(p in ctx.source for p in probes[fact])


def _marked_before(ctx: PythonContext) -> str | None:
    """The load marker a first run left above the statement being handled (a second run repeats it)."""
    statement = ctx.statement()
    for line in getattr(statement, "leading_lines", ()):
        comment = line.comment.value if line.comment is not None else ""
        if "neuron-migrate NM410" in comment and LOAD_MARKED in comment:
            return comment[comment.index(LOAD_MARKED):].rstrip()
    return None


def _saved_elsewhere(probes: dict[str, tuple[str, ...]], ctx: PythonContext) -> str | None:
    """PRETRAINED when what the project saves of its traces is known to be Transformers models only: its
    tracing scripts are migrated already (no trace left) and every migrated save is a save_pretrained. The
    facts are run-wide substrings: they cannot tell which path holds what, so any other mix is None."""
    if _project_has(SAVED_PRETRAINED, probes, ctx) and not _project_has(SAVED_STATE, probes, ctx) \
            and not _project_has(TRACES, probes, ctx):
        return PRETRAINED
    return None








def _record(node: cst.Assign, ctx: PythonContext) -> None:
    """Names of this scope assigned a tuple/list literal or a torch tensor."""
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
        return
    state = ctx.local_state()
    key = (id(ctx.scope), node.targets[0].target.value)
    value = node.value
    for kind in ("tuples", "tensors", "lists", "nested"):
        state.setdefault(kind, set()).discard(key)  # the latest assignment wins
    if isinstance(value, (cst.Tuple, cst.List)) and value.elements \
            and not any(isinstance(e, cst.StarredElement) for e in value.elements):
        state["tuples"].add(key)
        if isinstance(value, cst.List):
            state["lists"].add(key)
        if any(isinstance(e.value, (cst.Tuple, cst.List, cst.Dict)) or isinstance(e.value, cst.Name)
               and (key[0], e.value.value) in state["tuples"] for e in value.elements):
            state["nested"].add(key)  # a container of containers: elementwise .to() would not do
    elif _torch_value(value, ctx):
        state["tensors"].add(key)


#: torch.<name> calls that do not return a tensor
NOT_TENSORS = ("nn", "jit", "compile", "load", "device", "optim", "utils", "cuda", "distributed", "manual_seed",
               "no_grad", "inference_mode", "autocast", "Generator")


def _torch_value(value: cst.BaseExpression, ctx: PythonContext) -> bool:
    """A call of a ``torch.*`` function (``torch.rand(1, 8)``, ``torch.zeros(...)``): a tensor."""
    value = unchain(value)
    if not isinstance(value, cst.Call):
        return False
    qual = ctx.qualname(value.func) or ""
    return qual.startswith("torch.") and qual.split(".")[1] not in NOT_TENSORS




def _name_re(name: str) -> re.Pattern[str]:
    """The name ``name`` (or a target expression, ``self.model``, ``models[bs]``) as a word of code (not an attribute
    ``x.name``, not a longer name)."""
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")


def _uses(code: str, name: str):
    """How each occurrence of the name ``name`` in ``code`` uses it: "assigned" (``name =``, ``name: T =``),
    "saved" (``name.save(``, ``torch.jit.save(name``), "called" (``name(``), "deleted", "comment" or None
    (anything else: returned, passed on, stored, read)."""
    for m in _name_re(name).finditer(code):
        after, before = code[m.end():m.end() + 40], code[max(0, m.start() - 40):m.start()]
        if re.match(r"\s*(:[^=\n]*)?=(?!=)", after):
            yield "assigned"
        elif re.match(r"\s*\.\s*save\s*\(", after) or re.search(r"jit\s*\.\s*save\s*\(\s*$", before):
            yield "saved"
        elif re.match(r"\s*\(", after):
            yield "called"
        elif re.search(r"\bdel\s+$", before):
            yield "deleted"
        elif re.search(r"\b(?:async_load|lazy_load)\s*\(\s*$", before):
            yield "loaded"  # torch_neuronx.async_load(name): removed with the trace (DROPPED)
        elif re.search(r"#[^\"'\n]*$", code[code.rfind("\n", 0, m.start()) + 1:m.start()]):
            yield "comment"  # (the whole line before it: a long comment starts more than 40 characters back)
        else:
            yield None


def _only_saved(code: str, name: str) -> bool:
    """``name`` is only assigned and saved in ``code`` (never called, returned or passed on; the caller leaves out
    the trace that reads it, ``x.m = trace(x.m, ...)``)."""
    uses = set(_uses(code, name))
    # deleted after the save, handed to async_load (removed with the trace) or named in a comment: still never run
    return bool(uses - {"comment"}) and uses <= {"assigned", "saved", "deleted", "loaded", "comment"}


def _example_call_args(example: cst.BaseExpression, scope: int, ctx: PythonContext) -> str | None:
    """The arguments of a warm-up call with the trace's example inputs on the neuron device, or None
    when they cannot be written safely (an input of unknown kind, a dict, a call that is not torch's)."""
    q = _quote(ctx)
    state = ctx.local_state()

    def tensor(expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name):
            return (scope, expr.value) not in state.get("tuples", set())
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            return plain(expr)
        return _torch_value(expr, ctx)

    if isinstance(example, (cst.Tuple, cst.List)):
        elements = example.elements
        if not elements or any(isinstance(e, cst.StarredElement) or not tensor(e.value) for e in elements):
            return None
        return ", ".join(_code(_to_neuron(e.value, q)) for e in elements)
    if isinstance(example, cst.Name):
        key = (scope, example.value)
        if key in state.get("tuples", set()):
            return f"*(t.to({q}neuron{q}) for t in {example.value})"
        if key in state.get("tensors", set()):
            return _code(_to_neuron(example, q))
        return None
    if _torch_value(example, ctx):
        return _code(_to_neuron(example, q))
    return None


def _uneval(model: cst.BaseExpression) -> cst.BaseExpression:
    """``model`` of ``model.eval()`` (what the rewrite compiles)."""
    if isinstance(model, cst.Call) and isinstance(model.func, cst.Attribute) and model.func.attr.value == "eval" \
            and not model.args:
        return model.func.value
    return model


def _output_root(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The call or name a chain of attributes, subscripts, tensor methods and ``torch.<function>(tensor, ...)``
    calls starts from (None once the chain went through ``.cpu()`` / ``.to(...)`` / ``.tolist()``: no device
    tensor any more)."""
    while True:
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        elif isinstance(expr, cst.Call) and _torch_function(expr.func) and expr.args and expr.args[0].keyword is None \
                and not expr.args[0].star:
            expr = expr.args[0].value  # torch.argmax(out, dim=1): on out's device
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value in ("cpu", "to", "numpy", "tolist", "item"):
                return None
            expr = expr.func.value
        else:
            return expr


def _torch_function(func: cst.BaseExpression) -> bool:
    """``torch.argmax`` / ``torch.nn.functional.softmax``: a function of the torch namespace, as written."""
    while isinstance(func, cst.Attribute):
        func = func.value
        if isinstance(func, cst.Name):
            return func.value == "torch"
    return False


def _tensor_like(expr: cst.BaseExpression) -> bool:
    """An operand that may be a tensor: not a literal number, string or None."""
    if isinstance(expr, _LITERALS):
        return False
    if isinstance(expr, cst.UnaryOperation):
        return _tensor_like(expr.expression)
    return not (isinstance(expr, cst.Name) and expr.value in ("None", "True", "False"))


def _moved(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """``expr`` went through ``.to(...)`` / ``.cuda()`` / ``.neuron()`` to a device other than "cpu" (a literal, or
    a name every assignment of this scope and the module gives that literal)."""
    for node in walk(expr):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("to", "cuda", "neuron", "xla"):
            first = node.args[0].value if node.args else None
            if not _cpu(first, ctx):
                return True
    return False


def _cpu(expr: cst.BaseExpression | None, ctx: PythonContext) -> bool:
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value == "cpu"
    if not isinstance(expr, cst.Name):
        return False
    values = assigned_values(ctx, expr.value)
    return bool(values) and all(isinstance(v, cst.SimpleString) and v.evaluated_value == "cpu" for v in values)


def _parenthesized(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` as the receiver of a method call (``(a + b).cpu()``)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _compiled_output(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """``expr`` is (a part of) what a compiled model of this scope returned: ``traced(x)``, ``traced(x)[0].logits``,
    ``out.detach()`` for ``out = traced(x)``; not once it went through ``.cpu()`` / ``.to(...)`` / ``.tolist()``."""
    state = ctx.local_state()
    scope = id(ctx.scope)
    expr = _output_root(expr)
    if expr is None:
        return False
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        return (scope, expr.func.value) in (state.get("traced") or {})
    return isinstance(expr, cst.Name) and (scope, expr.value) in state.get("outputs", set())


def _in_model_fn(ctx: PythonContext) -> bool:
    """The node being handled is in a module-level ``def model_fn`` (the SageMaker handler that loads the model)."""
    scope = ctx.scope
    return isinstance(scope, cst.FunctionDef) and scope.name.value == "model_fn" and scope in ctx.module.body




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


def _assigned_target(call: cst.Call, ctx: PythonContext) -> str | None:
    """The code of the target of ``<attribute or subscript> = <call>`` (one target), else None."""
    parent = ctx.stack[-3] if len(ctx.stack) > 2 and ctx.stack[-2] is call else ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, (cst.Attribute, cst.Subscript)):
        return _code(parent.targets[0].target)
    return None


_LITERALS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


#: names that hold a number by convention (a length, a size, a count, a bound): `seq_len`, `max_len`, `batch_size`,
#: `num_beams`, `clip_max`, `eps`; a tensor of lengths is written in the plural (`lengths`, `x_lens`) and moves
_SCALAR_NAME = re.compile(r"^(?:\w+_)?(?:len|length|size|count|dim|idx|index|step|max|min|eps|scale|temperature|seed)$"
                          r"|^(?:num|n|max|min|clip)_\w+$|^[nkij]$|^top_[kp]$")
#: calls whose result is a Python number
_NUMBER_CALLS = ("int", "float", "len", "round", "abs", "math.ceil", "math.floor", "math.sqrt")


def _number(value: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether ``value`` computes a Python number (literals, arithmetic of them, ``int(...)``, ``len(...)``)."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _number(value.expression, ctx)
    if isinstance(value, cst.BinaryOperation):
        return _number(value.left, ctx) and _number(value.right, ctx)
    if isinstance(value, cst.Call):
        name = _code(value.func)
        return name in _NUMBER_CALLS and ctx.qualname(value.func) in (None, name)
    return False


def _scalar_names(ctx: PythonContext) -> frozenset[str]:
    """The names the current scope (or the module) assigns only Python numbers to."""
    scope = ctx.scope
    key = f"NM410.scalars.{id(scope)}"
    cached = ctx.scratch.get(key)
    if cached is not None:
        return cached
    numbers: set[str] = set()
    others: set[str] = set()
    for body in {id(b): b for b in (scope, ctx.module)}.values():
        for node in walk(body.body if isinstance(body, cst.FunctionDef) else body):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                (numbers if _number(node.value, ctx) else others).add(node.targets[0].target.value)
            elif isinstance(node, cst.For) and isinstance(node.target, cst.Name) and isinstance(node.iter, cst.Call) \
                    and _code(node.iter.func) == "range":
                numbers.add(node.target.value)
    found = ctx.scratch[key] = frozenset(numbers - others)
    return found


def _scalar(value: cst.BaseExpression, scalars: frozenset[str]) -> bool:
    """A value that is a Python number, not a tensor: a number literal, a name assigned only numbers, or a
    name that by convention holds one (``seq_len``, ``clip_max``): no ``.to()`` for it."""
    if isinstance(value, (cst.Integer, cst.Float)) or (
            isinstance(value, cst.UnaryOperation) and isinstance(value.expression, (cst.Integer, cst.Float))):
        return True
    return isinstance(value, cst.Name) and (value.value in scalars or bool(_SCALAR_NAME.match(value.value)))


def _placed(value: cst.BaseExpression, ctx: PythonContext) -> bool:
    """A name every assignment of which puts a tensor on a device the script names (``x = x.to(device)``,
    ``torch.randn(..., device=device)``; not "cpu"): the device the script runs on, neuron where it ran on XLA, the
    other branch's device elsewhere (moving it to "neuron" would break a CUDA/CPU path sharing the call)."""
    if not isinstance(value, cst.Name):
        return False
    values = assigned_values(ctx, value.value)

    def places(v: cst.BaseExpression) -> bool:
        if not isinstance(v, cst.Call):
            return False
        if isinstance(v.func, cst.Attribute) and v.func.attr.value in ("to", "cuda") and v.args:
            return not _cpu(v.args[0].value, ctx)
        device = next((a.value for a in v.args if a.keyword is not None and a.keyword.value == "device"), None)
        return device is not None and not _cpu(device, ctx)

    return bool(values) and all(places(v) for v in values)


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


#: neuronx-cc options that choose a precision (the rest, `--model-type`, `-O2`, ..., do not)
PRECISION_OPTIONS = ("--auto-cast", "--fp32-cast", "--enable-mixed-precision", "--fast-math")


#: neuronx-cc options about the compiler's own logs and scratch files, with the value each takes: nothing of the
#: compiled model depends on them, so they go with the trace
NO_EFFECT_OPTIONS = ("--verbose", "--logfile", "--temp-dir")


def _tokens(value: cst.BaseExpression) -> list[str] | None:
    """The words of literal compiler_args (a string, a list or tuple of strings), ``=`` split, without the
    options of :data:`NO_EFFECT_OPTIONS` and their values; else None."""
    words: list[str] = []
    if isinstance(value, (cst.SimpleString, cst.FormattedString)):
        words = _words(value)
    elif isinstance(value, (cst.List, cst.Tuple)):
        for el in value.elements:
            if not isinstance(el.value, (cst.SimpleString, cst.FormattedString)):
                return None
            words.extend(_words(el.value))
    else:
        return None
    tokens: list[str] = []
    skip = False
    for w in words:
        if skip and not w.startswith("-"):
            skip = False
            continue
        skip = w in NO_EFFECT_OPTIONS
        if not skip:
            if _HOLE in w:
                return None  # a computed option (f"--{flag}"): not known
            tokens.append(w)
    return tokens


#: what stands for a computed part of an f-string option (`f"--temp-dir={workdir}"`) in its words
_HOLE = "\0"


def _words(string: cst.SimpleString | cst.FormattedString) -> list[str]:
    """The words of one compiler_args string, ``=`` split; a computed part of an f-string becomes :data:`_HOLE`."""
    if isinstance(string, cst.SimpleString):
        text = str(string.evaluated_value)
    else:
        text = "".join(part.value if isinstance(part, cst.FormattedStringText) else _HOLE for part in string.parts)
    return text.replace("=", " ").split()


def _no_auto_cast(value: cst.BaseExpression) -> bool:
    """True for compiler_args that only ask for no auto-casting (what the native model does)."""
    return _tokens(value) == ["--auto-cast", "none"]


#: calls a path expression may make and still be evaluated again without effect
_PATH_CALLS = ("os.path.join", "os.path.abspath", "os.path.expanduser", "str", "pathlib.Path")


def _pure_path(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """A path expression that evaluates the same again: names, attributes, strings, ``/`` and ``+``, and
    calls of :data:`_PATH_CALLS` only."""
    todo: list[cst.CSTNode] = [expr]
    while todo:
        n = todo.pop()
        if isinstance(n, cst.Call):
            if (ctx.qualname(n.func) or (n.func.value if isinstance(n.func, cst.Name) else "")) not in _PATH_CALLS:
                return False
        elif isinstance(n, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda, cst.Subscript)):
            return False
        todo.extend(n.children)
    return True


def _stays_here(scope: cst.CSTNode, name: str, ctx: PythonContext, trace: cst.Call | None = None) -> bool:
    """Whether the compiled model ``name`` is used only in ``scope`` (a function, or the module outside its
    functions and classes), where its calls get their inputs moved: assigned, called, saved or deleted there,
    never returned, passed on, stored elsewhere or read by a nested function (the ``trace`` call that builds it,
    ``name = trace(name, ...)``, passes on the module it replaces, not the model)."""
    if isinstance(scope, cst.Module):
        nested = [stmt for stmt in scope.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))]
    else:
        nested = [n for n in _nested_defs(scope) if n is not scope]
    if any(use != "comment" for n in nested for use in _uses(_scope_code(n, ctx), name)):
        return False  # a nested function or class reads it (a comment naming it does not)
    code = _scope_code(scope, ctx)
    return None not in set(_uses(code.replace(_code(trace), "", 1) if trace is not None else code, name))


def _example_calls_only(scope: cst.CSTNode, name: str, example: cst.BaseExpression) -> bool:
    """Whether the model ``name`` is called in ``scope``, always with the trace's example inputs themselves
    (``name(example)``, ``name(*example)``, ``name(a, b)`` for ``(a, b)``): it only ever sees their shapes."""
    parts = [el.value for el in example.elements] if isinstance(example, cst.Tuple) and example.elements else [example]
    want = [_code(p) for p in parts]
    calls = [c for c in _calls(scope) if isinstance(c.func, cst.Name) and c.func.value == name]
    for c in calls:
        if any(a.keyword is not None or a.star == "**" for a in c.args):
            return False
        given = [("*" if a.star == "*" else "") + _code(a.value) for a in c.args]
        if given != want and not (isinstance(example, cst.Name) and given == [f"*{example.value}"]):
            return False
    return bool(calls)


def _first(module: cst.Module, earlier: list[cst.CSTNode], node: cst.CSTNode) -> bool:
    """Whether one of ``earlier`` comes before ``node`` in the module's text (a cell above, a line above)."""
    ids = {id(n) for n in earlier}
    todo: list[cst.CSTNode] = [module]
    while todo:
        n = todo.pop()
        if id(n) in ids:
            return True
        if n is node:
            return False
        todo.extend(reversed(n.children))
    return False


#: a Diffusers pipeline loaded into a name: `pipe = StableDiffusionPipeline.from_pretrained(...)`
_PIPELINE_LOAD = r"^[ \t]*{name}[ \t]*=[ \t]*[\w.]*Pipeline\w*\.from_pretrained\("


def _pipeline_on_cpu(call: cst.Call, ctx: PythonContext) -> None:
    """A trace or traced-artifact load put into a part of a Diffusers pipeline the unit loads (`pipe.unet.m =
    torch.jit.load(p)`), in a unit that never moves the pipeline: the traced part took CPU tensors, the compiled one
    takes neuron tensors, so the pipeline around it must move too (one marker per pipeline)."""
    held = _assigned_target(call, ctx)
    root = held.split(".")[0] if held is not None and "." in held else None
    if root is None or root == "self" or not root.isidentifier():
        return
    code = ctx.code
    if re.search(_PIPELINE_LOAD.format(name=re.escape(root)), code, re.M) is None \
            or re.search(rf"(?<![\w.]){re.escape(root)}\s*\.\s*to\s*\(", code) is not None:
        return
    seen = ctx.local_state().setdefault("pipelines_marked", set())
    if root in seen:
        return
    seen.add(root)
    ctx.marker(call, fitted(
        f"Move `{root}` to the neuron device (`{root}.to(\"neuron\")`): its compiled parts take neuron tensors now.",
        "Move this pipeline to the neuron device (.to(\"neuron\")): its compiled parts take neuron tensors now."),
        detail="The traced parts took and returned CPU tensors, so the pipeline around them could stay on the CPU; the "
               "compiled parts run on the neuron device, and the pipeline feeds them its own tensors: move it (after "
               "putting the parts in) so that every part and every input is on one device.")


def _patch_table(ctx: PythonContext) -> tuple[dict[int, int], list[tuple[int, str]]]:
    """(the position of each node of the unit in the text's order, [(position, target)] of its assignments to an
    attribute of an imported module or class that change what models compute (:func:`_replaces_computation`):
    `F.scaled_dot_product_attention = fn`, `CLIPAttention.forward = fn`, patches for the whole process, which a live
    compiled model picks up and a traced one did not)."""
    key = "_nm410_patches"
    if key not in ctx.scratch:
        order = {id(n): i for i, n in enumerate(walk(ctx.module))}  # pre-order: the text's order

        def patches_in(node: cst.CSTNode) -> list[tuple[cst.CSTNode, str]]:
            return [(n, _code(t.target)) for n in walk(node) if isinstance(n, cst.Assign) for t in n.targets
                    if isinstance(t.target, cst.Attribute) and _imported_root(t.target.value, ctx)
                    and _replaces_computation(t.target, ctx)]

        patches = [(order[id(n)], target) for n, target in patches_in(ctx.module)]
        # a function of the unit that patches (`def apply_override(): F.sdpa = fn`) patches where it is called
        patching = {f.name.value: found[0][1] for f in ctx.module.body if isinstance(f, cst.FunctionDef)
                    for found in [patches_in(f)] if found}
        if patching:
            patches += [(order[id(n)], patching[n.func.value]) for n in walk(ctx.module)
                        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in patching]
            patches.sort()
        ctx.scratch[key] = (order, patches)
    return ctx.scratch[key]


def _patched_after(call: cst.Call, ctx: PythonContext) -> str | None:
    """The target of the first process-wide patch below the trace ``call`` (:func:`_patch_table`)."""
    order, patches = _patch_table(ctx)
    at = order.get(id(call))
    return next((target for index, target in patches if at is not None and index > at), None)


def _patched_between(save_ids: list[int], load: cst.Call, ctx: PythonContext) -> str | None:
    """The target of a process-wide patch below one of the saves ``save_ids`` (the traces this load reads were
    frozen before it) and above the load: the rebuilt live model picks it up."""
    order, patches = _patch_table(ctx)
    at = order.get(id(load))
    saved = [order[i] for i in save_ids if i in order]
    if at is None or not saved:
        return None
    return next((target for index, target in reversed(patches) if min(saved) < index < at), None)


def _replaces_computation(target: cst.Attribute, ctx: PythonContext) -> bool:
    """A patch that changes what every model computes: a torch function (`F.scaled_dot_product_attention`), or a
    class's whole call (`AttnProcessor.__call__`, `Attention.forward`); a helper method patched on one library's
    class (`Attention.get_attention_scores`) reaches only that library's modules, and is left alone."""
    return (ctx.qualname(target) or "").startswith("torch.") or target.attr.value in ("__call__", "forward")


def _imported_root(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """``expr`` names an imported module or class (``F``, ``torch.nn.functional``, ``CLIPAttention``)."""
    root = expr
    while isinstance(root, cst.Attribute):
        root = root.value
    return isinstance(root, cst.Name) and ctx.qualname(expr) is not None and any(
        b.local == root.value for b in ctx.imports.all_bindings())


_NO_GRAD = ("no_grad", "inference_mode")


def _no_grad(expr: cst.BaseExpression) -> bool:
    """``torch.no_grad()``, ``torch.inference_mode()`` (or the bare decorator form)."""
    if isinstance(expr, cst.Call):
        expr = expr.func
    last = expr.attr.value if isinstance(expr, cst.Attribute) else expr.value if isinstance(expr, cst.Name) else None
    return last in _NO_GRAD


def _trained_here(call: cst.Call, ctx: PythonContext) -> bool:
    """Whether the scope trains the model the trace ``call`` is assigned to: its parameters go to an optimizer
    (``name.parameters()``) or it is put in train mode (``name.train()``); for ``self.name``, the module."""
    name = _assigned_name(call, ctx)
    if name is None:
        # `self.model = trace(...)` in one method, trained in another: the attribute, anywhere in the module
        target = _assigned_target(call, ctx)
        if target is None or not re.fullmatch(r"self\.\w+", target):
            return False
        return re.search(rf"(?<![\w.]){re.escape(target)}\s*\.\s*(?:parameters|train)\s*\(", ctx.code) is not None
    return re.search(rf"(?<![\w.]){re.escape(name)}\s*\.\s*(?:parameters|train)\s*\(",
                     _scope_code(ctx.scope, ctx)) is not None


def _no_autograd(call: cst.Call, ctx: PythonContext) -> str:
    """``.requires_grad_(False)`` for the module compiled in place of the trace or traced artifact ``call``
    (which recorded no autograd), unless the name it is assigned to stays in its scope and every call of it
    there runs under no_grad / inference_mode: outputs with autograd fail ``.numpy()`` and hold memory."""
    name = _assigned_name(call, ctx)
    scope = ctx.scope
    if name is not None and _stays_here(scope, name, ctx, call) and not _called_without_grad_off(scope, name):
        return ""
    return ".requires_grad_(False)"


def _called_without_grad_off(scope: cst.CSTNode, name: str) -> bool:
    """Whether ``scope`` calls ``name(...)`` outside every ``with torch.no_grad()`` / ``inference_mode()``
    block and no_grad-decorated function (a call in a nested function counts as outside: its caller is unknown)."""
    def outside(node: cst.CSTNode, off: bool) -> bool:
        if isinstance(node, cst.FunctionDef):
            off = any(_no_grad(d.decorator) for d in node.decorators)
        elif isinstance(node, cst.Lambda):
            off = False
        elif isinstance(node, cst.With) and any(_no_grad(item.item) for item in node.items):
            return outside(node.body, True)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name and not off:
            return True
        return any(outside(child, off) for child in node.children)
    start = isinstance(scope, cst.FunctionDef) and any(_no_grad(d.decorator) for d in scope.decorators)
    return any(outside(child, start) for child in scope.children)


def _nested_defs(node: cst.CSTNode) -> list[cst.CSTNode]:
    return [n for n in walk(node) if type(n) in (cst.FunctionDef, cst.Lambda, cst.ClassDef)]


RULES = (NeuronTrace,)
