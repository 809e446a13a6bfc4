"""NM401-NM406: torch-xla idioms -> native PyTorch on the ``neuron`` device.

TorchNeuron runs eagerly on an ordinary torch device (``neuron``) and distributes with plain
``torch.distributed`` (backend ``"neuron"``, launched by ``torchrun``). The torch-xla calls that
old Trainium scripts are full of either disappear (graph cuts), become their torch equivalent
(devices, optimizer steps, barriers, device sync) or become rank checks (master-only printing
and saving). Facts and signatures: torch-xla 2.8 ``torch_xla/core/xla_model.py`` and
``torch_xla/runtime.py`` (see source-apis §4.1/§4.2).

How ranks are spelled in the output (one choice per module, so that the code reads uniformly):

* the local rank is always ``int(os.environ.get("LOCAL_RANK", 0))``: torchrun sets it, it is 0
  in a single process, and it works before and without a process group;
* the global rank / world size are ``dist.get_rank()`` / ``dist.get_world_size()`` in a module
  that calls ``init_process_group`` (these raise when no process group exists), else
  ``int(os.environ.get("RANK", 0))`` / ``int(os.environ.get("WORLD_SIZE", 1))`` (torchrun's
  variables, with the single-process values as defaults - what torch-xla returned there).

A module is "multi-process" when it initialises a process group, uses xmp, DDP, a distributed
sampler, or asks for ranks or the world size; there the device becomes the per-rank
``torch.device("neuron", int(os.environ.get("LOCAL_RANK", 0)))`` (under PJRT each process saw
its own core as ``xla:0``).

Every rule owns exactly the qualified names it rewrites. A use it cannot rewrite (a call with
unsupported arguments, the function used as a value) gets a marker of that rule, so nothing
owned is left behind silently.
"""


from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from codemods.common.statements import CLOCK_READ, block_of, clock_after, reads_clock
from codemods.xla import device_vars
from codemods.xla.optimizer_step import XlaOptimizerStep
from codemods.xla.base import (
    _already_master_only,
    _atomic,
    _bind_args,
    _call_args,
    _code,
    _device,
    _dist,
    _expr,
    _expression_statement,
    _has_process_group,
    drop_old_comment,
    without_group,
    _if_statement,
    _index_in_stack,
    _is_master,
    _is_reference,
    _keyword,
    _literal_bool,
    _local_rank,
    _multi_process,
    _needs_parens,
    _rank,
    _remove_small_statement,
    _torch,
    _world_size,
    XLA_BACKEND,
    _XLA_DEVICE_RE,
    _XlaRule,
    XM,
    XR,
)
from migrator.imports import Binding, dotted
from migrator.model import fitted
from migrator.rules import PythonContext
from migrator.scopes import FUNCTIONS
from migrator.tree import walk


# --------------------------------------------------------------------------- NM401


def _xla_consumer(call: cst.Call, ctx: PythonContext) -> bool:
    """Whether ``call`` is an argument of a torch-xla call that is not a device call itself
    (``xm.xla_device_hw(xm.xla_device())``): a torch device does not fit there."""
    i = _index_in_stack(ctx, call)
    if i < 2 or not isinstance(ctx.stack[i - 1], cst.Arg) or not isinstance(ctx.stack[i - 2], cst.Call):
        return False
    outer = ctx.stack[i - 2].func
    qual = ctx.qualname(outer) if isinstance(outer, (cst.Name, cst.Attribute)) else None
    return qual is not None and qual.startswith("torch_xla") and qual not in XlaDevice.owns


#: libraries whose device= takes a torch device: "xla" passed to them is a device string to rename
_DEVICE_LIBRARIES = frozenset({"torch", "transformers", "diffusers", "accelerate", "peft", "trl", "datasets",
                               "sentence_transformers", "torchvision", "torchaudio", "timm", "lightning",
                               "pytorch_lightning", "optimum", "vllm", "deepspeed", "numpy"})
