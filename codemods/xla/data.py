"""NM407-NM409: torch-xla data loading, process launch and precision idioms -> native PyTorch.

* NM407 ``pl.MpDeviceLoader(loader, device)`` / ``pl.ParallelLoader(loader, [device])
  .per_device_loader(device)`` -> the plain loader, each batch moved to the device at the top of
  the loop that iterates it.
* NM408 ``xmp.spawn(fn, args=(...), nprocs=N)`` -> ``fn(LOCAL_RANK, *args)`` under torchrun.
* NM409 ``torch_xla.amp.autocast`` / ``torch.autocast("xla")`` -> ``torch.autocast("neuron")``,
  ``torch_xla.amp.syncfree`` optimizers -> ``torch.optim``, metrics reports dropped and
  ``os.environ["XLA_USE_BF16"] = "1"`` replaced by a note about the bf16 intent.

Facts and signatures: torch-xla 2.8 ``torch_xla/distributed/parallel_loader.py``,
``xla_multiprocessing.py``, ``amp/autocast_mode.py``, ``amp/syncfree`` (source-apis §4.1/§4.2).
Shared spelling helpers (local rank, quotes, imports) come from :mod:`codemods.xla.core`.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.statements import with_blank_line
from codemods.project.xla_env import BF16_VARS
from codemods.xla.env_writes import (
    after_settings,
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
from codemods.xla.environment import launcher_sets_bf16, mark_reads
from codemods.xla.base import (
    _XlaRule,
    _bind_args,
    _call_args,
    _code,
    _expr,
    _expression_statement,
    _index_in_stack,
    _is_reference,
    _keep_blank_line,
    _local_rank,
    _quote,
    _remove_small_statement,
    _torch,
)
from migrator.imports import dotted
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext

PL = "torch_xla.distributed.parallel_loader"
XMP = "torch_xla.distributed.xla_multiprocessing"
AMP = "torch_xla.amp"
MET = "torch_xla.debug.metrics"

# --------------------------------------------------------------------------- NM407


def _scope_of(ctx: PythonContext, index: int) -> cst.CSTNode:
    """The innermost function (or the module) around ``ctx.stack[index]``."""
    for j in range(index - 1, -1, -1):
        if isinstance(ctx.stack[j], (cst.FunctionDef, cst.Lambda)):
            return ctx.stack[j]
    return ctx.stack[0]


#: code that runs on CUDA besides an autocast: `.cuda()`, `torch.cuda.*` calls, a "cuda" device
_CUDA_CODE = re.compile(r"\.cuda\(|torch\.cuda\.(?!amp\b)|device\s*=\s*[\"']cuda|torch\.device\(\s*[\"']cuda")

class _Uses(cst.CSTVisitor):
    """Uses of one name inside one scope: loops over it, ``len(name)``, anything else."""

    def __init__(self, name: str, scope: cst.CSTNode) -> None:
        super().__init__()
        self.name = name
        self.scope = scope
        self.depth = 0  # > 0 inside a nested function/class/lambda
        self.loops: list[tuple[cst.For, cst.Name, cst.BaseExpression]] = []  # (loop, name node, batch target)
        self.harmless: list[cst.Name] = []  # len(name)
        self.handled: set[int] = set()
        self.other = 0
        self.stores = 0

    def _nested(self, node) -> bool:
        if node is not self.scope:
            self.depth += 1
        return True

    def _leave_nested(self, node) -> None:
        if node is not self.scope:
            self.depth -= 1

    visit_FunctionDef = visit_ClassDef = visit_Lambda = _nested
    leave_FunctionDef = leave_ClassDef = leave_Lambda = _leave_nested

    def visit_For(self, node: cst.For) -> bool:
        if self.depth or node.asynchronous is not None:
            return True
        it = node.iter
        if isinstance(it, cst.Name) and it.value == self.name:
            self.loops.append((node, it, node.target))
            self.handled.add(id(it))
        elif (
            isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "enumerate"
            and it.args and it.args[0].keyword is None and not it.args[0].star
            and isinstance(it.args[0].value, cst.Name) and it.args[0].value.value == self.name
            and isinstance(node.target, cst.Tuple) and len(node.target.elements) == 2
        ):
            self.loops.append((node, it.args[0].value, node.target.elements[1].value))
            self.handled.add(id(it.args[0].value))
        return True

    def visit_Call(self, node: cst.Call) -> bool:
        if (
            isinstance(node.func, cst.Name) and node.func.value == "len" and len(node.args) == 1
            and isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == self.name
        ):
            self.harmless.append(node.args[0].value)
            self.handled.add(id(node.args[0].value))
        return True

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        if isinstance(node.target, cst.Name) and node.target.value == self.name:
            self.stores += 1
            self.handled.add(id(node.target))
        return True

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False  # the attribute name is not a use

    def visit_Param(self, node: cst.Param) -> bool:
        for part in (node.annotation, node.default):
            if part is not None:
                part.visit(self)
        return False  # a parameter's name binds the name, it does not use it

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False  # a keyword is not a use

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and (id(node) not in self.handled or self.depth):
            self.other += 1


_DICT_USE = r"\b{n}\s*\[\s*[rbuf]*['\"]|\b{n}\.(?:items|keys|values|get)\s*\(|\*\*\s*{n}\b"
_SEQ_USE = r"\b{n}\s*\[\s*-?\d|^\s*[\w\s,()]+=\s*{n}\s*$"


def _batch_kind(body_code: str, name: str) -> str:
    n = re.escape(name)
    if re.search(_DICT_USE.format(n=n), body_code, re.M):
        return "dict"
    if re.search(_SEQ_USE.format(n=n), body_code, re.M):
        return "seq"
    return "tensor"


def _move_statement(target: cst.BaseExpression, device: str, body_code: str) -> tuple[str, str] | None:
    """(statement moving the batch bound to ``target`` to ``device``, what it is) or None."""
    if isinstance(target, cst.Name):
        name = target.value
        kind = _batch_kind(body_code, name)
        if kind == "dict":
            k, v = ("k", "v") if device not in ("k", "v") else ("key", "value")
            return f"{name} = {{{k}: {v}.to({device}) for {k}, {v} in {name}.items()}}", "dict batch"
        if kind == "seq":
            t = "t" if device != "t" else "item"
            return f"{name} = [{t}.to({device}) for {t} in {name}]", "sequence batch"
        return f"{name} = {name}.to({device})", "tensor batch"
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        names = []
        for el in target.elements:
            if not isinstance(el, cst.Element) or not isinstance(el.value, cst.Name):
                return None
            names.append(el.value.value)
        moved = ", ".join(f"{n}.to({device})" for n in names)
        return f"{', '.join(names)} = {moved}", "tuple batch"
    return None


def _already_moved(body: cst.IndentedBlock, target: cst.BaseExpression) -> bool:
    """Whether the loop body moves its batch itself on every pass: a ``name = ....to(...)`` statement for each name
    of the target, directly in the body or in a ``with`` block of it. A move under an ``if`` (``if backend !=
    "xla": batch = batch.to(device)``, the other backends' path) or a ``try`` does not count: on the path the
    device loader served, nothing would move the batch."""
    names = [target.value] if isinstance(target, cst.Name) else [
        el.value.value for el in getattr(target, "elements", ()) if isinstance(el.value, cst.Name)
    ]
    moved: set[str] = set()
    for line in _unconditional(body):
        for small in line.body:
            if not isinstance(small, cst.Assign) or ".to(" not in _code(small.value):
                continue
            for t in small.targets:  # `x = x.to(d)`, `x, y = x.to(d), y.to(d)`
                elements = getattr(t.target, "elements", None)
                targets = [el.value for el in elements] if elements is not None else [t.target]
                moved.update(n.value for n in targets if isinstance(n, cst.Name))
    return bool(names) and all(n in moved for n in names)


def _unconditional(block: cst.BaseSuite):
    """The simple statement lines that run on every pass through ``block`` (those of its ``with`` blocks too)."""
    for statement in getattr(block, "body", ()):
        if isinstance(statement, cst.SimpleStatementLine):
            yield statement
        elif isinstance(statement, cst.With):
            yield from _unconditional(statement.body)


class XlaDeviceLoader(_XlaRule):
    id = "NM407"
    markers = (
        ("Move the batches read from {what} with .to(device) where used (the {name} did it).",
         """The torch-xla device loader (MpDeviceLoader / ParallelLoader) moved every batch to the XLA device;
         the plain DataLoader it becomes does not, so each batch read from it must be moved with
         .to(device) where it is used (the rule does it itself at the top of the loops it can see)."""),
    )
    title = "pl.MpDeviceLoader / ParallelLoader -> the plain DataLoader, batches moved to the device in the loop"
    fix = "mixed"
    triggers = ("parallel_loader",)
    owns = (f"{PL}.MpDeviceLoader", f"{PL}.ParallelLoader")
    natives = {
        f"{PL}.MpDeviceLoader": "the plain DataLoader with `batch = batch.to(device)` in the loop",
        f"{PL}.ParallelLoader": "the plain DataLoader with `batch = batch.to(device)` in the loop",
    }
    why = """
        `pl.MpDeviceLoader(loader, device)` (and `pl.ParallelLoader(loader, [device])
        .per_device_loader(device)`) wrapped a DataLoader and copied every batch to the XLA device
        in background threads. On TorchNeuron the plain DataLoader is iterated and the batch is
        moved with `.to(device)` at the top of the loop body: `x, y = x.to(device), y.to(device)`
        for a tuple, `batch = {k: v.to(device) for k, v in batch.items()}` for a dict batch (one
        read as `batch["..."]`, `batch.items()` or `**batch`), `batch = batch.to(device)` for a
        tensor. A wrapper variable used only by loops (and `len()`) is dropped and the loops
        iterate the DataLoader itself; so is `para = pl.ParallelLoader(loader, [device])` whose only
        uses are loops over `para.per_device_loader(device)`.
    """
    before = """
        import torch_xla.distributed.parallel_loader as pl

        def train(model, train_loader, device):
            train_device_loader = pl.MpDeviceLoader(train_loader, device)
            for x, y in train_device_loader:
                loss = model(x, y)
    """
    after = """
        def train(model, train_loader, device):
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                loss = model(x, y)
    """
    caveats = """
        The loop must be in the same function as the wrapper (directly or through
        `enumerate(...)`) and the device a variable; otherwise the loader is unwrapped and a marker
        asks to move the batches where they are used. Nested or starred loop targets, batches read
        with `next(iter(...))` and a `ParallelLoader` kept in a variable for other uses get a marker. The
        prefetching options (`loader_prefetch_size`, `device_prefetch_size`, ...) are dropped: use
        the DataLoader's `num_workers` / `pin_memory` / `prefetch_factor`.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.For] = self._on_for
        base = table[cst.Name]

        def on_name(node: cst.Name, ctx: PythonContext) -> None:
            pending = ctx.local_state().get("names", {})
            if id(node) in pending:
                ctx.replace(node, pending.pop(id(node)))
            base(node, ctx)

        table[cst.Name] = on_name
        base_call = table.get(cst.Call)

        def on_call(node: cst.Call, ctx: PythonContext) -> None:
            pending = ctx.local_state().get("calls", {})
            if id(node) in pending:  # `para.per_device_loader(device)` of a dropped ParallelLoader
                ctx.replace(node, pending.pop(id(node)))
            if base_call is not None:
                base_call(node, ctx)

        table[cst.Call] = on_call
        return table

    def _parallel_loader_variable(self, qual, call, index, ctx) -> bool:
        """``para = pl.ParallelLoader(loader, [device])`` whose every use in the function is a loop over
        ``para.per_device_loader(device)``: the loops iterate the DataLoader and move each batch."""
        parent, line = ctx.stack[index - 1], ctx.stack[index - 2]
        if not (isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)
                and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            return False
        params = ("cpu_loader", "devices", "batchdim", "batches_per_execution", "loader_prefetch_size",
                  "device_prefetch_size", "host_to_device_transfer_threads", "input_sharding")
        bound = _bind_args(call, params)
        if bound is None or "cpu_loader" not in bound or "devices" not in bound:
            return False
        devices = bound["devices"].value
        if not (isinstance(devices, cst.List) and len(devices.elements) == 1
                and isinstance(devices.elements[0], cst.Element)):
            return False
        device = devices.elements[0].value
        device_code = _code(device)
        if dotted(device) is None or ctx.qualname(device) is not None:
            return False
        var = parent.targets[0].target.value
        scope = _scope_of(ctx, index)
        loops = _per_device_loops(scope, var, device_code)
        if loops is None:
            return False
        loader = bound["cpu_loader"].value
        state = ctx.local_state()
        replacement = cst.Name(loader.value) if isinstance(loader, cst.Name) else cst.Name(var)
        for loop, pdl_call, batch in loops:
            state.setdefault("loops", {})[id(loop)] = (batch, device_code)
            state.setdefault("calls", {})[id(pdl_call)] = replacement
        if isinstance(loader, cst.Name):
            _drop_statement(ctx, parent, line)
            ctx.finding(call, f"ParallelLoader(...) removed: the loops iterate {loader.value} and move each batch to "
                              f"{device_code}")
        else:
            ctx.replace(call, lambda u: _bind_args(u, params)["cpu_loader"].value)
            ctx.finding(call, "ParallelLoader(loader, [device]) -> loader")
        return True

    def _on_for(self, node: cst.For, ctx: PythonContext) -> None:
        loops = ctx.local_state().get("loops", {})
        job = loops.pop(id(node), None)
        if job is not None:
            self._move_in_loop(node, job[0], job[1], ctx)

    def rewrite(self, qual, call, func, ctx):
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return None  # `# neuron-migrate: ignore[NM407]`: leave the loader and its loops alone
        i = _index_in_stack(ctx, call)
        if qual.endswith(".ParallelLoader"):
            attr = ctx.stack[i - 1] if i >= 1 else None
            outer = ctx.stack[i - 2] if i >= 2 else None
            if not (
                isinstance(attr, cst.Attribute) and attr.value is call and attr.attr.value == "per_device_loader"
                and isinstance(outer, cst.Call) and outer.func is attr
            ):
                if self._parallel_loader_variable(qual, call, i, ctx):
                    return None
                return "iterate the DataLoader and move each batch with .to(device)"
            bound = _bind_args(call, ("cpu_loader", "devices", "batchdim", "batches_per_execution",
                                      "loader_prefetch_size", "device_prefetch_size",
                                      "host_to_device_transfer_threads", "input_sharding"))
            dev = _bind_args(outer, ("device",))
            if bound is None or "cpu_loader" not in bound or dev is None or "device" not in dev:
                return "unsupported arguments"
            return self._unwrap(qual, outer, i - 2, lambda u: u.func.value.args[0].value,
                                bound["cpu_loader"].value, dev["device"].value, ctx)
        bound = _bind_args(call, ("loader", "device"))
        if bound is None:
            # **kwargs of MpDeviceLoader go to ParallelLoader: prefetch options only
            positional = [a for a in call.args if a.keyword is None and not a.star]
            kws = {a.keyword.value: a for a in call.args if a.keyword is not None}
            if any(a.star for a in call.args) or len(positional) > 2:
                return "unsupported arguments"
            bound = {**kws}
            for name, arg in zip(("loader", "device"), positional):
                bound[name] = arg
        if "loader" not in bound or "device" not in bound:
            return "unsupported arguments"
        return self._unwrap(qual, call, i, lambda u: _loader_arg(u), bound["loader"].value, bound["device"].value, ctx)

    def _unwrap(self, qual, call, index, loader_of, loader, device, ctx) -> str | None:
        name = qual.rsplit(".", 1)[1]
        device_code = _code(device)
        simple_device = dotted(device) is not None and ctx.qualname(device) is None
        parent = ctx.stack[index - 1]

        def plain(updated: cst.Call) -> cst.BaseExpression:
            return loader_of(updated)

        # `for batch in pl.MpDeviceLoader(loader, device):` (or through enumerate)
        loop, target = _loop_over(ctx, index, call)
        if loop is not None:
            ctx.replace(call, plain)
            ctx.finding(call, f"{name}(loader, device) -> loader")
            if simple_device:
                self._move_in_loop(loop, target, device_code, ctx)
            else:
                ctx.marker(loop, f"move each batch to the device at the top of this loop (the {name} did it)")
            return None

        # `name = pl.MpDeviceLoader(loader, device)` and loops over `name` in the same function
        if not (isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1
                and isinstance(parent.targets[0].target, cst.Name)):
            ctx.replace(call, plain)
            ctx.finding(call, f"{name}(loader, device) -> loader")
            ctx.marker(call, f"Move the batches read from this loader with .to(device) where used (the {name} did it).")
            return None
        var = parent.targets[0].target.value
        scope = _scope_of(ctx, index)
        uses = _Uses(var, scope)
        if isinstance(loader, cst.Name) and loader.value == var:
            uses.handled.add(id(loader))  # `loader = pl.MpDeviceLoader(loader, device)`: the wrapped loader is no use
        scope.visit(uses)
        line = ctx.stack[index - 2]
        if not uses.loops or not simple_device:
            ctx.replace(call, plain)
            ctx.finding(call, f"{name}(loader, device) -> loader")
            ctx.marker(call, f"Move the batches read from `{var}` with .to(device) where used (the {name} did it).")
            return None
        state = ctx.local_state()
        for loop_node, _name_node, batch in uses.loops:
            state.setdefault("loops", {})[id(loop_node)] = (batch, device_code)
        drop = (
            uses.other == 0 and uses.stores == 1 and isinstance(loader, cst.Name)
            and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
        )
        if drop:
            for _loop, name_node, _batch in uses.loops:
                state.setdefault("names", {})[id(name_node)] = cst.Name(loader.value)
            for name_node in uses.harmless:
                state.setdefault("names", {})[id(name_node)] = cst.Name(loader.value)
            _drop_statement(ctx, parent, line)
            ctx.finding(call, f"{name}(...) removed: the loops iterate {loader.value} and move each batch to "
                              f"{device_code}")
        else:
            ctx.replace(call, plain)
            ctx.finding(call, f"{name}(loader, device) -> loader")
            if uses.other:
                ctx.marker(call, f"`{var}` is also used outside the loops of this function: batches read "
                                 "there are no longer moved to the device (add .to(device))")
        return None

    def _move_in_loop(self, loop: cst.For, target: cst.BaseExpression, device: str, ctx: PythonContext) -> None:
        if not isinstance(loop.body, cst.IndentedBlock):
            ctx.marker(loop, "move the batch to the device at the top of this loop (the device loader did it)")
            return
        body_code = _code(loop.body)
        if _already_moved(loop.body, target):
            return
        found = _move_statement(target, device, body_code)
        if found is None:
            ctx.marker(loop, "move the batch to the device at the top of this loop (the device loader did it)")
            return
        code, kind = found
        stmt = cst.parse_statement(code + "\n")

        def prepend(updated: cst.For) -> cst.For:
            body = list(updated.body.body)
            return updated.with_changes(body=updated.body.with_changes(body=[stmt, *body]))

        ctx.replace(loop, prepend)
        ctx.finding(loop, f"{kind} moved to {device} at the top of the loop: {code}")


def _per_device_loops(scope: cst.CSTNode, var: str, device_code: str):
    """[(loop, the ``var.per_device_loader(device)`` call, batch target)] when every other use of ``var`` in
    ``scope`` (one assignment aside) is such a loop's iterable (directly or through ``enumerate``); else None."""
    loops, seen = [], set()

    class Finder(cst.CSTVisitor):
        names = 0

        def visit_For(self, node: cst.For) -> None:
            it, target = node.iter, node.target
            if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "enumerate" \
                    and it.args and isinstance(node.target, cst.Tuple) and len(node.target.elements) == 2:
                it, target = it.args[0].value, node.target.elements[1].value
            if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) \
                    and it.func.attr.value == "per_device_loader" and isinstance(it.func.value, cst.Name) \
                    and it.func.value.value == var and len(it.args) == 1 and _code(it.args[0].value) == device_code \
                    and node.asynchronous is None:
                loops.append((node, it, target))
                seen.add(id(it.func.value))

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == var:
                self.names += 1

    finder = Finder()
    scope.visit(finder)
    # the assignment's target and each loop's `var` are the only uses
    return loops if loops and finder.names == len(loops) + 1 else None


