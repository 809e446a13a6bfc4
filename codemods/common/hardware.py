"""Which hardware a branch of the code runs on: the tests for cuda/gpu/mps/cpu/neuron around a node.

A script written for several machines keeps each machine's code in its own branch::

    if device == "neuron":
        model = NeuronModelForCausalLM.from_pretrained(model_id, export=True, ...)
    elif device == "cuda":
        model = AutoModelForCausalLM.from_pretrained(model_id, device_map="auto", quantization_config=bnb)

Only the code paths that used the old Neuron stack are migrated: the ``cuda`` branch is another
hardware's and keeps its ``device_map="auto"``. :func:`branch_hardware` reads the ``if`` / ``elif`` /
``else`` / conditional-expression tests around the node a rule is handling (``ctx.stack``) and says
which side of them the node is on. Rules call it before they rewrite placement
(``device_map="neuron"``, ``.to("neuron")``): ``OTHER`` means leave the code alone; ``MIXED`` (a test
that lets both Neuron and another machine in, such as ``device in ("cuda", "neuron")``) means the
context cannot be decided: mark it, do not guess.

What counts as a hardware test (each may be negated with ``not`` / ``!=`` / ``not in`` and combined
with ``and`` / ``or``):

* ``torch.cuda.is_available()``, ``torch.backends.mps.is_available()``, ``torch.xpu.is_available()``,
  ``torch.cuda.device_count()`` (``> 0``...) -- another machine; the availability checks of the old
  Neuron stack (``is_torch_xla_available()``, ``is_neuronx_available()``...) -- Neuron;
* a comparison with device strings: ``device == "cuda"``, ``args.device in ("gpu", "mps")``,
  ``x.device.type != "cpu"``, ``device.startswith("cuda")``;
* a flag named for the hardware: ``use_cuda``, ``args.gpu``, ``x.is_cuda``, ``use_neuron``, ``on_xla``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import libcst as cst

OTHER = "other"  # only another machine (or the CPU) takes this branch
NEURON = "neuron"  # only Neuron takes it
MIXED = "mixed"  # Neuron and another machine both may: undecidable

#: device strings (the part before ``:``) of other machines / of Neuron
OTHER_DEVICES = frozenset({"cuda", "gpu", "mps", "cpu", "xpu", "hpu", "npu", "mlu", "tpu", "rocm", "nvidia",
                           "metal", "musa", "sdaa"})
NEURON_DEVICES = frozenset({"neuron", "xla", "trainium", "inferentia", "trn1", "trn2", "inf1", "inf2", "neuronx",
                            "neuroncore", "aws_neuron"})
#: calls that test for another machine / for the Neuron stack (qualified names, or the last name part)
OTHER_CALLS = ("torch.cuda.is_available", "torch.backends.mps.is_available", "torch.mps.is_available",
               "torch.xpu.is_available", "torch.cuda.device_count", "torch.backends.cudnn.is_available",
               "torch.hpu.is_available", "torch.npu.is_available")
NEURON_CALL_NAMES = ("is_torch_xla_available", "is_neuronx_available", "is_neuron_available",
                     "is_torch_neuronx_available", "is_neuronx_distributed_available",
                     "is_transformers_neuronx_available", "is_torch_tpu_available", "is_trainium_available",
                     "is_neuron_device_available")
_FLAG_OTHER = re.compile(r"^(?:(?:use|is|on|has|with|enable|run_on|using)_?)?(?:cuda|gpu|gpus|mps|cudnn|cpu)"
                         r"(?:_?(?:available|enabled|device))?$", re.I)
_FLAG_NEURON = re.compile(r"^(?:(?:use|is|on|has|with|enable|run_on|using)_?)?(?:neuron|xla|trainium|inferentia|"
                          r"neuronx|trn|inf2)(?:_?(?:available|enabled|device))?$", re.I)


class Branch(NamedTuple):
    """``kind``: OTHER / NEURON / MIXED; ``test``: the source of the innermost test that decided it."""
    kind: str
    test: str


def _device_kind(value: str) -> str | None:
    word = value.split(":", 1)[0].strip().lower()
    if word in OTHER_DEVICES:
        return OTHER
    if word in NEURON_DEVICES:
        return NEURON
    return None


def _strings(node: cst.BaseExpression) -> list[str] | None:
    """The string values of a literal string, or of a tuple/list/set of literal strings (``torch.device("cuda")``
    counts as its string)."""
    if isinstance(node, cst.Call) and _last_name(node.func) == "device" and len(node.args) >= 1 \
            and node.args[0].keyword is None:
        node = node.args[0].value
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return [value] if isinstance(value, str) else None
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)) and node.elements:
        out: list[str] = []
        for el in node.elements:
            if isinstance(el, cst.StarredElement):
                return None
            got = _strings(el.value)
            if got is None or len(got) != 1:
                return None
            out.extend(got)
        return out
    return None


def _kinds(values: list[str]) -> str | None:
    """One kind for a set of device strings (``("cuda", "neuron")`` is MIXED; an unknown string: None)."""
    kinds = {_device_kind(v) for v in values}
    if kinds == {OTHER}:
        return OTHER
    if kinds == {NEURON}:
        return NEURON
    if OTHER in kinds and NEURON in kinds:
        return MIXED
    return None


def _last_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _qualname(ctx, expr: cst.BaseExpression) -> str:
    try:
        return ctx.qualname(expr) or ""
    except Exception:  # pragma: no cover - a node the import index does not know
        return ""


# a test's meaning: (kind of the branch it guards, kind of its else branch)
_Sides = tuple[str | None, str | None]


def _invert(kind: str | None) -> str | None:
    """The else side of a test whose body is ``kind``: not-Neuron is another machine; not-cuda is not
    known (the CPU, or the old stack's device)."""
    if kind == NEURON:
        return OTHER
    if kind == MIXED:
        return MIXED
    return None


def _both(a: str | None, b: str | None) -> str | None:
    """Both tests hold."""
    if {a, b} == {OTHER, NEURON}:
        return MIXED
    for k in (MIXED, OTHER, NEURON):
        if k in (a, b):
            return k
    return None


def _either(a: str | None, b: str | None) -> str | None:
    """One of the tests holds."""
    if a == b:
        return a
    if None in (a, b):
        return None if MIXED not in (a, b) else MIXED
    return MIXED


def classify(test: cst.BaseExpression, ctx) -> _Sides:
    """(what the branch a test guards runs on, what its else branch runs on); None: not known."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        body, orelse = classify(test.expression, ctx)
        return orelse, body
    if isinstance(test, cst.BooleanOperation):
        lb, lo = classify(test.left, ctx)
        rb, ro = classify(test.right, ctx)
        if isinstance(test.operator, cst.And):
            return _both(lb, rb), _either(lo, ro)
        return _either(lb, rb), _both(lo, ro)
    kind = _test_kind(test, ctx)
    if kind is None:
        return None, None
    if isinstance(kind, tuple):
        return kind
    return kind, _invert(kind)


def _test_kind(test: cst.BaseExpression, ctx) -> str | _Sides | None:
    if isinstance(test, cst.Call):
        func = test.func
        qual = _qualname(ctx, func)
        name = _last_name(func)
        if qual in OTHER_CALLS:
            return OTHER
        if name in NEURON_CALL_NAMES:
            return NEURON
        if isinstance(func, cst.Attribute) and name in ("startswith", "endswith") and test.args:
            values = _strings(test.args[0].value)
            return _kinds(values) if values else None
        return None
    if isinstance(test, (cst.Name, cst.Attribute)):
        name = _last_name(test)
        if name is None:
            return None
        if _FLAG_OTHER.match(name):
            return OTHER
        if _FLAG_NEURON.match(name):
            return NEURON
        return None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        op = target.operator
        values = _strings(target.comparator) or _strings(test.left)
        if values is None:
            # torch.cuda.device_count() > 0 and the like
            if isinstance(test.left, cst.Call) and _qualname(ctx, test.left.func) in OTHER_CALLS:
                return OTHER
            return None
        kind = _kinds(values)
        if kind is None:
            return None
        if isinstance(op, (cst.Equal, cst.Is, cst.In)):
            return kind
        if isinstance(op, (cst.NotEqual, cst.IsNot, cst.NotIn)):
            # `device != "cuda"`: the branch is not cuda (not known which); its else is cuda
            return (_invert(kind), kind)
    return None


def branch_hardware(ctx, stack: list[cst.CSTNode] | tuple[cst.CSTNode, ...] | None = None) -> Branch | None:
    """The hardware of the branch the node being handled sits in (the innermost decided test wins; a
    MIXED test anywhere around it makes the whole MIXED unless an inner test decided). ``stack``: the
    ancestors to read (default ``ctx.stack``, the node last)."""
    stack = list(ctx.stack if stack is None else stack)
    for i in range(len(stack) - 2, -1, -1):
        node, child = stack[i], stack[i + 1]
        test: cst.BaseExpression | None = None
        side: int | None = None
        if isinstance(node, cst.If):
            test = node.test
            side = 0 if child is node.body else 1 if child is node.orelse else None
        elif isinstance(node, cst.IfExp):
            test = node.test
            side = 0 if child is node.body else 1 if child is node.orelse else None
        elif isinstance(node, cst.While):
            test = node.test
            side = 0 if child is node.body else None
        if test is None or side is None:
            continue
        kind = classify(test, ctx)[side]
        if kind is not None:
            code = " ".join(ctx.module.code_for_node(test).split())
            code = code if len(code) <= 40 else code[:37] + "..."
            return Branch(kind, code if side == 0 else f"not ({code})")
    return None


def other_hardware(ctx, stack=None) -> bool:
    """True when the node being handled is on a branch only another machine takes (leave it alone)."""
    found = branch_hardware(ctx, stack)
    return found is not None and found.kind == OTHER