#: a comparison of a variable with the string "xla" (`if device == "xla":`), in the unit or the run
_COMPARED_WITH_XLA = re.compile(r"""(?<![.\w])([A-Za-z_]\w*)\s*[!=]=\s*["']xla["']|["']xla["']\s*[!=]=\s*([A-Za-z_]\w*)(?![\w.(])""")
XLA_COMPARED = "xla:compared"
#: torch methods that take device= (on a module or tensor whose class the rule cannot see)
_TENSOR_METHODS = frozenset({"to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "to_empty"})


def _device_positions(call: cst.Call, ctx: PythonContext) -> set[int]:
    """The positions of ``call``'s positional arguments bound to a parameter named ``device`` of the module's own
    function or class it calls (``EncoderWrapper(model, cfg, "xla", n)`` with ``def __init__(self, model, cfg,
    device, n)``): they are device arguments as a ``device=`` keyword is."""
    if not any(a.keyword is None and not a.star for a in call.args):
        return set()
    target = _own_callee(call, ctx)
    if isinstance(target, cst.ClassDef):
        init = next((st for st in getattr(target.body, "body", ()) if isinstance(st, cst.FunctionDef)
                     and st.name.value == "__init__"), None)
        params = [p.name.value for p in init.params.params][1:] if init is not None else []
    elif isinstance(target, cst.FunctionDef):
        params = [p.name.value for p in target.params.params]
    else:
        return set()
    out = set()
    for i, arg in enumerate(call.args):
        if arg.keyword is not None or arg.star:
            break
        if i < len(params) and params[i] == "device":
            out.add(i)
    return out


def _own_callee(call: cst.Call, ctx: PythonContext) -> cst.FunctionDef | cst.ClassDef | None:
    """The module's own function or class ``call`` calls by name, or None."""
    if not isinstance(call.func, cst.Name):
        return None
    return next((st for st in ctx.module.body if isinstance(st, (cst.FunctionDef, cst.ClassDef))
                 and st.name.value == call.func.value), None)


def _mode_flag(call: cst.Call, qual: str | None, ctx: PythonContext) -> bool:
    """Whether ``device="xla"`` given to ``call`` may be a mode flag of the project's own code rather than a torch
    device: the callee is no library's (a class or function of the project) and the unit or the run compares a
    plain variable with "xla" (the callee choosing a branch by it, which the rename would skip)."""
    if qual is not None and qual.split(".")[0] in _DEVICE_LIBRARIES:
        return False
    if qual is None and isinstance(call.func, cst.Attribute) and call.func.attr.value in _TENSOR_METHODS:
        return False  # `model.to(device="xla")`, `x.new_zeros(..., device="xla")`: torch's own methods
    own = _own_callee(call, ctx)
    if own is not None and _ATTRIBUTE_COMPARED_WITH_XLA.search(ctx.module.code_for_node(own)):
        return True  # the callee is here and tests what it stored (`self.device_name == "xla"`)
    return bool(_COMPARED_WITH_XLA.search(ctx.code)) or XLA_COMPARED in ctx.facts


#: an attribute the code compares with "xla" (`self.device_name == "xla"`: the project's own mode, kept where its
#: callable stored the argument); `<x>.device.type == "xla"` is a torch device's type, which NM401 rewrites
_ATTRIBUTE_COMPARED_WITH_XLA = re.compile(r"""(?<![\w.])[A-Za-z_]\w*(?:\.\w+)+(?<!\.type)\s*[!=]=\s*["']xla["']""")



class XlaDevice(_XlaRule):
    id = "NM401"
    markers = (
        ("Change `{name}` (the XLA device/backend \"xla\") and every test of it to \"neuron\" by hand.",
         """The variable holds torch-xla's device/backend string "xla" and is used as a device or a process-group
         backend in ways neuron-migrate cannot follow: on TorchNeuron the device is "neuron"
         (torch.device("neuron", LOCAL_RANK) per process) and the process-group backend is "neuron"."""),
    )
    title = "XLA device -> torch.device(\"neuron\") (per rank in multi-process scripts)"
    # the xla_device calls need a torch_xla import; "xla" device strings and the XLA compile
    # backends can sit in a helper module that never imports torch_xla itself
    triggers = ("torch_xla", '"xla"', "'xla'", '"xla:', "'xla:", "openxla", "torchxla_trace_once")
    #: a file of the run compares a variable with "xla" (a project callable's mode test)
    project_probes = {XLA_COMPARED: ('device == "xla"', "device == 'xla'", 'device != "xla"', "device != 'xla'",
                                    'device=="xla"', "device=='xla'")}
    owns = (f"{XM}.xla_device", "torch_xla.device")
    natives = {
        f"{XM}.xla_device": 'torch.device("neuron")',
        "torch_xla.device": 'torch.device("neuron")',
    }
    why = """
        On TorchNeuron the accelerator is the ordinary torch device `neuron`; there is no XLA
        device. `xm.xla_device()` / `torch_xla.device()` become `torch.device("neuron")`, and the
        device strings `"xla"` / `"xla:N"` given to `torch.device(...)`, `.to(...)` or a
        `device=` argument (or positionally to a `device` parameter of the module's own function or
        class) become `"neuron"` / `"neuron:N"`. In a multi-process script (process
        group, xmp, DDP, distributed sampler or rank queries in the module) each process must
        use its own NeuronCore, so the device is `torch.device("neuron", LOCAL_RANK)` - under
        PJRT every process saw its own core as `xla:0`. `devkind=` only selected the device
        kind (Neuron is the only kind there) and is dropped. The torch-xla `torch.compile`
        backends (`"openxla"`, `"openxla_eval"`, `"aot_torchxla_trace_once"`,
        `"torchxla_trace_once"`) become `backend="neuron"`, and device-type tests
        (`x.device.type == "xla"`, `dev.type in ("xla", "cuda")`, `"xla" in str(p.device)`) test
        for `"neuron"`.
    """
    before = """
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
        model.to(device)
        batch = batch.to("xla")
    """
    after = """
        import torch

        device = torch.device("neuron")
        model.to(device)
        batch = batch.to("neuron")
    """
    caveats = """
        Only strings given to `torch.device`, `.to`, `device=`, `torch.compile(backend=...)` /
        `torch._dynamo.optimize(...)` and compared with a device type (`<expr>.type`) are
        rewritten; `"xla"` elsewhere (a config value, a `device_type` variable, a string held in
        a variable) is left alone. A `devkind=` naming a non-Neuron kind (`"CPU"`, `"GPU"`,
        `"CUDA"`) gets a marker. The per-rank index comes from `LOCAL_RANK`, which torchrun sets.
        A `device="xla"` given to a callable of the project (no torch or HF library's, nor a
        tensor method) in a unit or run that compares a variable with "xla" (`if device ==
        "xla":`, a mode flag choosing a branch, which the rename would skip) gets a marker to
        change the call and the test together, instead of the rename.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Comparison] = self._on_comparison
        table[cst.Name] = self._on_name
        return table

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        self._on_reference(node, ctx)
        device_vars.track(node, ctx)

    def finish(self, ctx: PythonContext) -> None:
        device_vars.finish(ctx)

    def rewrite(self, qual, call, func, ctx):
        if _xla_consumer(call, ctx):
            return None  # a torch-xla call left in place takes an XLA device: its own marker says what to do
        params = ("n", "devkind") if qual.endswith("xla_device") else ("index",)
        bound = _bind_args(call, params)
        if bound is None:
            return "unsupported arguments"
        if "devkind" in bound:
            kind = bound["devkind"].value
            if isinstance(kind, cst.SimpleString) and str(kind.evaluated_value).upper() in _OTHER_KINDS:
                return f"devkind={_code(kind)} asks for a non-Neuron device"
            ctx.finding(call, f"devkind={_code(kind)} dropped: Neuron is the only device kind")
        index_arg = bound.get(params[0])
        anchor = ctx.imports.binding_of(func)
        if index_arg is None:
            new = _expr(_device(ctx, anchor))
            ctx.replace(call, new)
        else:
            template = _device(ctx, anchor, "INDEX")  # built now: quotes depend on where the call is

            def build(updated: cst.Call) -> cst.BaseExpression:
                index = _bind_args(updated, params)[params[0]].value  # type: ignore[index]
                return _expr(template.replace("INDEX", _code(index)))

            ctx.replace(call, build)
        ctx.finding(call, f"{qual} -> torch.device(\"neuron\")")
        return None

    # ---- "xla" device strings
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if (isinstance(func, cst.Attribute) and func.attr.value == "startswith" and len(node.args) == 1
                and _is_xla_type(node.args[0].value) and (_is_device_text(func.value) or _is_device_type(func.value))):
            self._rename_type(node.args[0].value, ctx)  # `str(t.device).startswith("xla")`: it reads "neuron:0" now
            return
        qual = ctx.qualname(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if qual == "torch.device":
            self._torch_device(node, ctx)
        elif qual in _COMPILE_CALLS:
            self._compile_backend(node, qual, ctx)
        elif isinstance(func, cst.Attribute) and func.attr.value == "to" and node.args and node.args[0].keyword is None:
            self._string_arg(node.args[0].value, ctx, f".to({_code(node.args[0].value)})")
        positional = _device_positions(node, ctx)
        for i, arg in enumerate(node.args):
            if (arg.keyword is not None and arg.keyword.value == "device") or (arg.keyword is None and i in positional):
                if _xla_string(arg.value) is not None and _mode_flag(node, qual, ctx):
                    # the project's own callable tests its device argument for "xla": the call and the test
                    # change together, or the branch the string chose no longer runs
                    ctx.marker(node, fitted(
                        f"Pass \"neuron\" here and change the \"xla\" test in `{_code(func)}` with it: it picks a branch by it.",
                        "Pass \"neuron\" here and change the callee's \"xla\" test with it: it picks a branch by it."))
                    continue
                self._string_arg(arg.value, ctx, f"device={_code(arg.value)}")

    def _compile_backend(self, call: cst.Call, qual: str, ctx: PythonContext) -> None:
        """torch.compile(backend="openxla") / torch._dynamo.optimize("openxla") -> "neuron"."""
        for i, arg in enumerate(call.args):
            is_backend = (arg.keyword.value == "backend") if arg.keyword is not None else (
                qual == "torch._dynamo.optimize" and i == 0)
            value = arg.value
            if (is_backend and isinstance(value, cst.SimpleString) and "b" not in value.prefix.lower()
                    and value.raw_value in _XLA_BACKENDS):
                q = value.quote
                ctx.replace(value, cst.SimpleString(f"{value.prefix}{q}neuron{q}"))
                ctx.finding(value, f"{qual}: XLA backend {_code(value)} -> \"neuron\"")

    def _on_comparison(self, node: cst.Comparison, ctx: PythonContext) -> None:
        """``<x>.device.type == "xla"`` / ``dev.type in ("xla", ...)`` -> ``"neuron"``;
        ``t.device == xm.xla_device()`` -> ``t.device.type == "neuron"`` (a tensor's device carries
        its index, ``neuron:0``, which never equals ``torch.device("neuron")``)."""
        left = node.left
        if len(node.comparisons) == 1 and isinstance(node.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
            right = node.comparisons[0].comparator
            for a, b, flip in ((left, right, False), (right, left, True)):
                if self._is_device_call(b, ctx):
                    self._device_equality(node, a, flip, ctx)
                    return
        for target in node.comparisons:
            right = target.comparator
            if isinstance(target.operator, (cst.Equal, cst.NotEqual)):
                for a, b in ((left, right), (right, left)):
                    if _is_device_type(a) and _is_xla_type(b):
                        self._rename_type(b, ctx)
            elif isinstance(target.operator, (cst.In, cst.NotIn)) and _is_device_type(left):
                if isinstance(right, (cst.Tuple, cst.List, cst.Set)):
                    for el in right.elements:
                        if _is_xla_type(el.value):
                            self._rename_type(el.value, ctx)
            elif isinstance(target.operator, (cst.In, cst.NotIn)) and _is_xla_type(left) and _is_device_text(right):
                self._rename_type(left, ctx)  # `"xla" in str(t.device)`: a neuron tensor's reads "neuron:0"
            left = right

    def _is_device_call(self, node: cst.BaseExpression, ctx: PythonContext) -> bool:
        return isinstance(node, cst.Call) and not node.args and ctx.qualname(node.func) in self.owns

    def _device_equality(self, node: cst.Comparison, other: cst.BaseExpression, flip: bool,
                         ctx: PythonContext) -> None:
        if not (isinstance(other, cst.Attribute) and other.attr.value == "device"):
            ctx.marker(node, "compare the device's .type with \"neuron\": a device with an index never equals "
                             "torch.device(\"neuron\")")
            return

        def edit(new: cst.Comparison) -> cst.Comparison:
            target = new.comparisons[0]
            side = new.comparisons[0].comparator if flip else new.left
            typed = cst.Attribute(value=side, attr=cst.Name("type"))
            string = cst.SimpleString('"neuron"')
            if flip:
                return new.with_changes(left=string, comparisons=[target.with_changes(comparator=typed)])
            return new.with_changes(left=typed, comparisons=[target.with_changes(comparator=string)])

        ctx.replace(node, edit)
        ctx.finding(node, f"{_code(other)} == xla_device() -> {_code(other)}.type == \"neuron\" (the device's index "
                          "would never match)")

    def _rename_type(self, string: cst.BaseExpression, ctx: PythonContext) -> None:
        assert isinstance(string, cst.SimpleString)
        q = string.quote
        ctx.replace(string, cst.SimpleString(f"{string.prefix}{q}neuron{q}"))
        ctx.finding(string, "device type \"xla\" -> \"neuron\"")

    def _torch_device(self, call: cst.Call, ctx: PythonContext) -> None:
        bound = _bind_args(call, ("type", "index"))
        if bound is None or "type" not in bound:
            return
        string = bound["type"].value
        found = _xla_string(string)
        if found is None:
            return
        (index,) = found
        if "index" in bound or index not in (None, "0") or not _multi_process(ctx):
            self._rename_string(string, index, ctx, f"torch.device({_code(string)})")  # type: ignore[arg-type]
            return
        # multi-process: the process's own core
        ctx.replace(call, _expr(_device(ctx, _torch_binding(ctx))))
        ctx.finding(call, f"torch.device({_code(string)}) -> per-rank torch.device(\"neuron\", LOCAL_RANK)")

    def _string_arg(self, value: cst.BaseExpression, ctx: PythonContext, what: str) -> None:
        found = _xla_string(value)
        if found is None:
            return
        (index,) = found
        if index in (None, "0") and _multi_process(ctx):
            ctx.replace(value, _expr(_device(ctx, _torch_binding(ctx))))
            ctx.finding(value, f"{what} -> per-rank torch.device(\"neuron\", LOCAL_RANK)")
            return
        self._rename_string(value, index, ctx, what)  # type: ignore[arg-type]

    def _rename_string(self, string: cst.SimpleString, index: str | None, ctx: PythonContext, what: str) -> None:
        q = string.quote
        new = f"neuron:{index}" if index is not None else "neuron"
        ctx.replace(string, cst.SimpleString(f"{string.prefix}{q}{new}{q}"))
        ctx.finding(string, f"{what}: device \"xla\" -> \"neuron\"")


#: torch.compile backends of torch-xla (torch/_dynamo/backends/torchxla.py, torch 2.1-2.8)
_XLA_BACKENDS = ("openxla", "openxla_eval", "aot_torchxla_trace_once", "torchxla_trace_once")
_COMPILE_CALLS = ("torch.compile", "torch._dynamo.optimize")
#: devkind values that do not name the Neuron device (xm.xla_device(devkind=...))
_OTHER_KINDS = ("CPU", "GPU", "CUDA", "ROCM")


def _is_device_type(node: cst.BaseExpression) -> bool:
    """``<expr>.type`` (``x.device.type``, ``dev.type``, ``torch.device(d).type``): compared with
    the literal ``"xla"`` this is a device-type test (``torch.device.type``)."""
    return isinstance(node, cst.Attribute) and node.attr.value == "type"


def _is_device_text(node: cst.BaseExpression) -> bool:
    """``str(<expr>.device)``, ``str(device)``: the text of a device (``"xla:0"``)."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "str"
            and len(node.args) == 1 and node.args[0].keyword is None and node.args[0].star == ""):
        return False
    arg = node.args[0].value
    return (isinstance(arg, cst.Attribute) and arg.attr.value == "device") or (
        isinstance(arg, cst.Name) and arg.value in ("device", "dev"))


def _is_xla_type(node: cst.BaseExpression) -> bool:
    return (isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower() and "\\" not in node.value
            and node.raw_value == "xla")


def _xla_string(node: cst.BaseExpression) -> tuple[str | None] | None:
    """For a plain string literal ``"xla"`` / ``"xla:N"``: ``(None,)`` / ``("N",)``; else None."""
    if not isinstance(node, cst.SimpleString) or "b" in node.prefix.lower() or "\\" in node.value:
        return None
    match = _XLA_DEVICE_RE.match(node.raw_value)
    if match is None:
        return None
    return (match.group(1),)


def _torch_binding(ctx: PythonContext) -> Binding | None:
    """Where a new ``import torch`` would go (next to an existing one if any)."""
    found = ctx.imports.bindings.get(ctx.imports.local_for("torch") or "")
    return found[0] if found else None


# --------------------------------------------------------------------------- NM402


class XlaStepMarkers(_XlaRule):
    id = "NM402"
    title = "Remove XLA graph cuts (mark_step, sync, step()) and run step closures directly"
    triggers = ("torch_xla",)
    owns = (f"{XM}.mark_step", "torch_xla.sync", "torch_xla.step", f"{XM}.add_step_closure")
    natives = {
        f"{XM}.mark_step": "nothing (eager execution), or torch.accelerator.synchronize() to wait",
        "torch_xla.sync": "nothing (eager execution), or torch.accelerator.synchronize() to wait",
        "torch_xla.step": "the body of the `with` block alone",
        f"{XM}.add_step_closure": "a direct call of the closure",
    }
    why = """
        torch-xla traced operations lazily and ran the graph at `xm.mark_step()` /
        `torch_xla.sync()` / the end of `with torch_xla.step():`. TorchNeuron executes eagerly,
        so these graph cuts are deleted (a block left empty keeps a `pass`), `with
        torch_xla.step():` is unwrapped, and `xm.add_step_closure(fn, args)` - which ran `fn`
        once the step's tensors were materialised - becomes the direct call `fn(*args)`.
        `mark_step(wait=True)` waited for the device, so it becomes
        `torch.accelerator.synchronize()`; so does a cut between two clock reads (`t0 =
        time.perf_counter()` ... `xm.mark_step()` ... `time.perf_counter() - t0`), where it was what
        put the device's work inside the measured time (eager operations are queued
        asynchronously too), and a cut right before a clock read (`xm.mark_step()` then `t0 =
        time.perf_counter()`), which kept the warm-up's work out of it.
    """
    before = """
        import torch_xla.core.xla_model as xm

        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            xm.mark_step()
            xm.add_step_closure(log, args=(loss,))
    """
    after = """
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            log(loss)
    """
    caveats = """
        Comments on a deleted line (above it or at its end) go with it. A `mark_step()` used
        inside an expression, `with torch_xla.step() as s:` and a `with` of several items get a
        marker. Closures now run immediately, before the next statement, rather than at the end
        of the step.
    """

    def rewrite(self, qual, call, func, ctx):
        if qual == f"{XM}.add_step_closure":
            return self._closure(call, ctx)
        if qual == "torch_xla.step":
            return self._unwrap(call, func, ctx)
        bound = _bind_args(call, ("wait", "reset_scope"))
        if bound is None:
            return "unsupported arguments"
        wait = _literal_bool(bound.get("wait"), False)
        if wait is None:
            return "`wait=` is not a literal"
        statement = _expression_statement(ctx, call)
        timed = statement is not None and _timed_cut(ctx, statement[1])
        if wait or timed:
            new = _expr(f"{_torch(ctx, ctx.imports.binding_of(func))}.accelerator.synchronize()")
            ctx.replace(call, new)
            done = "(wait=True)" if wait else "() bounding a timed region"
            ctx.finding(call, f"{qual}{done} -> torch.accelerator.synchronize()")
            drop_old_comment(call, ctx, "torch-xla's graph cut")
            return None
        if statement is None:
            return "it is part of an expression"
        _remove_small_statement(ctx, *statement)
        ctx.finding(call, f"{qual}() removed (TorchNeuron executes eagerly)")
        return None

    def _closure(self, call: cst.Call, ctx: PythonContext) -> str | None:
        bound = _bind_args(call, ("closure", "args", "run_async"))
        if bound is None or "closure" not in bound:
            return "unsupported arguments"
        if _expression_statement(ctx, call) is None:
            return "its result is used"

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, ("closure", "args", "run_async"))
            assert b is not None
            closure = b["closure"].value
            args_value = b["args"].value if "args" in b else None
            if isinstance(closure, cst.Lambda) and _no_params(closure.params) and args_value is None:
                return closure.body  # add_step_closure(lambda: f(x)) -> f(x)
            if args_value is None:
                new_args: list[cst.Arg] = []
            elif isinstance(args_value, cst.Tuple):
                new_args = [
                    cst.Arg(value=el.value, star="*" if isinstance(el, cst.StarredElement) else "")
                    for el in args_value.elements
                ]
            else:
                new_args = [cst.Arg(value=args_value, star="*")]
            fn = closure if not isinstance(closure, cst.Lambda) else closure.with_changes(
                lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
            )
            return cst.Call(func=_atomic(fn), args=_call_args(new_args))

        ctx.replace(call, build)
        ctx.finding(call, f"{XM}.add_step_closure(fn, args) -> fn(*args) (runs immediately in eager mode)")
        return None

    def _unwrap(self, call: cst.Call, func: cst.CSTNode, ctx: PythonContext) -> str | None:
        if call.args:
            return "unsupported arguments"
        i = _index_in_stack(ctx, call)
        item, with_stmt = ctx.stack[i - 1], ctx.stack[i - 2]
        if not (isinstance(item, cst.WithItem) and item.item is call and isinstance(with_stmt, cst.With)):
            return "it is not the item of a `with` statement"
        if item.asname is not None or len(with_stmt.items) != 1 or with_stmt.asynchronous is not None:
            return "the `with` statement has other items or binds a name"
        if not isinstance(with_stmt.body, cst.IndentedBlock):
            return "the `with` body is on the same line"
        block = ctx.stack[i - 3]
        if isinstance(block, cst.Module):
            # editing the whole module would hide which imports became unused: only a one-statement
            # body can take the place of a top-level `with`
            if len(with_stmt.body.body) != 1 or with_stmt.body.footer or with_stmt.body.header.comment:
                return "unwrap this top-level `with` of several statements"

            def lift(updated: cst.With):
                inner = updated.body.body[0] if updated.body.body else cst.SimpleStatementLine([cst.Pass()])
                return inner.with_changes(leading_lines=list(updated.leading_lines) + list(inner.leading_lines))

            ctx.replace(with_stmt, lift)
            ctx.finding(call, "with torch_xla.step(): unwrapped (TorchNeuron executes eagerly)")
            return None
        if not isinstance(block, cst.IndentedBlock):
            return "unexpected position"  # pragma: no cover - a With always sits in a block
        key = _code(func)
        pending = ctx.local_state().setdefault("unwrap", {})
        if id(block) not in pending:
            pending[id(block)] = keys = set()

            def splice(updated):
                body: list[cst.BaseStatement] = []
                carry: list[cst.EmptyLine] = []
                for stmt in updated.body:
                    if _is_step_with(stmt, keys):
                        inner = list(stmt.body.body)
                        head = list(stmt.leading_lines)
                        comment = stmt.body.header.comment
                        if comment is not None:
                            head.append(cst.EmptyLine(indent=True, comment=comment))
                        if not inner:  # its only statement was removed (a mark_step)
                            carry = carry + head + list(stmt.body.footer)
                            continue
                        inner[0] = inner[0].with_changes(leading_lines=carry + head + list(inner[0].leading_lines))
                        carry = list(stmt.body.footer)
                        body.extend(inner)
                        continue
                    if carry:
                        stmt = stmt.with_changes(leading_lines=carry + list(stmt.leading_lines))
                        carry = []
                    body.append(stmt)
                if carry:
                    footer = carry + list(updated.footer)
                    return updated.with_changes(body=body, footer=footer)
                return updated.with_changes(body=body)

            ctx.replace(block, splice)
        pending[id(block)].add(key)
        ctx.finding(call, "with torch_xla.step(): unwrapped (TorchNeuron executes eagerly)")
        return None


