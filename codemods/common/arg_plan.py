"""Helpers shared by the rules that edit calls (training NM2xx/NM3xx, upgrades NM6xx, the torch-xla era):
editing the keyword arguments of a call while keeping its layout, and reading simple literals. No rules here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from migrator.rules import PythonContext

MAX_LINE = 119  # the Hugging Face libraries' line length
_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
NOT_LITERAL = object()


def literal(expr: cst.BaseExpression | None):
    """The value of a simple literal (str, int, float, True/False/None, -int), else NOT_LITERAL."""
    if expr is None:
        return NOT_LITERAL
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, (cst.Integer, cst.Float)):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = literal(expr.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return NOT_LITERAL


def string_value(expr: cst.BaseExpression | None, ctx: PythonContext) -> str | None:
    """The string ``expr`` holds: a string literal, or a name the module assigns one literal string (a single
    such assignment, its comments aside); None otherwise."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.Name):
        found = re.findall(rf"^[ \t]*{re.escape(expr.value)}[ \t]*=[ \t]*([\"'])([^\"'\n]+)\1[ \t]*(?:#.*)?$",
                           ctx.code, re.M)
        if len(found) == 1:
            return found[0][1]
    return None


def keywords(call: cst.Call) -> dict[str, cst.Arg]:
    return {a.keyword.value: a for a in call.args if a.keyword is not None}


def has_star_kwargs(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def quote_of(call: cst.Call) -> str:
    for a in call.args:
        if isinstance(a.value, cst.SimpleString):
            return "'" if a.value.quote.startswith("'") else '"'
    return '"'


@dataclass
class ArgPlan:
    """What to do to a call's arguments; applied to the UPDATED call (edits of other rules
    inside the argument values are kept)."""

    drop: set[str] = field(default_factory=set)
    rename: dict[str, str] = field(default_factory=dict)
    revalue: dict[str, Callable[[cst.BaseExpression], cst.BaseExpression]] = field(default_factory=dict)
    add: list[tuple[str, Callable[[], cst.BaseExpression]]] = field(default_factory=list)
    #: index of a positional argument -> the keyword it is passed as from now on (appended)
    move_positional: dict[int, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.drop or self.rename or self.revalue or self.add or self.move_positional)


def _paren(comma) -> cst.ParenthesizedWhitespace | None:
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        return comma.whitespace_after
    return None


def apply_plan(updated: cst.Call, plan: ArgPlan, explode_at: int | None = None, indent: str = "",
               step: str = "    ") -> cst.Call:
    """Drop/rename/re-value/append keyword arguments, keeping the call's layout (one line stays
    one line unless it would exceed ``explode_at`` columns; one argument per line stays so).

    Comments follow their argument: the end-of-line comment of an argument stays with it, the
    comment lines above an argument go with it (dropped with a dropped argument). New keyword
    arguments go before a ``**kwargs`` argument."""
    old = list(updated.args)
    closing = _strip(old[-1].comma) if old else cst.MaybeSentinel.DEFAULT
    middle = next((_strip(a.comma) for a in old[:-1] if isinstance(a.comma, cst.Comma)), None)
    if middle is None:
        ws = updated.whitespace_before_args
        if isinstance(closing, cst.Comma) and isinstance(closing.whitespace_after, cst.ParenthesizedWhitespace) \
                and isinstance(ws, cst.ParenthesizedWhitespace):
            middle = closing.with_changes(
                whitespace_after=closing.whitespace_after.with_changes(last_line=ws.last_line))
        else:
            middle = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    middle = _without_lines(middle)
    # (argument, original index or None for a new one)
    kept: list[tuple[cst.Arg, int | None]] = []
    moved: list[tuple[cst.Arg, int | None]] = []
    for k, a in enumerate(old):
        kw = a.keyword.value if a.keyword is not None else None
        if k in plan.move_positional:
            if plan.move_positional[k] in plan.drop:
                continue
            moved.append((cst.Arg(keyword=cst.Name(plan.move_positional[k]), value=a.value, equal=_EQ), None))
            continue
        if kw is not None and kw in plan.drop:
            continue
        if kw is not None and kw in plan.revalue:
            a = a.with_changes(value=plan.revalue[kw](a.value))
        if kw is not None and kw in plan.rename:
            a = a.with_changes(keyword=cst.Name(plan.rename[kw]))
        kept.append((a, k))
    added = moved + [(cst.Arg(keyword=cst.Name(kw), value=make(), equal=_EQ), None) for kw, make in plan.add]
    star = next((i for i, (a, _k) in enumerate(kept) if a.star == "**"), len(kept))
    kept = kept[:star] + added + kept[star:]

    def above(k: int | None) -> tuple:
        """Comment lines written above the original argument ``k``."""
        if k is None or k == 0:
            return ()
        ws = _paren(old[k - 1].comma)
        return tuple(ws.empty_lines) if ws is not None else ()

    out = []
    for i, (a, k) in enumerate(kept):
        last = i == len(kept) - 1
        template = closing if last else middle
        comma = _with_comment_of(template, a.comma)
        ws = _paren(comma)
        if ws is not None and not last:
            comma = comma.with_changes(whitespace_after=ws.with_changes(empty_lines=above(kept[i + 1][1])))
        out.append(a.with_changes(comma=comma))
    new = updated.with_changes(args=out)
    if explode_at is not None and out and _one_line(updated) and _width(new) + len(indent) > explode_at:
        new = explode(new, indent, step)
    elif explode_at is not None and len(out) <= 2 and len(old) > len(out) and not _one_line(updated):
        # a call that shrank to one or two arguments goes back on one line when it fits
        flat = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(out) - 1
                               else cst.MaybeSentinel.DEFAULT, whitespace_after_arg=cst.SimpleWhitespace(""))
                for i, a in enumerate(out)]
        one = updated.with_changes(args=flat, whitespace_before_args=cst.SimpleWhitespace(""))
        commented = "#" in cst.Module(body=[]).code_for_node(new)
        if _one_line(one) and _width(one) + len(indent) <= explode_at and not commented:
            new = one
    return new


