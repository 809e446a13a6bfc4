"""Helpers shared by the inference rules (NM101-NM110): literal values of arguments, ``**{...}``
expansion, quoting, where new statements and imports go, and the layout of rewritten calls
(one line when it fits in the Hugging Face libraries' 119 columns, else one argument per line).

Rules import these names; they never walk the tree.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from migrator.imports import Binding, dotted
from migrator.rules import NameClash, PythonContext

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}
#: compiler, cache and serving knobs that have no meaning for an eager model
COMPILER_KNOBS = (
    "compiler_args", "optlevel", "compiler_workdir", "instance_type", "disable_neuron_cache",
    "inline_weights_to_neff", "disable_fast_relayout", "disable_fallback", "dynamic_batch_size",
    "auto_cast", "task", "file_name", "load_weights", "continuous_batching", "on_device_sampling",
    "compiler_type", "compiler_version",
)


MAX_LINE = 119  # the Hugging Face libraries' line length


EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def literal(expr: cst.BaseExpression):
    """The Python value of a simple literal (str, int, True/False/None), else ``NOT``."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Integer):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    return NOT


NOT = object()


def _keyword_dict(value: cst.BaseExpression) -> bool:
    """A non-empty ``{"k": v, ...}`` whose keys are identifier strings."""
    return isinstance(value, cst.Dict) and bool(value.elements) and all(
        isinstance(e, cst.DictElement) and isinstance(literal(e.key), str) and literal(e.key).isidentifier()
        for e in value.elements
    )


def expand_literal_kwargs(args, dicts: dict[str, cst.Dict] | None = None) -> list[cst.Arg]:
    """``**{"k": v}`` with string keys that are identifiers -> ``k=v`` arguments; so is ``**name`` where
    ``dicts`` (see :func:`literal_dicts`) gives the dict literal ``name`` stands for."""
    out: list[cst.Arg] = []
    for a in args:
        value = a.value
        if a.star == "**" and isinstance(value, cst.Name) and dicts and value.value in dicts:
            value = dicts[value.value]
        if a.star == "**" and _keyword_dict(value):
            for e in value.elements:
                out.append(cst.Arg(keyword=cst.Name(literal(e.key)), value=e.value, equal=EQ))
        else:
            out.append(a)
    return out


def literal_dicts(ctx: PythonContext, scope: cst.CSTNode | None = None) -> dict[str, cst.Dict]:
    """Names that stand for a dict literal in the scope of the node being handled (the innermost
    function, else the module): assigned once, to ``{"k": v, ...}`` whose values are literals or dotted
    names (so that moving them to a call does not change what they evaluate to), and never changed
    (no ``name[k] = v``, ``name.update(...)``, augmented assignment or ``del``). ``compiler_args =
    {...}`` then ``from_pretrained(..., **compiler_args)`` is the usual optimum-neuron form. ``scope``:
    another function (or the module) than the one around the node being handled."""
    if scope is None:
        scope = ctx.module
        for n in reversed(ctx.stack[:-1]):
            if isinstance(n, (cst.FunctionDef, cst.Lambda)):
                scope = n
                break
    cache = ctx.scratch.setdefault("_literal_dicts", {})
    if id(scope) in cache:
        return cache[id(scope)]
    found: dict[str, cst.Dict | None] = {}

    def changed(name: str) -> None:
        found[name] = None

    todo = list(scope.children)
    while todo:
        n = todo.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(n, cst.Assign):
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    name = t.target.value
                    stable = len(n.targets) == 1 and _keyword_dict(n.value) and all(
                        literal(e.value) is not NOT or dotted(e.value) is not None for e in n.value.elements)
                    found[name] = n.value if stable and name not in found else None
                elif isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name):
                    changed(t.target.value.value)
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)) and isinstance(n.target, cst.Name):
            changed(n.target.value)
        elif isinstance(n, cst.Del):
            target = n.target.value if isinstance(n.target, cst.Subscript) else n.target
            if isinstance(target, cst.Name):
                changed(target.value)
        elif (isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Name)
              and n.func.attr.value in ("update", "pop", "setdefault", "clear", "popitem")):
            changed(n.func.value.value)
        elif isinstance(n, (cst.For, cst.CompFor)) and isinstance(n.target, cst.Name):
            changed(n.target.value)
        elif isinstance(n, (cst.WithItem,)) and n.asname is not None and isinstance(n.asname.name, cst.Name):
            changed(n.asname.name.value)
        todo.extend(n.children)
    out = cache[id(scope)] = {k: v for k, v in found.items() if v is not None}
    return out


