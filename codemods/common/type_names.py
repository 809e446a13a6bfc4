"""Classes used as types: the renamed class where an old-stack class is tested or annotated.

``isinstance(m, NeuronModelForCausalLM)`` renamed to ``isinstance(m, AutoModelForCausalLM)`` is always
False: the Transformers ``Auto*`` classes are factories (``from_pretrained`` returns a
``LlamaForCausalLM``, never an ``AutoModelForCausalLM``), and so are Diffusers' ``AutoPipelineFor*``.
Where a renamed name is a type -- the class argument of ``isinstance`` / ``issubclass`` / ``assertIsInstance`` (alone or in a
tuple), an annotation (``model: X``, ``-> X``, ``Optional[X]``, ``X | None``) -- the rename goes to
the base class every such model derives from: ``transformers.PreTrainedModel``
(``diffusers.DiffusionPipeline`` for a pipeline factory). ``type(m) is X`` has no such class (the type of
a loaded model is its concrete class): it gets a marker. Concrete classes (``LlamaForCausalLM``,
``StableDiffusionPipeline``, ``SentenceTransformer``) are real types and keep their rename.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

PRETRAINED = "transformers.PreTrainedModel"
DIFFUSION_PIPELINE = "diffusers.DiffusionPipeline"


def base_class(target: str) -> str | None:
    """The class that instances made by the factory ``target`` are instances of; None: ``target`` is a
    real class (or not a class)."""
    module, _, name = target.rpartition(".")
    if module.split(".")[0] == "transformers" and name.startswith("AutoModel"):
        return PRETRAINED
    if module.split(".")[0] == "diffusers" and name.startswith("AutoPipeline"):
        return DIFFUSION_PIPELINE
    return None


TYPE_CHECKS = ("isinstance", "issubclass", "assertIsInstance", "assertNotIsInstance")


def _is_type_check(call: cst.Call, arg: cst.Arg) -> bool:
    """``arg`` is the class argument of ``isinstance(x, C)`` / ``issubclass(x, C)`` /
    ``self.assertIsInstance(x, C)``."""
    func = call.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
    if name not in TYPE_CHECKS:
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return len(positional) == 2 and positional[1] is arg


TYPE = "type"  # isinstance/issubclass class, annotation
EXACT = "exact"  # type(x) is C / == / !=


def type_position(stack: Sequence[cst.CSTNode]) -> str | None:
    """How the class expression ``stack[-1]`` (a Name or Attribute; its ancestors before it) is used as a
    type: ``TYPE`` for an ``isinstance``/``issubclass`` class (a tuple of them included) or an annotation
    (subscripts and ``|`` unions of it included), ``EXACT`` for ``type(x) is C`` / ``==`` / ``!=``; None
    for any other use (a call, an attribute read, an argument)."""
    node = stack[-1]
    for i in range(len(stack) - 2, -1, -1):
        parent = stack[i]
        if isinstance(parent, cst.Annotation):
            return TYPE
        if isinstance(parent, cst.Attribute):
            return None  # `C.from_pretrained`, `C.config_class`: a use of the class itself
        if isinstance(parent, (cst.Element, cst.Tuple)):
            node = parent
            continue
        if isinstance(parent, (cst.Index, cst.SubscriptElement, cst.Subscript)):
            if isinstance(parent, cst.Subscript) and parent.value is node:
                return None  # `C[...]` is not a type argument
            node = parent
            continue
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.BitOr):
            node = parent
            continue
        if isinstance(parent, cst.Arg) and parent.value is node and i > 0 and isinstance(stack[i - 1], cst.Call):
            return TYPE if _is_type_check(stack[i - 1], parent) and _only_tuples(stack[i + 1:]) else None
        if isinstance(parent, cst.ComparisonTarget) and parent.comparator is node \
                and isinstance(parent.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)) and i > 0:
            comparison = stack[i - 1]
            left = comparison.left if isinstance(comparison, cst.Comparison) else None
            exact = (isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "type"
                     and isinstance(stack[i + 1], (cst.Name, cst.Attribute)))
            return EXACT if exact else None
        return None
    return None


def _only_tuples(path: Sequence[cst.CSTNode]) -> bool:
    """Between the argument and the class there are only tuple elements (no subscript, no union)."""
    return all(isinstance(n, (cst.Tuple, cst.Element, cst.Name, cst.Attribute)) for n in path)


def rename_type_use(ctx, node: cst.BaseExpression, source: str, target: str, anchor=None,
                    style: str = "from") -> bool:
    """Rename a type use of ``source`` (the node being handled) to the base class of ``target`` when
    ``target`` is a factory; True when the use was handled (renamed, or marked on a name clash)."""
    from migrator.rules import NameClash

    base = base_class(target)
    position = type_position(ctx.stack) if base is not None else None
    if position is None:
        return False
    if position == EXACT:
        ctx.marker(node, f"type(...) is {target.rsplit('.', 1)[1]} is always False (a factory): use "
                         f"isinstance(..., {base.rsplit('.', 1)[1]})")
        return False  # renamed as any other use
    try:
        expr = ctx.name_for(base, anchor=anchor, style=style)
    except NameClash as exc:
        ctx.marker(node, f"{source} is used as a type here: use {base} (not the factory {target}) ({exc})")
        return True
    ctx.replace(node, expr)
    ctx.finding(node, f"{source} used as a type -> {base} ({target.rsplit('.', 1)[1]} is a factory: an "
                      "isinstance() on it is always False)")
    return True