def _timed_cut(ctx: PythonContext, line: cst.CSTNode) -> bool:
    """Whether the graph cut on ``line`` bounds a timed region: it ends one (a clock read before it and one after
    it) with nothing after it that waits for the device already, or it starts one (the statement right after it
    reads the clock: the warm-up queued before must be done before the clock starts). The cut is what kept the
    device's other work out of (or in) the time, so it becomes a device synchronization rather than nothing."""
    found = block_of(ctx, line)
    following = found[0][found[1] + 1] if found is not None and found[1] + 1 < len(found[0]) else None
    if following is not None and reads_clock(following):
        return True
    if not clock_after(ctx, line):
        return _ends_timed_function(ctx, line)
    return following is None or not _WAITS.search(_code(following))


def _ends_timed_function(ctx: PythonContext, line: cst.CSTNode) -> bool:
    """Whether the cut on ``line`` ends a function (only a ``return`` after it in the function's body) of a unit
    that reads a clock, and the function is called or handed on elsewhere in it (`benchmark(n, step, args)`, whose
    clock reads sit around `f(*args)`): the caller times what the cut made the device finish."""
    k = next((i for i in range(len(ctx.stack) - 1, -1, -1) if isinstance(ctx.stack[i], cst.FunctionDef)), None)
    if k is None or not CLOCK_READ.search(ctx.code):
        return False
    func = ctx.stack[k]
    # from the function down to the cut, each statement is the last of its block (returns aside): the cut ends the
    # function also inside the `if on_device:` (or with, loop) that is the function's last statement
    chain = [n for n in ctx.stack[k + 1:] if isinstance(n, cst.BaseCompoundStatement)] + [line]
    outer: cst.CSTNode = func
    for stmt in chain:
        blocks = [b for b in (getattr(outer, "body", None), getattr(getattr(outer, "orelse", None), "body", None))
                  if isinstance(b, cst.IndentedBlock)]
        body = next((list(b.body) for b in blocks if any(s is stmt for s in b.body)), None)
        if body is None:
            return False
        at = next(i for i, s in enumerate(body) if s is stmt)
        if not all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Return) for x in s.body)
                   for s in body[at + 1:]):
            return False
        outer = stmt
    name = func.name.value
    uses = len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", ctx.code))
    return uses > 1  # (one is its def)