def _loader_arg(call: cst.Call) -> cst.BaseExpression:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == "loader":
            return a.value
    return next(a.value for a in call.args if a.keyword is None)


def _loop_over(ctx: PythonContext, index: int, call: cst.Call):
    """(For, batch target) when ``call`` is the iterable of a loop (directly or in enumerate())."""
    parent = ctx.stack[index - 1]
    if isinstance(parent, cst.For) and parent.iter is call and parent.asynchronous is None:
        return parent, parent.target
    if index >= 3:
        arg, enum, loop = ctx.stack[index - 1], ctx.stack[index - 2], ctx.stack[index - 3]
        if (
            isinstance(arg, cst.Arg) and arg.keyword is None and isinstance(enum, cst.Call)
            and enum.args and enum.args[0] is arg
            and isinstance(enum.func, cst.Name) and enum.func.value == "enumerate"
            and isinstance(loop, cst.For) and loop.iter is enum
            and isinstance(loop.target, cst.Tuple) and len(loop.target.elements) == 2
        ):
            return loop, loop.target.elements[1].value
    return None, None


# --------------------------------------------------------------------------- NM408


class XlaSpawn(_XlaRule):
    id = "NM408"
    markers = (
        ("Launch this script with `torchrun --nproc_per_node={n} <script>` (it replaces xmp.spawn).",
         """xmp.spawn started one process per NeuronCore inside the script; natively torchrun starts them (and
         sets RANK, LOCAL_RANK and WORLD_SIZE), so the script runs its function once per process and is
         launched with torchrun --nproc_per_node=<number of NeuronCores>."""),
    )
    title = "xmp.spawn(fn, args, nprocs) -> fn(LOCAL_RANK, *args) launched by torchrun"
    fix = "mixed"
    triggers = ("xla_multiprocessing",)
    owns = (f"{XMP}.spawn",)
    natives = {f"{XMP}.spawn": "fn(int(os.environ.get(\"LOCAL_RANK\", 0)), *args) under torchrun"}
    why = """
        `xmp.spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn")`
        started one process per device and called `fn(index, *args)` in each. On TorchNeuron
        torchrun starts the processes (one per NeuronCore) and sets `LOCAL_RANK`, so the script
        calls `fn(int(os.environ.get("LOCAL_RANK", 0)), *args)` directly and a marker gives the
        launch command.
    """
    before = """
        import torch_xla.distributed.xla_multiprocessing as xmp

        if __name__ == "__main__":
            xmp.spawn(_mp_fn, args=(flags,), nprocs=8)
    """
    after = """
        import os

        if __name__ == "__main__":
            # TODO(neuron-migrate NM408): Launch this script with `torchrun --nproc_per_node=8 <script>` (it replaces xmp.spawn).
            _mp_fn(int(os.environ.get("LOCAL_RANK", 0)), flags)
    """
    caveats = """
        `nprocs=None` (every device) becomes `--nproc_per_node=<number of NeuronCores>` in the
        marker. `join`, `daemon` and `start_method` are dropped. A spawn whose result is used, or
        with `*`/`**` arguments, gets a marker.
    """

    PARAMS = ("fn", "args", "nprocs", "join", "daemon", "start_method")

    def rewrite(self, qual, call, func, ctx):
        bound = _bind_args(call, self.PARAMS)
        if bound is None or "fn" not in bound:
            return "unsupported arguments"
        if _expression_statement(ctx, call) is None:
            return "its result is used"
        rank = _local_rank(ctx, ctx.imports.binding_of(func))
        params = self.PARAMS

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, params)
            assert b is not None
            fn = _code(b["fn"].value)
            extra = ""
            if "args" in b:
                value = b["args"].value
                if isinstance(value, cst.Tuple):
                    items = [("*" if isinstance(el, cst.StarredElement) else "") + _code(el.value)
                             for el in value.elements]
                    extra = "".join(f", {it}" for it in items)
                else:
                    extra = f", *{_code(value)}"
            return _expr(f"{fn}({rank}{extra})")

        ctx.replace(call, build)
        nprocs = bound.get("nprocs")
        if nprocs is None or (isinstance(nprocs.value, cst.Name) and nprocs.value.value == "None"):
            n = "<number of NeuronCores>"
        else:
            n = _code(nprocs.value)
            if not isinstance(nprocs.value, cst.Integer):
                n = f"<value of {n}>"
        fn_name = _code(bound["fn"].value)
        ctx.finding(call, f"xmp.spawn({fn_name}, ...) -> {fn_name}(LOCAL_RANK, ...)")
        launch = "Launch this script with `torchrun --nproc_per_node={n} <script>` (it replaces xmp.spawn)."
        ctx.marker(call, fitted(launch.format(n=n), launch.format(n="<number of processes>")))
        return None


