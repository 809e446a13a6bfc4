"""NM305: the script arguments that the launch scripts no longer pass read the launch environment.

NM515 turns ``--tensor_parallel_size 8`` / ``--pipeline_parallel_size 2`` on the command lines that
launch a Python script into ``TP_SIZE=8`` / ``PP_SIZE=2`` in the launch's environment (the
migrated training arguments have no such fields). A script that declares those flags in its own
parser (``parser.add_argument("--tensor_parallel_size", type=int, default=1)``, or a dataclass
field ``tensor_parallel_size: int = 1`` that HfArgumentParser turns into the flag) would then run
with its default: its default becomes the environment variable, with the old default when unset::

    parser.add_argument("--tensor_parallel_size", type=int, default=os.environ.get("TP_SIZE", 1))

argparse converts a string default with ``type`` as it converts a command-line value, so the flag,
the environment and the old default give the same type; a flag given on the command line still wins.
"""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import MAX_LINE, ArgPlan, apply_plan, keywords, line_prefix, literal, statement_indent
from migrator.rules import NameClash, PythonContext, PythonRule

#: the flags NM515 moves to the environment (codemods/project/launch_flags.py) -> their variable
ENV_FLAGS = {
    "--tensor_parallel_size": "TP_SIZE",
    "--tensor-parallel-size": "TP_SIZE",
    "--pipeline_parallel_size": "PP_SIZE",
    "--pipeline-parallel-size": "PP_SIZE",
}
#: dataclass fields HfArgumentParser turns into those flags
FIELDS = {"tensor_parallel_size": "TP_SIZE", "pipeline_parallel_size": "PP_SIZE"}
#: a module importing one of these is a script of the old Neuron stack (vLLM & co. keep their own flags)
OLD_STACK = ("optimum.neuron", "neuronx_distributed", "transformers_neuronx", "torch_neuronx", "torch_xla",
             "libneuronxla")


def _old_stack(ctx: PythonContext) -> bool:
    return any(b.qualified.split(".")[0] in OLD_STACK or b.qualified.startswith(OLD_STACK)
               for b in ctx.imports.all_bindings())