#: a statement that waits for the device itself (what a timed cut followed by it needs no synchronize for)
_WAITS = re.compile(r"\bwait_device_ops\s*\(|\bsynchronize\s*\(|\bmark_step\s*\(\s*wait\s*=\s*True")


def _no_params(params: cst.Parameters) -> bool:
    return not (
        params.params or params.posonly_params or params.kwonly_params
        or isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.star_kwarg is not None
    )


def _is_step_with(stmt: cst.CSTNode, keys: set[str]) -> bool:
    if not isinstance(stmt, cst.With) or len(stmt.items) != 1 or not isinstance(stmt.body, cst.IndentedBlock):
        return False
    item = stmt.items[0]
    return (
        item.asname is None
        and isinstance(item.item, cst.Call)
        and not item.item.args
        and _code(item.item.func) in keys
    )


# --------------------------------------------------------------------------- NM404


class XlaRankQueries(_XlaRule):
    id = "NM404"
    title = "XLA ordinal and world-size queries -> torch.distributed / torchrun environment"
    triggers = ("torch_xla",)
    owns = (
        f"{XM}.get_ordinal",
        f"{XM}.get_local_ordinal",
        f"{XM}.xrt_world_size",
        f"{XM}.is_master_ordinal",
        f"{XR}.global_ordinal",
        f"{XR}.local_ordinal",
        f"{XR}.world_size",
    )
    natives = {
        f"{XM}.get_ordinal": "dist.get_rank()",
        f"{XR}.global_ordinal": "dist.get_rank()",
        f"{XM}.get_local_ordinal": 'int(os.environ.get("LOCAL_RANK", 0))',
        f"{XR}.local_ordinal": 'int(os.environ.get("LOCAL_RANK", 0))',
        f"{XM}.xrt_world_size": "dist.get_world_size()",
        f"{XR}.world_size": "dist.get_world_size()",
        f"{XM}.is_master_ordinal": 'int(os.environ.get("LOCAL_RANK", 0)) == 0 (local=True) / dist.get_rank() == 0',
    }
    KIND = {
        f"{XM}.get_ordinal": "rank",
        f"{XR}.global_ordinal": "rank",
        f"{XM}.get_local_ordinal": "local",
        f"{XR}.local_ordinal": "local",
        f"{XM}.xrt_world_size": "world",
        f"{XR}.world_size": "world",
    }
    why = """
        Ranks come from torchrun and torch.distributed. The global ordinal becomes
        `dist.get_rank()` and the world size `dist.get_world_size()` in a module that calls
        `init_process_group` (they raise without a process group); elsewhere they become
        `int(os.environ.get("RANK", 0))` / `int(os.environ.get("WORLD_SIZE", 1))`, torchrun's
        variables with torch-xla's single-process values as defaults. The local ordinal is
        always `int(os.environ.get("LOCAL_RANK", 0))`. `xm.is_master_ordinal()` checks the
        LOCAL master by default (`local=True` in torch-xla), so it becomes
        `int(os.environ.get("LOCAL_RANK", 0)) == 0`; with `local=False` it compares the global
        rank.
    """
    before = """
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        sampler = DistributedSampler(ds, num_replicas=xr.world_size(), rank=xr.global_ordinal())
        if xm.is_master_ordinal():
            print("local master")
    """
    after = """
        import os

        sampler = DistributedSampler(ds, num_replicas=int(os.environ.get("WORLD_SIZE", 1)), rank=int(os.environ.get("RANK", 0)))
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            print("local master")
    """
    caveats = """
        In a module that calls `init_process_group`, a query in a statement above that call in the
        same function (or module body) gets the environment form (it runs without a process group);
        one elsewhere that runs before the call (a helper called first) now raises: move it after,
        or use the environment form. `local=` given as a variable,
        and the `defval=` argument of old torch-xla versions, get a marker.
    """

    def rewrite(self, qual, call, func, ctx):
        anchor = ctx.imports.binding_of(func)
        i = _index_in_stack(ctx, call)
        parent = ctx.stack[i - 1] if i else None
        if qual == f"{XM}.is_master_ordinal":
            bound = _bind_args(call, ("local",))
            if bound is None:
                return "unsupported arguments"
            local = _literal_bool(bound.get("local"), True)
            if local is None:
                return "`local=` is not a literal"
            code = _is_master(ctx, anchor, local)
            new = _expr(code)
            if _needs_parens(parent, call):
                new = new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            ctx.replace(call, new)
            ctx.finding(call, f"{qual}({'' if local else 'local=False'}) -> {code}")
            return None
        if call.args:
            return "unsupported arguments"
        kind = self.KIND[qual]
        code = {"rank": _rank, "local": _local_rank, "world": _world_size}[kind](ctx, anchor)
        ctx.replace(call, _expr(code))
        ctx.finding(call, f"{qual}() -> {code}")
        return None