# --------------------------------------------------------------------------- NM409

SYNCFREE = ("AdamW", "Adam", "SGD")
_REPORTS = (f"{MET}.metrics_report", f"{MET}.short_metrics_report")
_LOG_METHODS = ("print", "master_print", "info", "debug", "warning", "warn", "error", "write", "log")


class XlaPrecisionAndMetrics(_XlaRule):
    id = "NM409"
    title = "XLA autocast / syncfree optimizers / metrics reports / XLA_USE_BF16 -> torch.autocast('neuron'), torch.optim"
    fix = "mixed"
    triggers = ("torch_xla", "XLA_USE_BF16", "XLA_DOWNCAST_BF16", '"xla"', "'xla'")
    owns = (
        f"{AMP}.autocast",
        f"{AMP}.autocast_mode.autocast",
        *(f"{AMP}.syncfree.{n}" for n in SYNCFREE),
        *_REPORTS,
    )
    natives = {
        f"{AMP}.autocast": 'torch.autocast("neuron", dtype=torch.bfloat16)',
        f"{AMP}.autocast_mode.autocast": 'torch.autocast("neuron", dtype=torch.bfloat16)',
        **{f"{AMP}.syncfree.{n}": f"torch.optim.{n}" for n in SYNCFREE},
        **{r: "nothing (drop the report)" for r in _REPORTS},
    }
    why = """
        `torch_xla.amp.autocast(device, enabled=True, dtype=None, cache_enabled=True)` (bf16 on
        Neuron when `dtype` is None) and `torch.autocast("xla", ...)` become
        `torch.autocast("neuron", dtype=...)` with the dtype made explicit. The syncfree
        optimizers (`torch_xla.amp.syncfree.AdamW/Adam/SGD`, same arguments and defaults) existed
        to avoid a device-to-host sync on XLA: they become `torch.optim.AdamW/Adam/SGD`. The XLA
        metrics reports (`met.metrics_report()`, `met.short_metrics_report()`) do not exist: a
        statement that only prints or logs one is deleted. `os.environ["XLA_USE_BF16"] = "1"`
        (and `XLA_DOWNCAST_BF16`) no longer does anything: the statement is deleted and a marker
        carries the bf16 intent to the model's dtype or to autocast; the same in a mapping
        (`os.environ.update({...})`, `env={**os.environ, "XLA_USE_BF16": "1"}` of a subprocess,
        Ray's `env_vars`, through `codemods/xla/env_writes.py` as NM416): the entry goes, the marker
        stays on the statement. A READ of these variables
        (`if os.environ.get("XLA_USE_BF16"):`) becomes the launcher's value where the run's
        launchers set it (NM415); elsewhere it gets a marker, since the migrated launchers no
        longer set it and the test would silently choose float32.
    """
    before = """
        import torch
        import torch_xla.amp.syncfree as syncfree
        import torch_xla.debug.metrics as met
        from torch_xla.amp import autocast

        optimizer = syncfree.AdamW(model.parameters(), lr=1e-4)
        with autocast(device):
            loss = model(x)
        print(met.metrics_report())
    """
    after = """
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        with torch.autocast("neuron", dtype=torch.bfloat16):
            loss = model(x)
    """
    caveats = """
        A metrics report used in any other way (assigned, part of a larger message) gets a marker;
        other `torch_xla.debug.metrics` functions are flagged by NM900. `torch.autocast` with a
        device held in a variable is left alone. An `XLA_USE_BF16` setting that is the last
        statement of its block stays, with the marker.
    """

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Assign] = self._on_assign
        table[cst.Subscript] = self._on_read
        table[cst.Comparison] = self._on_read
        table[cst.Dict] = self._on_mapping
        return table

    # ---- bf16 switches in a mapping: os.environ.update({...}), env={**os.environ, ...}, Ray env_vars
    def _on_mapping(self, node: cst.CSTNode, ctx: PythonContext) -> None:
        found = mapping_entries(node, ctx)
        if found is None:
            return
        entries, known = found
        mine = [e for e in entries if e.name in BF16_VARS]
        if not mine:
            return
        if not known:
            ctx.marker(node, "if this dict is a process environment, drop XLA_USE_BF16 and set bf16 in the code it runs")
            return
        on = any(bf16_on(e) for e in mine)
        line = update_statement(node, ctx)
        if line is not None and all(removable(e) for e in entries):
            if on:  # nothing would be left to carry the marker: keep the setting, marked
                ctx.marker(node, f"{mine[0].name} has no effect on TorchNeuron: remove it and load the model in bfloat16 "
                                 "or use torch.autocast")
                return
            ctx.remove_statement(line[0])
            ctx.finding(node, "removed the settings of " + ", ".join(e.name for e in mine) + " (no effect on TorchNeuron)")
            return
        for entry in mine:
            drop_entry(entry, node, ctx)
            ctx.finding(entry.node, f"removed the setting of {entry.name} (no effect on TorchNeuron)")
        if on:
            ctx.marker(node, f"{mine[0].name}=1 was dropped here (no effect on TorchNeuron): load the model in bfloat16 "
                             "or use torch.autocast")

    def _on_read(self, node: cst.CSTNode, ctx: PythonContext) -> None:
        """XLA_USE_BF16/XLA_DOWNCAST_BF16 read: NM415 rewrites it where the run's launchers set it,
        else a marker (the migrated launchers no longer set it: the test reads as unset)."""
        named = ctx.scratch.get("_bf16_vars_named")
        if named is None:  # (once per unit, not once per string of it)
            named = ctx.scratch["_bf16_vars_named"] = "XLA_USE_BF16" in ctx.source or "XLA_DOWNCAST_BF16" in ctx.source
        if named and not launcher_sets_bf16(ctx):
            mark_reads(node, ctx)

    def rewrite(self, qual, call, func, ctx):
        if qual in _REPORTS:
            return self._report(qual, call, ctx)
        if qual.endswith(".autocast"):
            return self._xla_autocast(qual, call, func, ctx)
        return None  # syncfree: handled as a reference

    # ---- syncfree optimizers: rename every reference (calls and values alike)
    def _on_reference(self, node, ctx):
        parent = ctx.parent
        if isinstance(node, cst.Name) and not _is_reference(node, parent):
            return
        qual = ctx.qualname(node)
        if isinstance(node, cst.Name) and qual is not None and qual in self.owns:
            counts = ctx.local_state().setdefault("refs", {})
            counts[node.value] = counts.get(node.value, 0) + 1
        if qual is not None and qual.startswith(f"{AMP}.syncfree.") and qual in self.owns:
            name = qual.rsplit(".", 1)[1]
            try:
                expr = _expr(f"{_torch(ctx, ctx.imports.binding_of(node))}.optim.{name}")
            except NameClash as exc:
                ctx.marker(node, f"replace {qual} by torch.optim.{name} by hand ({exc})")
                return
            ctx.replace(node, expr)
            ctx.finding(node, f"{qual} -> torch.optim.{name}")
            self._done(node, ctx)
            return
        before = len(ctx._notes)
        super()._on_reference(node, ctx)
        if isinstance(node, cst.Name) and qual is not None and qual in self.owns and not any(
            n.fix == "manual" and n.rule == self.id for n in ctx._notes[before:]
        ):
            self._done(node, ctx)

    def _done(self, node, ctx: PythonContext) -> None:
        if isinstance(node, cst.Name):
            done = ctx.local_state().setdefault("done", {})
            done[node.value] = done.get(node.value, 0) + 1

    def finish(self, ctx: PythonContext) -> None:
        # `from torch_xla.amp import autocast`: the rewrite writes `torch.autocast`, whose attribute
        # name the engine counts as a use of the import; drop it when every use was rewritten
        state = ctx.local_state()
        refs, done = state.get("refs", {}), state.get("done", {})
        for local, n in refs.items():
            if done.get(local) != n:
                continue
            for b in ctx.imports.bindings.get(local, ()):
                if b.alias is not None and b.qualified in self.owns:
                    ctx.remove_import(b)

    # ---- autocast
    def _xla_autocast(self, qual, call, func, ctx):
        bound = _bind_args(call, ("device", "enabled", "dtype", "cache_enabled"))
        if bound is None:
            return "unsupported arguments"
        torch = _torch(ctx, ctx.imports.binding_of(func))
        q = _quote(ctx)
        has_dtype = "dtype" in bound

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, ("device", "enabled", "dtype", "cache_enabled"))
            assert b is not None
            parts = [f"{q}neuron{q}"]
            parts.append(f"dtype={_code(b['dtype'].value)}" if "dtype" in b else f"dtype={torch}.bfloat16")
            for k in ("enabled", "cache_enabled"):
                if k in b:
                    parts.append(f"{k}={_code(b[k].value)}")
            return _expr(f"{torch}.autocast({', '.join(parts)})")

        ctx.replace(call, build)
        ctx.finding(call, f"{qual}(device) -> torch.autocast(\"neuron\"" + ("" if has_dtype else ", dtype=torch.bfloat16")
                    + ")")
        return None

    def _on_call(self, call: cst.Call, ctx: PythonContext) -> None:
        self._on_read(call, ctx)
        self._on_mapping(call, ctx)
        func = call.func
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "setdefault" and ctx.qualname(func) == "os.environ.setdefault":
            self._env_call(call, ctx)
            return
        if ctx.qualname(func) not in ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"):
            return
        bound = _bind_args(call, ("device_type", "dtype", "enabled", "cache_enabled"))
        if bound is None or "device_type" not in bound:
            return
        value = bound["device_type"].value
        if isinstance(value, cst.SimpleString) and value.evaluated_value == "cuda" \
                and not _CUDA_CODE.search(ctx.source):
            # torch_xla code with a CUDA autocast and no other CUDA code: on the neuron device it is off (torch warns
            # "CUDA is not available ... Disabling autocast"); whether the old run cast is not known here
            ctx.marker(call, 'Use device_type="neuron" if this autocast is for the neuron device: a CUDA one does nothing '
                             "there.")
            return
        if not (isinstance(value, cst.SimpleString) and value.evaluated_value == "xla"):
            return
        ctx.replace(value, cst.SimpleString(f"{value.prefix}{value.quote}neuron{value.quote}"))
        ctx.finding(call, "torch.autocast(\"xla\") -> torch.autocast(\"neuron\")")
        if "dtype" not in bound:
            torch = _torch(ctx, None) if ctx.imports.local_for("torch") else None
            if torch is not None:
                def add_dtype(updated: cst.Call) -> cst.Call:
                    args = list(updated.args)
                    at = next((i + 1 for i, a in enumerate(args) if a.keyword is None or a.keyword.value == "device_type"), 0)
                    new = cst.Arg(value=_expr(f"{torch}.bfloat16"), keyword=cst.Name("dtype"),
                                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                        whitespace_after=cst.SimpleWhitespace("")))
                    args.insert(at, new)
                    return updated.with_changes(args=_call_args(args))

                ctx.replace(call, add_dtype)

    # ---- metrics reports
    def _report(self, qual, call, ctx):
        stmt = _expression_statement(ctx, call)
        if stmt is not None:
            _drop_statement(ctx, *stmt)
            ctx.finding(call, f"{qual}() removed (no XLA metrics on TorchNeuron)")
            return None
        # print(met.metrics_report()) / logger.info(f"...{met.short_metrics_report()}...")
        i = _index_in_stack(ctx, call)
        for j in range(i - 1, 0, -1):
            node = ctx.stack[j]
            if isinstance(node, (cst.Call,)):
                name = node.func.attr.value if isinstance(node.func, cst.Attribute) else (
                    node.func.value if isinstance(node.func, cst.Name) else "")
                outer = _statement_call(ctx, j)
                if name in _LOG_METHODS and outer is not None:
                    _drop_statement(ctx, *outer)
                    ctx.finding(call, f"{qual}() removed with the {name}() that reported it (no XLA metrics on "
                                      "TorchNeuron)")
                    return None
                break
            if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.Lambda)):
                break
        return "drop it, TorchNeuron has no XLA metrics report"

    # ---- os.environ["XLA_USE_BF16"] = "1" / os.environ.setdefault("XLA_USE_BF16", "1")
    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        if environment_subscript(target, ctx) is None:  # os.environ["K"], env["K"] of env = os.environ.copy()
            return
        self._env(node, target.slice[0].slice.value, node.value, ctx)

    def _env_call(self, call: cst.Call, ctx: PythonContext) -> None:
        bound = _bind_args(call, ("key", "default"))
        if bound is None or "key" not in bound or "default" not in bound:
            return
        stmt = _expression_statement(ctx, call)
        if stmt is None:
            return
        self._env(stmt[0], bound["key"].value, bound["default"].value, ctx)

    def _env(self, node: cst.BaseSmallStatement, key: cst.BaseExpression, value: cst.BaseExpression,
             ctx: PythonContext) -> None:
        if not (isinstance(key, cst.SimpleString) and key.evaluated_value in BF16_VARS):
            return
        var = key.evaluated_value
        on = value_on(value)
        i = _index_in_stack(ctx, node)
        line = ctx.stack[i - 1]
        block = ctx.stack[i - 2] if i >= 2 else None
        body = getattr(block, "body", None)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1 or not isinstance(body, (list, tuple)):
            ctx.marker(node, f"Remove {var} (no effect on TorchNeuron)" + (f" and {_BF16_SHORT}." if on else "."),
                       detail=f"{var} has no effect on TorchNeuron: remove it; {_BF16_INTENT}" if on else None)
            return
        k = next((n for n, st in enumerate(body) if st is line), None)
        if k is None:
            return
        following = after_settings(body, k)
        if setting_stays(body, k, on):
            ctx.marker(node, f"Remove {var} (no effect on TorchNeuron) and {_BF16_SHORT}.",
                       detail=f"{var} has no effect on TorchNeuron: remove it; {_BF16_INTENT}")
            return
        ctx.remove_statement(line)
        first_of_run = k == 0 or not is_bf16_line(body[k - 1])
        if first_of_run and following is not None and any(el.comment is None for el in line.leading_lines):
            ctx.replace(following, with_blank_line)
        ctx.finding(node, f"os.environ[{key.value}] setting removed ({var} has no effect on TorchNeuron)")
        if on:
            ctx.marker(following, f"The removed XLA_USE_BF16 ran float32 in bf16: {_BF16_SHORT}.",
                       detail="XLA_USE_BF16/XLA_DOWNCAST_BF16 made torch-xla run float32 tensors in bfloat16 and "
                              f"do nothing on TorchNeuron: {_BF16_INTENT}")