class LaunchFlagDefaults(PythonRule):
    id = "NM305"
    title = "Script arguments --tensor_parallel_size / --pipeline_parallel_size default to TP_SIZE / PP_SIZE"
    fix = "auto"
    triggers = ("tensor_parallel_size", "tensor-parallel-size", "pipeline_parallel_size", "pipeline-parallel-size")
    why = """
        The launch scripts no longer pass `--tensor_parallel_size N` / `--pipeline_parallel_size N`
        to the scripts they run: NM515 sets TP_SIZE / PP_SIZE in the launch environment instead
        (the migrated training arguments have no such fields). A script of the old Neuron stack
        that declares those flags in its own argparse parser, or as a field of a dataclass that
        HfArgumentParser parses, would silently run with its default (1: no tensor parallelism,
        or a DistributedConfig that does not match the launch). The default becomes the launch
        environment's value, the old default when it is unset; a flag given on the command line
        still wins.
    """
    before = """
        import argparse

        from optimum.neuron import NeuronTrainingArguments

        parser = argparse.ArgumentParser()
        parser.add_argument("--tensor_parallel_size", type=int, default=8)
    """
    after = """
        import os
        import argparse

        from transformers import TrainingArguments

        parser = argparse.ArgumentParser()
        parser.add_argument("--tensor_parallel_size", type=int, default=os.environ.get("TP_SIZE", 8))
    """
    caveats = """
        Only files that import the old Neuron stack are edited (vLLM, SGLang and similar tools
        keep their own --tensor-parallel-size, which NM515 leaves on their command lines). A
        `required=True` flag is no longer required (the launch does not pass it). A flag whose
        value is read only into a command line the script builds for another program (an element
        of a list, a piece of a string: `["optimum-cli", "export", ..., str(args.tensor_parallel_size)]`)
        is not a launch size and is left alone. A dataclass
        field is rewritten when its default is a literal (`tensor_parallel_size: int = 1` or
        `field(default=1, ...)`); a field that is also a NeuronTrainingArguments field (a
        subclass) is NM201's business. argparse converts a string default with the argument's
        `type`; without one the value is a string, as a command-line value would be.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.AnnAssign: self._on_field, cst.Attribute: self._on_read}

    def _on_read(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """``args.tensor_parallel_size``: whether the parsed value feeds this script (a call's
        argument, an assignment, arithmetic) or only a command line it builds for another tool (an
        element of a list or tuple, a piece of a string)."""
        if node.attr.value not in FIELDS:
            return
        uses = ctx.local_state().setdefault("uses", {})
        uses[node.attr.value] = uses.get(node.attr.value, False) or not _in_command(ctx.stack[:-1])

    def finish(self, ctx: PythonContext) -> None:
        uses = ctx.local_state().get("uses", {})
        for dest, apply in ctx.local_state().get("pending", ()):
            if dest in uses and not uses[dest]:
                continue  # read only into another tool's command line (optimum-cli export ...): not a launch size
            apply()

    def _environ(self, ctx: PythonContext) -> str | None:
        try:
            return ctx.module.code_for_node(ctx.name_for("os.environ", anchor=ctx.imports.first_import,
                                                         style="module"))
        except NameClash:
            return None

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "add_argument":
            return
        names = [literal(a.value) for a in node.args if a.keyword is None and not a.star]
        var = next((ENV_FLAGS[n] for n in names if isinstance(n, str) and n in ENV_FLAGS), None)
        if var is None or not _old_stack(ctx):
            return
        kw = keywords(node)
        if "action" in kw and literal(kw["action"].value) not in ("store", None):
            return
        if "default" in kw and "os.environ" in ctx.module.code_for_node(kw["default"].value):
            return  # reads the environment already
        environ = self._environ(ctx)
        if environ is None:
            ctx.marker(node, f"Make {var} from the environment the default of this argument: the launchers pass it so now.")
            return
        quote = '"'
        plan = ArgPlan()
        if "default" in kw:
            old = kw["default"].value
            plan.revalue["default"] = lambda value: cst.parse_expression(
                f"{environ}.get({quote}{var}{quote}, {cst.Module(body=[]).code_for_node(value)})")
            shown = ctx.module.code_for_node(old)
        else:
            plan.add.append(("default", lambda: cst.parse_expression(f"{environ}.get({quote}{var}{quote})")))
            shown = "None"
        if "required" in kw and literal(kw["required"].value) is not False:
            plan.drop.add("required")
        flag = next(n for n in names if isinstance(n, str) and n in ENV_FLAGS)
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, node), ctx.module.default_indent
        dest = literal(kw["dest"].value) if "dest" in kw else flag.lstrip("-").replace("-", "_")

        def apply() -> None:
            ctx.finding(node, f"{flag} defaults to {var} of the launch environment ({shown} when unset): the launch "
                              f"scripts set {var} instead of passing the flag (NM515)")
            ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))

        ctx.local_state().setdefault("pending", []).append((dest, apply))

    def _on_field(self, node: cst.AnnAssign, ctx: PythonContext) -> None:
        """``tensor_parallel_size: int = 1`` in a dataclass HfArgumentParser may parse."""
        target = node.target
        if not isinstance(target, cst.Name) or target.value not in FIELDS or node.value is None:
            return
        cls = ctx.stack[-4] if len(ctx.stack) >= 4 else None
        if not isinstance(cls, cst.ClassDef) or not any(
                "dataclass" in ctx.module.code_for_node(d.decorator) for d in cls.decorators):
            return
        if any(ctx.qualname(b.value) and ctx.qualname(b.value).startswith("optimum.") for b in cls.bases):
            return  # a NeuronTrainingArguments subclass: the field is NM201's business
        if not _old_stack(ctx):
            return
        var = FIELDS[target.value]
        value = node.value
        default = value
        call = None
        if isinstance(value, cst.Call) and ctx.qualname(value.func) == "dataclasses.field":
            call = value
            kw = keywords(value)
            if "default" not in kw or "default_factory" in kw:
                return
            default = kw["default"].value
        if not isinstance(literal(default), int) or isinstance(literal(default), bool):
            return
        environ = self._environ(ctx)
        if environ is None:
            return
        code = ctx.module.code_for_node(default)
        factory = cst.parse_expression(f"lambda: int({environ}.get(\"{var}\", {code}))")
        if call is not None:
            def edit(new: cst.Call) -> cst.Call:
                args = [a.with_changes(keyword=cst.Name("default_factory"), value=factory)
                        if a.keyword is not None and a.keyword.value == "default" else a for a in new.args]
                return new.with_changes(args=args)
            ctx.replace(call, edit)
        else:
            try:
                anchor = next((ctx.imports.binding_of(d.decorator) for d in cls.decorators
                               if "dataclass" in ctx.module.code_for_node(d.decorator)), None)
                field = ctx.module.code_for_node(ctx.name_for("dataclasses.field",
                                                              anchor=anchor or ctx.imports.first_import))
            except NameClash:
                return
            ctx.replace(value, cst.parse_expression(f"{field}(default_factory=lambda: int({environ}.get(\"{var}\", "
                                                    f"{code})))"))
        ctx.finding(node, f"{target.value} defaults to {var} of the launch environment ({code} when unset): the "
                          f"launch scripts set {var} instead of passing --{target.value} (NM515)")



def _in_command(ancestors) -> bool:
    """Whether an expression (its ``ancestors``, innermost last) is an element of a list
    literal or a piece of a string (f-string, ``str()``, ``%``/``.format``, ``+`` onto a string):
    the shape of an argument list built for another program."""
    for node in reversed(ancestors):
        if isinstance(node, (cst.List, cst.FormattedString, cst.FormattedStringExpression)):
            return True  # (a tuple is as often a return value as an argument list: not judged)
        if isinstance(node, cst.Call):
            func = node.func
            return (isinstance(func, cst.Name) and func.value == "str") or (
                isinstance(func, cst.Attribute) and func.attr.value == "format")
        if isinstance(node, cst.BinaryOperation) and (
                isinstance(node.operator, cst.Modulo) or isinstance(node.left, (cst.SimpleString, cst.FormattedString))):
            return True
        if isinstance(node, (cst.Arg, cst.Element, cst.BinaryOperation, cst.Subscript, cst.Attribute)):
            continue
        return False
    return False


# ---------------------------------------------------------------------------------------------
# NM306: the argument lists Python code launches a script with
# ---------------------------------------------------------------------------------------------

#: boolean flags of NeuronTrainingArguments the migrated parsers reject (NM515 removes them from command lines)
DROPPED = ("--disable_sequence_parallel", "--skip_cache_push", "--async_save", "--use_autocast")
DROPPED = DROPPED + tuple(f.replace("_", "-") for f in DROPPED)
ZERO = ("--zero_1", "--zero-1")
_TRUE = {"true", "1", "yes", "y", "t", "on"}
_FALSE = {"false", "0", "no", "n", "f", "off"}
#: tools with a --tensor-parallel-size of their own
OTHER_TOOLS = ("vllm", "sglang", "lm_eval", "text-generation-launcher", "deepspeed", "trtllm-serve")
SUBPROCESS = ("subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
              "subprocess.check_output")


def _flag_of(value) -> tuple[str, str | None] | None:
    """(flag, value after `=`) of a string element that is one of the flags, else None."""
    if not isinstance(value, str):
        return None
    name, eq, rest = value.partition("=")
    if name in ENV_FLAGS or name in ZERO or name in DROPPED:
        return name, (rest if eq else None)
    return None


class LaunchArgumentLists(PythonRule):
    id = "NM306"
    title = "Python launch argument lists and sys.argv edits: optimum-neuron flags moved to the environment"
    fix = "mixed"
    triggers = ("--tensor_parallel_size", "--tensor-parallel-size", "--pipeline_parallel_size",
                "--pipeline-parallel-size", "--zero_1", "--zero-1", "--disable_sequence_parallel",
                "--skip_cache_push", "--async_save", "--use_autocast", "--disable-sequence-parallel",
                "--skip-cache-push", "--async-save", "--use-autocast")
    why = """
        What NM515 does to the command lines of shell scripts, for the argument lists Python code
        builds: a script that re-launches itself (or another script) with
        `subprocess.run(["torchrun", ..., "train.py", "--tensor_parallel_size", "8"])`, or that
        edits `sys.argv` before HfArgumentParser parses it, passes flags the migrated parser
        (TrainingArguments) rejects. `--tensor_parallel_size` / `--pipeline_parallel_size` become
        `os.environ["TP_SIZE"]` / `os.environ["PP_SIZE"]` set before the statement (the child
        inherits them, and the migrated script reads its layout from them); `--zero_1` and the
        boolean flags with no native meaning are removed (`--zero_1 true` with a marker: FSDP_SIZE
        shards the data-parallel ranks).
    """
    before = """
        import subprocess
        import sys

        subprocess.run(["torchrun", "--nproc_per_node=32", "train.py", "--tensor_parallel_size", "8", "--zero_1", "false"])
    """
    after = """
        import os
        import subprocess
        import sys

        os.environ["TP_SIZE"] = "8"
        subprocess.run(["torchrun", "--nproc_per_node=32", "train.py"])
    """
    caveats = """
        Only list and tuple literals are edited: a launch (an element "torchrun",
        "torch.distributed.run" or a `.py` script, and no vLLM/SGLang-like tool) or a `sys.argv`
        assignment, `+=` or `.extend(...)`. A subprocess call with its own `env=` gets a marker
        (the child does not see os.environ); command strings (`os.system(f"torchrun ...")`,
        `shell=True`) are not parsed.
    """

    def handlers(self):
        return {cst.List: self._on_list, cst.Tuple: self._on_list}

    def _context(self, node, ctx: PythonContext) -> tuple[str, cst.Call | None] | None:
        """('launch', the subprocess call or None) or ('argv', None) when the list is one we edit."""
        values = [literal(e.value) if isinstance(e, cst.Element) else None for e in node.elements]
        texts = [v for v in values if isinstance(v, str)]
        if any(t.rsplit("/", 1)[-1].split(".", 1)[0] in OTHER_TOOLS or t.startswith("vllm") for t in texts[:3]):
            return None
        stack = ctx.stack
        parent = stack[-2] if len(stack) >= 2 else None
        grand = stack[-3] if len(stack) >= 3 else None
        if isinstance(parent, (cst.Assign, cst.AugAssign)) and parent.value is node:
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            if any(ctx.qualname(t) == "sys.argv" for t in targets):
                return "argv", None
        if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and isinstance(grand.func, cst.Attribute) \
                and grand.func.attr.value == "extend" and ctx.qualname(grand.func.value) == "sys.argv":
            return "argv", None
        if any(t in ("torchrun", "torch.distributed.run", "torch.distributed.launch") or t.endswith(".py")
               for t in texts):
            call = grand if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) \
                and ctx.qualname(grand.func) in SUBPROCESS else None
            return "launch", call
        return None

    def _on_list(self, node: cst.List | cst.Tuple, ctx: PythonContext) -> None:
        elements = list(node.elements)
        values = [literal(e.value) if isinstance(e, cst.Element) else None for e in elements]
        if not any(_flag_of(v) for v in values):
            return
        where = self._context(node, ctx)
        if where is None:
            return
        kind, call = where
        env_given = call is not None and "env" in keywords(call)
        statement = ctx.statement()
        simple = isinstance(statement, cst.SimpleStatementLine)
        drop: set[int] = set()
        sets: list[tuple[str, str]] = []
        i = 0
        while i < len(elements):
            found = _flag_of(values[i])
            if found is None:
                i += 1
                continue
            flag, inline = found
            value_index = None
            nxt = values[i + 1] if i + 1 < len(values) else None
            if inline is None and i + 1 < len(elements) and not (isinstance(nxt, str) and nxt.startswith("-")):
                value_index = i + 1
            if flag in ENV_FLAGS:
                var = ENV_FLAGS[flag]
                if env_given or not simple or (inline is None and value_index is None):
                    ctx.marker(node, f"Set {var} in the launched process's environment instead of {flag}: the script "
                                     "rejects it.")
                    i += 1
                    continue
                if inline is not None:
                    text = repr(inline).replace("'", '"') if '"' not in inline else repr(inline)
                else:
                    expr = elements[value_index].value
                    code = ctx.module.code_for_node(expr)
                    text = code if isinstance(literal(expr), str) or isinstance(
                        expr, (cst.FormattedString, cst.ConcatenatedString)) or (
                        isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "str"
                    ) else f"str({code})"
                sets.append((var, text))
                drop.update({i} | ({value_index} if value_index is not None else set()))
                ctx.finding(node, f"{flag} -> {var} in the environment of the launched process")
            else:
                value = inline if inline is not None else (values[value_index] if value_index is not None else None)
                if value_index is not None and not (isinstance(value, str) and value.lower() in _TRUE | _FALSE):
                    value_index = None  # a boolean flag followed by something else
                    value = None
                on = value is None or (isinstance(value, str) and value.lower() in _TRUE)
                drop.update({i} | ({value_index} if value_index is not None else set()))
                if flag in ZERO and on:
                    ctx.marker(node, f"Set FSDP_SIZE=<processes / TP_SIZE> in the launched process's environment to shard "
                                     f"as {flag} did.",
                               detail=f"{flag} was removed: ZeRO-1 sharded the optimizer state over the data-parallel "
                                      "ranks; FSDP shards it (and the parameters and gradients) natively")
                else:
                    ctx.finding(node, f"removed {flag}: the migrated script no longer accepts it")
            i = (value_index if value_index is not None else i) + 1
        if not drop:
            return
        # `sys.argv += [...]` / `sys.argv.extend([...])` left with nothing to add: the statement goes
        parent = ctx.stack[-2] if len(ctx.stack) >= 2 else None
        emptied = len(drop) == len(elements) and simple and len(statement.body) == 1 and (
            isinstance(parent, cst.AugAssign) or (kind == "argv" and isinstance(parent, cst.Arg)))
        if sets:
            try:
                environ = ctx.module.code_for_node(ctx.name_for("os.environ", anchor=ctx.imports.first_import,
                                                                style="module"))
            except NameClash as exc:
                ctx.marker(node, f"Set {', '.join(v for v, _t in sets)} in the environment by hand.", detail=str(exc))
                return
            added = [cst.parse_statement(f"{environ}[\"{var}\"] = {text}\n") for var, text in sets]
            ctx.replace(statement, lambda new: cst.FlattenSentinel([
                added[0].with_changes(leading_lines=new.leading_lines), *added[1:],
                *([] if emptied else [new.with_changes(leading_lines=())])]))
        elif emptied:
            ctx.remove_statement(statement)
        if emptied:
            return
        last_comma = elements[-1].comma

        def edit(new):
            kept = [e for k, e in enumerate(new.elements) if k not in drop]
            if kept:
                kept[-1] = kept[-1].with_changes(comma=last_comma)
            return new.with_changes(elements=kept)

        ctx.replace(node, edit)


RULES = (LaunchFlagDefaults, LaunchArgumentLists)