# --------------------------------------------------------------------------- NM405


#: methods that change the object they are called on (or the iterator they advance)
_MUTATORS = frozenset({"pop", "popitem", "popleft", "append", "appendleft", "extend", "insert", "remove", "clear",
                       "update", "setdefault", "add", "discard", "send", "step", "backward", "zero_grad"})


def _state_change(call: cst.Call) -> str | None:
    """The first thing in ``call``'s arguments that changes state (``d.pop(k)``, ``next(it)``, ``x := ...``), which a
    rank-0 test around the call would run on rank 0 only; None where there is none."""
    for arg in call.args:
        for n in walk(arg.value):
            if isinstance(n, (cst.NamedExpr, cst.Await, cst.Yield)):
                return ":=" if isinstance(n, cst.NamedExpr) else type(n).__name__.lower()
            if isinstance(n, cst.Call):
                f = n.func
                if isinstance(f, cst.Name) and f.value == "next":
                    return "next()"
                if isinstance(f, cst.Attribute) and f.attr.value in _MUTATORS:
                    return f".{f.attr.value}()"
    return None


class XlaMasterOnlyAndSync(_XlaRule):
    id = "NM405"
    title = "xm.master_print / save / rendezvous / wait_device_ops -> rank-0 print, torch.save, dist.barrier(), device sync"
    fix = "mixed"
    triggers = ("torch_xla",)
    owns = (f"{XM}.master_print", f"{XM}.save", f"{XM}.rendezvous", f"{XM}.wait_device_ops")
    natives = {
        f"{XM}.master_print": "`if dist.get_rank() == 0: print(...)`",
        f"{XM}.save": ('`if int(os.environ.get("LOCAL_RANK", 0)) == 0: torch.save(<data with tensors moved to the CPU>, '
                       'path)` then `dist.barrier()`'),
        f"{XM}.rendezvous": "dist.barrier() (payloads: dist.all_gather_object)",
        f"{XM}.wait_device_ops": "torch.accelerator.synchronize()",
    }
    why = """
        `xm.master_print(*args, fd=sys.stdout, local=False, flush=False)` printed on the global
        master only; it becomes `if <rank> == 0: print(*args, file=fd, flush=flush)`.
        `xm.save(data, path, master_only=True, global_master=False)` saved on every host's local
        master (LOCAL_RANK 0; the global rank 0 with `global_master=True`; every process with
        `master_only=False`), after moving every tensor of `data` to the CPU, then waited for
        every rank (a rendezvous). It becomes that check around `torch.save(data', path)` where
        `data'` is `torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, data)` (the
        same nested dicts/lists with CPU tensors: a file saved from `neuron` tensors cannot be
        loaded on a CPU machine without `map_location`), followed by `dist.barrier()` in a module
        with a process group; no check at all where the statement is already inside
        `if xm.is_master_ordinal():` (and no barrier there: the other ranks never reach it).
        `xm.rendezvous(tag)` becomes `dist.barrier()` and `xm.wait_device_ops()` becomes
        `torch.accelerator.synchronize()`.
    """
    before = """
        import torch
        import torch.distributed as dist
        import torch_xla.core.xla_model as xm

        dist.init_process_group("xla")
        xm.master_print(f"epoch {epoch} loss {loss:.4f}")
        xm.rendezvous("checkpoint")
        xm.save(model.state_dict(), "model.pt")
    """
    after = """
        import os
        import torch
        import torch.distributed as dist

        dist.init_process_group(backend="neuron")
        if dist.get_rank() == 0:
            print(f"epoch {epoch} loss {loss:.4f}")
        dist.barrier()
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            torch.save(torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.cpu, model.state_dict()), "model.pt")
        dist.barrier()
    """
    caveats = """
        `torch.utils._pytree` is torch's own (private but long-stable) nested-structure mapper;
        objects other than dicts, lists, tuples and namedtuples are saved as they are, as
        `xm.save` did. `dist.barrier()` needs a process group: in a module that
        never calls `init_process_group` it gets a marker. A module that asks whether one exists
        (`dist.is_initialized()`) runs without one too, where the rendezvous did nothing: its
        barrier becomes `if dist.is_initialized(): dist.barrier()`; so does a module whose only
        process-group maker is a Trainer / TrainingArguments / DistributedConfig (a group exists only
        under torchrun), whose rank test reads `RANK`. A rendezvous whose payloads are used,
        `replicas=`, master_print/save calls inside an expression or on a line with other
        statements, and a master_print whose arguments change state (`d.pop(k)`, `next(it)`: the
        rank test would run them on rank 0 only) get a marker. Consecutive master_prints share one
        rank test; of the barriers of a module without a process group, the first is marked.
    """

    def rewrite(self, qual, call, func, ctx):
        name = qual.rsplit(".", 1)[1]
        return getattr(self, f"_{name}")(qual, call, func, ctx)

    def _master_print(self, qual, call, func, ctx):
        kws = {a.keyword.value: a for a in call.args if a.keyword is not None}
        if set(kws) - {"fd", "local", "flush"} or any(a.star == "**" for a in call.args):
            return "unsupported arguments"
        local = _literal_bool(kws.get("local"), False)
        if local is None:
            return "`local=` is not a literal"
        changes = _state_change(call)
        if changes:
            return f"its arguments change state (`{changes}`): compute them on every rank"

        def print_args(updated: cst.Call) -> list[cst.Arg]:
            args = []
            for arg in updated.args:
                name = arg.keyword.value if arg.keyword is not None else None
                if name == "local":
                    continue
                if name == "fd":
                    arg = arg.with_changes(keyword=cst.Name("file"))
                args.append(arg)
            return args

        return self._guarded(call, func, ctx, local, "print", print_args)

    SAVE_PARAMS = ("data", "file_or_path", "master_only", "global_master")

    def _save(self, qual, call, func, ctx):
        bound = _bind_args(call, self.SAVE_PARAMS)
        if bound is None or "data" not in bound or "file_or_path" not in bound:
            return "unsupported arguments"
        master_only = _literal_bool(bound.get("master_only"), True)
        global_master = _literal_bool(bound.get("global_master"), False)
        if master_only is None or global_master is None:
            return "`master_only=` / `global_master=` is not a literal"
        params = self.SAVE_PARAMS
        anchor = ctx.imports.binding_of(func)
        torch = _torch(ctx, anchor)

        def save_args(updated: cst.Call) -> list[cst.Arg]:
            # xm.save moved every tensor of `data` (nested in dicts, lists, tuples) to the CPU first:
            # a file saved from `neuron` tensors needs map_location to load anywhere else
            b = _bind_args(updated, params)
            assert b is not None
            data = b["data"].value
            cpu = _expr(f"{torch}.utils._pytree.tree_map_only({torch}.Tensor, {torch}.Tensor.cpu, {_code(data)})")
            return [_positional(b["data"]).with_changes(value=cpu), _positional(b["file_or_path"])]

        return self._guarded(call, func, ctx, not global_master, f"{torch}.save", save_args,
                             everyone=not master_only, barrier=True)

    def _guarded(self, call, func, ctx, local: bool, target: str,
                 make_args: Callable[[cst.Call], list[cst.Arg]], everyone: bool = False,
                 barrier: bool = False) -> str | None:
        """Rewrite the statement ``old(...)`` into ``if <master>: target(...)`` (no check when
        the statement is already inside the same master check, or when ``everyone`` runs it).
        With ``barrier``, ``dist.barrier()`` follows, as torch-xla's rendezvous did, in a module
        with a process group and outside a master-only block (where the other ranks never come)."""
        statement = _expression_statement(ctx, call)
        if statement is None or not isinstance(statement[1], cst.SimpleStatementLine) or len(statement[1].body) != 1:
            return "it is not a statement of its own; guard it with a rank-0 test"
        line = statement[1]
        anchor = ctx.imports.binding_of(func)
        guarded = _already_master_only(ctx, line, local)
        test = None if guarded or everyone else _is_master(ctx, anchor, local)
        # inside any master-only block the other ranks never reach a barrier
        alone = guarded or _already_master_only(ctx, line, not local)
        wait = None
        if barrier and not alone and _has_process_group(ctx):
            dist = _dist(ctx, anchor)
            wait = f"if {dist}.is_initialized():\n    {dist}.barrier()" if without_group(ctx) else f"{dist}.barrier()"

        def new_call(updated: cst.Call) -> cst.Call:
            args = _end_like(make_args(updated), updated.args)
            return updated.with_changes(func=_expr(target), args=args)

        def build(updated_line: cst.SimpleStatementLine):
            small = updated_line.body[0]
            assert isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
            inner = small.with_changes(value=new_call(small.value))
            if test is None:
                new: cst.BaseStatement = updated_line.with_changes(body=[inner])
            else:
                new = _if_statement(updated_line, test, inner)
            if wait is None:
                return new
            return cst.FlattenSentinel([new, cst.parse_statement(wait + "\n")])

        ctx.replace(line, build)
        where = ("every process" if everyone else "the enclosing master check" if guarded else f"`if {test}:`")
        then = wait if wait is None or "\n" not in wait else wait.rsplit(" ", 1)[1] + " where a process group exists"
        ctx.finding(call, f"{dotted(func)}(...) -> {target}(...) by {where}" + (f", then {then}" if wait else ""))
        return None

    def _rendezvous(self, qual, call, func, ctx):
        bound = _bind_args(call, ("tag", "payload", "replicas"))
        if bound is None:
            return "unsupported arguments"
        replicas = bound.get("replicas")
        if replicas is not None and not (isinstance(replicas.value, cst.List) and not replicas.value.elements):
            return "use dist.barrier(group=dist.new_group(replicas))"
        statement = _expression_statement(ctx, call)
        if statement is None:
            return "its payloads are used; exchange them with dist.all_gather_object"
        anchor = ctx.imports.binding_of(func)
        dist = _dist(ctx, anchor)
        _, container = statement
        if isinstance(container, cst.SimpleStatementLine) and len(container.body) == 1 and without_group(ctx):
            # the module runs without a process group too: the rendezvous was a no-op in a single process,
            # dist.barrier() would raise there
            def guarded(updated: cst.SimpleStatementLine) -> cst.If:
                stmt = cst.parse_statement(f"if {dist}.is_initialized():\n    {dist}.barrier()\n")
                assert isinstance(stmt, cst.If) and isinstance(stmt.body, cst.IndentedBlock)
                line = stmt.body.body[0].with_changes(trailing_whitespace=updated.trailing_whitespace)
                return stmt.with_changes(leading_lines=updated.leading_lines,
                                         body=stmt.body.with_changes(body=[line]))
            ctx.replace(container, guarded)
            ctx.finding(call, f"{qual}() -> dist.barrier() where a process group exists (the module runs without "
                              "one too)")
            return None
        ctx.replace(call, _expr(f"{dist}.barrier()"))
        ctx.finding(call, f"{qual}() -> dist.barrier()")
        if not _has_process_group(ctx) and not ctx.local_state().get("group marker"):
            # (one marker, on the first barrier of the unit: the advice holds for the module)
            ctx.local_state()["group marker"] = True
            ctx.marker(
                call,
                "dist.barrier() needs a process group: make sure dist.init_process_group(backend=\"neuron\") "
                "runs first (torchrun)",
            )
        return None

    def _wait_device_ops(self, qual, call, func, ctx):
        if call.args:
            return "unsupported arguments"
        ctx.replace(call, _expr(f"{_torch(ctx, ctx.imports.binding_of(func))}.accelerator.synchronize()"))
        ctx.finding(call, f"{qual}() -> torch.accelerator.synchronize()")
        return None