_BF16_SHORT = 'load the model in bf16 or use torch.autocast("neuron")'
_BF16_INTENT = ("load the model with dtype=torch.bfloat16 (or model.to(torch.bfloat16)) or wrap the forward pass "
                "in torch.autocast(\"neuron\", dtype=torch.bfloat16)")


def _drop_statement(ctx: PythonContext, small: cst.BaseSmallStatement, container) -> None:
    """Delete a statement; the whole line when it is alone on it (so that a removal wins over
    another rule's rewrite of that line)."""
    if isinstance(container, cst.SimpleStatementLine) and len(container.body) == 1:
        ctx.remove_statement(container)
        _keep_blank_line(ctx, container)
    else:
        _remove_small_statement(ctx, small, container)


def _statement_call(ctx: PythonContext, j: int):
    """(Expr, line) when ``ctx.stack[j]`` is a call that is a whole expression statement."""
    if j < 2:
        return None
    expr, container = ctx.stack[j - 1], ctx.stack[j - 2]
    if isinstance(expr, cst.Expr) and expr.value is ctx.stack[j] and isinstance(
        container, (cst.SimpleStatementLine, cst.SimpleStatementSuite)
    ):
        return expr, container
    return None


RULES = (XlaDeviceLoader, XlaSpawn, XlaPrecisionAndMetrics)