def quote_style(call: cst.Call) -> str:
    for a in call.args:
        if isinstance(a.value, cst.SimpleString):
            return "'" if a.value.quote.startswith("'") else '"'
    return '"'


def assigned_target(ctx: PythonContext, call: cst.Call) -> cst.BaseExpression | None:
    """``name`` / ``obj.attr`` when the call is the whole value of a one-target assignment."""
    parent = ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
        target = parent.targets[0].target
    elif isinstance(parent, cst.AnnAssign) and parent.value is call:
        target = parent.target
    else:
        return None
    if isinstance(target, cst.Name) or (isinstance(target, cst.Attribute) and dotted(target) is not None):
        return target
    return None


def insert_after(ctx: PythonContext, holder: dict, make: Callable[[cst.SimpleStatementLine], list]) -> bool:
    """Insert statements after the line holding the rewritten call."""
    stack = ctx.stack
    line = next((stack[i] for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], cst.SimpleStatementLine)), None)
    if line is None:
        return False
    ctx.insert_after(line, make)
    return True


# ---------------------------------------------------------------------- layout
def indent_of(ctx: PythonContext) -> str:
    default = ctx.module.default_indent
    return "".join((n.indent if n.indent is not None else default) for n in ctx.stack
                   if isinstance(n, cst.IndentedBlock))


def prefix_len(ctx: PythonContext, call: cst.Call) -> int:
    """Columns taken on the call's first line before the call (``model = ``), roughly."""
    parent = ctx.parent
    code = ctx.module.code_for_node
    if isinstance(parent, cst.Assign) and parent.value is call:
        return sum(len(code(t.target)) + 3 for t in parent.targets)  # "target = "
    if isinstance(parent, cst.AnnAssign) and parent.value is call:
        return len(code(parent.target)) + len(code(parent.annotation.annotation)) + 5  # "target: annotation = "
    return 12


def _comments(arg: cst.Arg) -> list[cst.Comment]:
    found = []
    for ws in (arg.whitespace_after_arg, getattr(arg.comma, "whitespace_after", None),
               getattr(arg.comma, "whitespace_before", None)):
        if isinstance(ws, cst.ParenthesizedWhitespace):
            if ws.first_line.comment is not None:
                found.append(ws.first_line.comment)
            found.extend(el.comment for el in ws.empty_lines if el.comment is not None)
    return found


def _flat(args: list[cst.Arg]) -> list[cst.Arg]:
    """``args`` laid out on one line (``a, b``)."""
    return [
        a.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(args) - 1 else cst.MaybeSentinel.DEFAULT,
            whitespace_after_arg=cst.SimpleWhitespace(""),
        )
        for i, a in enumerate(args)
    ]


def layout(call: cst.Call, args: list[cst.Arg], module: cst.Module, indent: str, prefix: int) -> cst.Call:
    """One line when it fits (and no comment is attached to a kept argument), else one argument
    per line, indented one level deeper than the statement, with a trailing comma."""
    multiline_before = "\n" in module.code_for_node(call)
    flat = _flat(args)
    one_line = call.with_changes(args=flat, whitespace_before_args=cst.SimpleWhitespace(""))
    width = len(indent) + prefix + len(module.code_for_node(one_line))
    has_comments = any(_comments(a) for a in args)
    if not has_comments and "\n" not in module.code_for_node(one_line) and (
        width <= MAX_LINE or not multiline_before and width <= len(indent) + prefix + len(module.code_for_node(call))
    ):
        return one_line
    step = module.default_indent
    spread = []
    for i, a in enumerate(args):
        last = i == len(args) - 1
        comments = _comments(a)
        first = cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  " if comments else ""), comment=comments[0] if comments else None
        )
        spread.append(a.with_changes(
            comma=cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                first_line=first, indent=True, last_line=cst.SimpleWhitespace("" if last else step),
            )),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        ))
    return call.with_changes(
        args=spread,
        whitespace_before_args=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(step)
        ),
    )