def _end_like(args: list[cst.Arg], original: tuple[cst.Arg, ...] | list[cst.Arg]) -> list[cst.Arg]:
    """``args`` ending the way ``original`` ended (trailing comma, newline before ``)``)."""
    if args and original:
        last = original[-1]
        args = list(args)
        args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return args


def _positional(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)


# --------------------------------------------------------------------------- NM406


class XlaProcessGroup(_XlaRule):
    id = "NM406"
    title = "init_process_group(\"xla\") -> init_process_group(backend=\"neuron\"); drop the xla_backend import"
    triggers = ("torch_xla", "xla://", "pjrt://", '"xla"', "'xla'")
    owns = (XLA_BACKEND,)
    natives = {XLA_BACKEND: 'nothing: dist.init_process_group(backend="neuron") needs no import'}
    why = """
        torch-xla registered its "xla" process-group backend when `torch_xla.distributed.xla_backend`
        was imported, and `init_method="xla://"` read the ranks from the XLA runtime. TorchNeuron
        registers the `neuron` backend itself and torchrun provides the ranks through the
        environment (the default `env://`), so the import goes and the call becomes
        `init_process_group(backend="neuron")`, in every spelling (`dist.`, the full dotted name,
        an imported `init_process_group`; positional or keyword). torch-xla's rendezvous
        `init_method="xla://"` / `"pjrt://"` does not exist natively and is dropped, so that
        torchrun's `env://` applies.
    """
    before = """
        import torch.distributed as dist
        import torch_xla.distributed.xla_backend

        dist.init_process_group("xla", init_method="xla://")
    """
    after = """
        import torch.distributed as dist

        dist.init_process_group(backend="neuron")
    """
    caveats = """
        The literal backend "xla" is rewritten here; a backend held in a variable assigned the
        literal "xla" is rewritten at its assignment (NM401 follows it); other arguments (timeout, world_size, rank...) are kept. Where the function
        around the call (else the module) sets `NXD_CPU_MODE=1`, neuronx-distributed ran that "xla"
        group on the CPU (a test's CPU golden): it becomes `backend="gloo"`; so it does in a
        function whose name (`init_cpu_env`) or docstring ("for running the model on CPU") says it
        runs on the CPU. The import is kept while the
        `torch_xla` name it binds is still used by code that no rule rewrote.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Name] = self._on_name
        return table

    def rewrite(self, qual, call, func, ctx):  # pragma: no cover - the module is never called
        return "torch_xla.distributed.xla_backend is imported for its side effect only"

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        if node.value == "torch_xla" and _is_reference(node, ctx.parent):
            ctx.local_state()["torch_xla_refs"] = True
        self._on_reference(node, ctx)

    def _on_reference(self, node, ctx):
        qual = ctx.qualname(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if qual == XLA_BACKEND and not (isinstance(node, cst.Name) and node.value == "torch_xla"):
            ctx.local_state()["backend_refs"] = True
        if qual is not None and qual.startswith(XLA_BACKEND + "."):
            ctx.local_state()["backend_refs"] = True
            parent = ctx.parent
            if not (isinstance(parent, cst.Attribute) and parent.value is node):
                ctx.marker(node, f"{qual} has no native equivalent: the `neuron` backend needs no import")
            return
        super()._on_reference(node, ctx)

    def _on_call(self, call: cst.Call, ctx: PythonContext) -> None:
        if not isinstance(call.func, (cst.Name, cst.Attribute)):
            return
        if ctx.qualname(call.func) not in ("torch.distributed.init_process_group",
                                           "torch.distributed.distributed_c10d.init_process_group"):
            return
        params = ("backend", "init_method")
        backend = init_method = None
        positional = 0
        for arg in call.args:
            if arg.star:
                return
            if arg.keyword is None:
                if positional < len(params):
                    if positional == 0:
                        backend = arg
                    else:
                        init_method = arg
                positional += 1
            elif arg.keyword.value == "backend":
                backend = arg
            elif arg.keyword.value == "init_method":
                init_method = arg
        swap = backend is not None and _is_string(backend.value, "xla")
        drop_init = init_method is not None and any(_is_string(init_method.value, m) for m in _XLA_INIT_METHODS)
        if not swap and not drop_init:
            return
        # positional arguments after the ones we touch would shift: then only swap the string
        keep_positional = positional > (1 if not drop_init or init_method.keyword is not None else 2)
        if drop_init and init_method.keyword is None and keep_positional:
            drop_init = False
            ctx.marker(call, f"init_method={_code(init_method.value)} was torch-xla's rendezvous: remove it so that "
                             "torchrun's environment (env://) applies")
            if not swap:
                return
        q = backend.value.quote if swap else '"'  # type: ignore[union-attr]
        target = "gloo" if swap and _cpu_mode(ctx) else "neuron"

        def build(updated: cst.Call) -> cst.Call:
            args = []
            for i, arg in enumerate(updated.args):
                orig = call.args[i]
                if orig is backend and swap:
                    value = cst.SimpleString(f"{q}{target}{q}")
                    if orig.keyword is None and not keep_positional:
                        arg = _keyword("backend", value).with_changes(comma=arg.comma)
                    else:
                        arg = arg.with_changes(value=value)
                elif orig is init_method and drop_init:
                    continue
                args.append(arg)
            return updated.with_changes(args=_end_like(args, updated.args))

        ctx.replace(call, build)
        if swap and target == "gloo":
            ctx.finding(call, "init_process_group(\"xla\") of a CPU run -> backend=\"gloo\" (a CPU process group)")
        elif swap:
            ctx.finding(call, "init_process_group(\"xla\") -> init_process_group(backend=\"neuron\")")
        if drop_init:
            ctx.finding(call, f"init_method={_code(init_method.value)} (torch-xla rendezvous) dropped: torchrun's "
                              "env:// applies")

    def finish(self, ctx: PythonContext) -> None:
        refs = ctx.local_state().get("torch_xla_refs", False)
        for b in list(ctx.imports.all_bindings()):
            if b.alias is None:
                continue
            if b.is_from or b.alias.asname is not None:
                if b.qualified != XLA_BACKEND or ctx.local_state().get("backend_refs"):
                    continue
            else:
                if dotted(b.alias.name) != XLA_BACKEND:
                    continue
                else:
                    others = [o for o in ctx.imports.bindings.get(b.local, ()) if o is not b]
                    # `import torch_xla.distributed.xla_backend` also binds `torch_xla`: keep it while
                    # that name is used and nothing else binds it (it goes with its last use)
                    if refs and not others:
                        continue
            ctx.remove_import(b)
            ctx.finding(b.alias, f"import of {XLA_BACKEND} removed (the `neuron` backend needs no import)")


#: torch-xla's rendezvous handlers (torch_xla/distributed/xla_backend.py, torch_xla/_internal/rendezvous.py)
_XLA_INIT_METHODS = ("xla://", "pjrt://")


#: ``os.environ["NXD_CPU_MODE"] = "1"`` (or setdefault/putenv): neuronx-distributed's CPU mode, in which
#: its "xla" process group ran on the CPU (a CPU golden of a test)
_CPU_MODE = re.compile(r"""NXD_CPU_MODE['"]\s*(?:\]\s*=|,)\s*['"]1['"]""")


#: a function's docstring saying that it runs on the CPU ("just for running the models on CPU to validate")
_RUNS_ON_CPU = re.compile(r"(?i)\b(?:on|for) (?:the )?cpu\b")


def _cpu_mode(ctx: PythonContext) -> bool:
    """Whether the function around the call (else the module) turns on NxD's CPU mode, or is a function whose
    name (``init_cpu_env``) or docstring says that it runs on the CPU."""
    scope = next((a for a in reversed(ctx.stack) if isinstance(a, FUNCTIONS)), ctx.module)
    if isinstance(scope, cst.FunctionDef) and (re.search(r"(?:^|_)cpu(?:_|$)", scope.name.value.lower())
                                               or _RUNS_ON_CPU.search(scope.get_docstring() or "")):
        return True
    return bool(_CPU_MODE.search(ctx.module.code_for_node(scope)))


def _is_string(node: cst.BaseExpression, value: str) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value == value


RULES = (XlaDevice, XlaStepMarkers, XlaOptimizerStep, XlaRankQueries, XlaMasterOnlyAndSync, XlaProcessGroup)