def _without_lines(comma):
    ws = _paren(comma)
    return comma.with_changes(whitespace_after=ws.with_changes(empty_lines=())) if ws is not None else comma


def _strip(comma):
    """A comma without the end-of-line comment that belongs to its argument."""
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        return comma.with_changes(
            whitespace_after=comma.whitespace_after.with_changes(first_line=cst.TrailingWhitespace()))
    return comma


def _with_comment_of(template, own):
    """``template`` carrying the end-of-line comment of the argument's own comma, if any."""
    if isinstance(own, cst.Comma) and isinstance(own.whitespace_after, cst.ParenthesizedWhitespace) \
            and own.whitespace_after.first_line.comment is not None:
        if isinstance(template, cst.Comma) and isinstance(template.whitespace_after, cst.ParenthesizedWhitespace):
            return template.with_changes(whitespace_after=template.whitespace_after.with_changes(
                first_line=own.whitespace_after.first_line))
        if template is cst.MaybeSentinel.DEFAULT or isinstance(template, cst.MaybeSentinel):
            return own  # keep its comment (and so its line break)
    return template


def _one_line(call: cst.Call) -> bool:
    return "\n" not in cst.Module(body=[]).code_for_node(call)


def _width(call: cst.Call) -> int:
    return len(cst.Module(body=[]).code_for_node(call))


def explode(call: cst.Call, indent: str, step: str) -> cst.Call:
    """One argument per line, one level deeper than the statement, with a trailing comma."""
    args = list(call.args)
    spread = []
    for i, a in enumerate(args):
        last = i == len(args) - 1
        spread.append(a.with_changes(
            comma=cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace("" if last else step),
            )),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        ))
    return call.with_changes(
        args=spread,
        whitespace_before_args=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(step)
        ),
    )