def hug_layout(call: cst.Call, args: list[cst.Arg], module: cst.Module, indent: str, prefix: int,
                suffix: int) -> cst.Call:
    """One line when it fits; else every argument on one continuation line (``f(\n    a, b\n)``)
    when that fits; else one argument per line."""
    flat = _flat(args)
    one_line = call.with_changes(args=flat, whitespace_before_args=cst.SimpleWhitespace(""))
    text = module.code_for_node(one_line)
    if "\n" in text or len(indent) + prefix + len(text) + suffix <= MAX_LINE:
        return one_line if "\n" not in text else layout(call, args, module, indent, prefix + suffix)
    step = module.default_indent
    inner = ", ".join(module.code_for_node(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in flat)
    if len(indent) + len(step) + len(inner) <= MAX_LINE:
        flat[-1] = flat[-1].with_changes(whitespace_after_arg=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace("")))
        return call.with_changes(args=flat, whitespace_before_args=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(step)))
    return layout(call, args, module, indent, prefix + suffix)


def line_context(ctx: PythonContext, node: cst.Call) -> tuple[int, int]:
    """(columns before ``node`` on its first line, columns after it on its last line) in its statement."""
    stmt = next((n for n in reversed(ctx.stack) if isinstance(n, cst.SimpleStatementLine)), None)
    if stmt is None:
        return prefix_len(ctx, node), 0
    text = ctx.module.code_for_node(stmt.with_changes(leading_lines=())).rstrip("\n")
    call = ctx.module.code_for_node(node)
    at = text.find(call)
    if at < 0:
        return prefix_len(ctx, node), 0
    before = text[:at].rsplit("\n", 1)[-1]
    after = text[at + len(call):].split("\n", 1)[0]
    return len(before.lstrip()), len(after)


def torch_dtype(ctx: PythonContext, name: str, quote: str, anchor: Binding | None) -> cst.BaseExpression:
    """``torch.<name>`` (importing torch next to ``anchor``), or the string when ``torch`` is taken."""
    try:
        return ctx.name_for(f"torch.{name}", anchor=anchor, style="module")
    except NameClash:
        return cst.SimpleString(f"{quote}{name}{quote}")


def drop_expanded_dicts(ctx: PythonContext, call: cst.Call, dicts: dict[str, cst.Dict]) -> list[str]:
    """Remove the assignments of the dict literals whose ``**name`` in ``call`` the rule expands (see
    :func:`expand_literal_kwargs`) and which nothing else reads: ``compiler_args = {...}`` used only as
    ``from_pretrained(..., **compiler_args)`` is dead once its items are arguments (or dropped). An
    assignment with a comment above it, on a line of several statements, or outside the function (or
    module) body that holds the call stays. Returns the names removed."""
    names = {a.value.value for a in call.args
             if a.star == "**" and isinstance(a.value, cst.Name) and a.value.value in dicts}
    if not names:
        return []
    scope: cst.CSTNode = ctx.module
    for n in reversed(ctx.stack[:-1]):
        if isinstance(n, (cst.FunctionDef, cst.Lambda)):
            scope = n
            break
    if isinstance(scope, cst.Lambda):
        return []
    body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
    uses: dict[str, int] = dict.fromkeys(names, 0)

    class Count(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # `x.name` is not the name
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # nor is `f(name=...)`
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in uses:
                uses[node.value] += 1

    (ctx.module if scope is ctx.module else scope).visit(Count())  # nested functions count too
    removed = []
    for stmt in body:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        target = assign.targets[0].target
        if (isinstance(target, cst.Name) and target.value in names and dicts[target.value] is assign.value
                and uses[target.value] == 2 and not any(line.comment for line in stmt.leading_lines)
                and not (stmt.trailing_whitespace.comment)):
            ctx.remove_statement(stmt)
            removed.append(target.value)
    return removed