def rewrite_call(ctx: PythonContext, call: cst.Call, plan: ArgPlan) -> None:
    """Apply ``plan`` to the UPDATED call: edits other rules make to the same call (the rename of
    the callee, their own argument plans) are kept, and theirs keep ours."""
    if plan.empty():
        return
    indent = statement_indent(ctx) + " " * line_prefix(ctx, call)
    step = ctx.module.default_indent
    ctx.replace(call, lambda new: apply_plan(new, plan, MAX_LINE, indent, step))


def statement_indent(ctx: PythonContext) -> str:
    default = ctx.module.default_indent
    return "".join((n.indent if n.indent is not None else default) for n in ctx.stack
                   if isinstance(n, cst.IndentedBlock))


def line_prefix(ctx: PythonContext, call: cst.Call) -> int:
    """Columns before the call on its first line (``args = ``), roughly."""
    code = ctx.module.code_for_node
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.Assign) and node.value is call:
            return sum(len(code(t.target)) + 3 for t in node.targets)
        if isinstance(node, cst.AnnAssign) and node.value is call:
            return len(code(node.target)) + len(code(node.annotation.annotation)) + 5
        if isinstance(node, cst.Return) and node.value is call:
            return 7
        break
    return 0


def fsdp_size_code(environ: str, tp: cst.BaseExpression | None, quote: str = '"') -> str:
    """``fsdp_size`` for ``zero_1=True``: every data-parallel rank shards (WORLD_SIZE // tp_size);
    WORLD_SIZE == tp_size gives 1, plain tensor parallelism."""
    world = f"int({environ}.get({quote}WORLD_SIZE{quote}, {quote}1{quote}))"
    if tp is None:
        return world
    tp_code = cst.Module(body=[]).code_for_node(tp)
    if not isinstance(tp, (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)):
        tp_code = f"({tp_code})"
    return f"{world} // {tp_code}"


def tokenizer_to_processing_class(call: cst.Call, ctx: PythonContext, plan: ArgPlan, cls: str) -> None:
    """A trainer call's ``tokenizer=`` -> ``processing_class=`` (dropped, with a marker, when both are passed)."""
    kw = keywords(call)
    if "tokenizer" not in kw:
        return
    if "processing_class" in kw:
        plan.drop.add("tokenizer")
        ctx.marker(call, "both tokenizer= and processing_class= were passed: tokenizer= was dropped")
    else:
        plan.rename["tokenizer"] = "processing_class"
        ctx.finding(kw["tokenizer"], f"{cls}: tokenizer= -> processing_class=")


#: why the arguments of a trainer whose model is sharded at load time get save_only_model=True
SAVE_ONLY_MODEL = ("the Trainer refuses a model sharded at load time unless save_only_model=True or "
                   "save_strategy=\"no\" (its optimizer state cannot be checkpointed for resuming)")
#: the marker where the rule cannot set it itself (``{where}``: the keyword or the assignment to write)
SAVE_ONLY_MARKER = "Set {where}: the Trainer refuses to checkpoint a model sharded at load time otherwise."
SAVE_ONLY_COMMENT = "# the Trainer refuses to build otherwise: resuming a model sharded at load time is not supported"


def save_only_model_code(owner: str, sizes: list[str], step: str) -> str:
    """``<owner>.save_only_model = True`` for arguments that already exist (parsed), when the product
    of ``sizes`` (the expressions of the layout) is > 1 (always when there is none), with the comment
    saying why (inside the ``if``: markers go above the statement)."""
    if not sizes:
        return f"{SAVE_ONLY_COMMENT}\n{owner}.save_only_model = True\n"
    return f"if {' * '.join(sizes)} > 1:\n{step}{SAVE_ONLY_COMMENT}\n{step}{owner}.save_only_model = True\n"
