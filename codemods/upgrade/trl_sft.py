"""TRL 0.x -> 1.16 SFT (NM613): what SFTTrainer/SFTConfig do differently or reject:

* ``SFTConfig(packing=True)``: which examples the model trains on depends on the TRL the script
  was written for: up to 0.18 fixed ``max_length`` blocks cut from the concatenated examples
  (ConstantLengthDataset, then ``pack_dataset``: TRL 1.16's ``packing_strategy="wrapped"``), 0.19
  "ffd", from 0.20 "bfd" (TRL 1.16's default; padding-free batches, padded to a multiple of 128 on
  neuron). ``max_seq_length`` (the field's name before 0.20) pins "wrapped"; otherwise a marker.
* defaults that flipped (``gradient_checkpointing``, ``bf16``): pinned to the old value, with a comment;
* keywords old ``SFTTrainer`` took itself (``max_seq_length``, ``dataset_text_field``, ``packing``,
  ...): they belong to ``SFTConfig`` now (marker);
* a batched ``formatting_func`` (returns a list): TRL 1.16 calls it per example
  (``{"text": formatting_func(example)}``): it is wrapped to get a batch of one.
"""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import MAX_LINE, ArgPlan, apply_plan, keywords, line_prefix, literal, quote_of, rewrite_call, statement_indent
from codemods.upgrade.base import owned_elsewhere, target_of
from codemods.upgrade.data import data
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule
from migrator.selfcheck.targetapi import api

SFT_CONFIG = "trl.SFTConfig"
SFT_TRAINER = "trl.SFTTrainer"
STATIC_STRATEGY = "wrapped"
PACKING_COMMENT = ("# \"wrapped\": fixed max_length blocks cut from the concatenated examples, as TRL 0.x packed "
                   "(TRL 1.16's default \"bfd\" packs other examples)")
PACKING_UNDECIDED = "Add packing_strategy=\"wrapped\" if this ran on TRL <= 0.18 (fixed blocks): TRL 1.16 packs with \"bfd\"."
#: defaults whose flip changes what a script does: pinned to the old value, written under the
#: target's own name for the field (5.23: "`gradient_checkpointing` is deprecated ... Use
#: `activation_checkpointing` instead"; the deprecated alias mirrors it), unless one of the
#: keywords named third is given (SFTConfig turns bf16 on only when fp16 is not set)
PINNED = (("gradient_checkpointing", "activation_checkpointing", ()), ("bf16", "bf16", ("fp16",)))
PARSERS = ("transformers.HfArgumentParser", "trl.TrlParser")
FILE_PARSES = ("parse_json_file", "parse_yaml_file", "parse_dict")
PARSED_COMMENT = ("# TRL 0.x defaults for what the command line (or a --config file) does not set "
                  "(TRL 1.16 turns them on)")
PARSED_MARKER = "Call set_defaults(gradient_checkpointing=False, bf16=False) on the parser first: TRL 1.16 turns both on."
FILE_MARKER = "Set gradient_checkpointing and bf16 to false in this config unless it sets them: TRL 1.16 turns both on."
DATASET_KWARGS_MARKER = "Apply {keys} in your own dataset preparation: TRL 1.16 reads only skip_prepare_dataset here."
DATASET_KWARGS_SHORT = "Apply the dataset_kwargs keys other than skip_prepare_dataset yourself: TRL 1.16 ignores them."
#: the dataset_kwargs key TRL 1.16 reads
DATASET_KWARGS_READ = ("skip_prepare_dataset",)
SFT_MARKERS = (
    (PACKING_UNDECIDED,
     """How packing packs changed across TRL releases: TRL <= 0.18 packed fixed-length blocks (TRL 1.16:
     packing_strategy="wrapped"), 0.19 used "ffd", >= 0.20 "bfd" (TRL 1.16's default). Which one the old
     run used depends on the TRL it ran with, which the project does not say here."""),
    (PARSED_MARKER,
     """TRL 1.16's SFTConfig defaults gradient_checkpointing and bf16 to True (TRL 0.x: False); a config
     parsed from the command line or a file gets the new defaults unless the parser's defaults say
     otherwise."""),
    (FILE_MARKER,
     """TRL 1.16's SFTConfig defaults gradient_checkpointing and bf16 to True (TRL 0.x: False); this config
     file is read into one and does not set them."""),
    (DATASET_KWARGS_MARKER,
     """TRL 0.x's SFTTrainer passed dataset_kwargs on to its dataset preparation (add_special_tokens,
     append_concat_token); TRL 1.16 reads only skip_prepare_dataset from it and ignores the other keys
     without an error: tokenize with those settings yourself (or in a formatting function)."""),
    ("Pass {keywords} to the SFTConfig given as args=: SFTTrainer no longer takes them.",
     """TRL 1.x moved these SFTTrainer arguments to SFTConfig; max_seq_length= is max_length= there."""),
)
#: what the target does where its dataclass default is not the value used
EFFECTIVE = {"bf16": "True unless fp16 is set"}


def _comment_above(ctx: PythonContext, text: str) -> None:
    statement = ctx.statement()
    if statement is None or not hasattr(statement, "leading_lines"):
        return

    def add(updated):
        if any(line.comment is not None and line.comment.value == text for line in updated.leading_lines):
            return updated
        return updated.with_changes(leading_lines=[*updated.leading_lines, cst.EmptyLine(comment=cst.Comment(text))])

    ctx.replace(statement, add)


def _packing_marked(ctx: PythonContext) -> bool:
    """Whether a marker about packing is above the statement already (NM203's, for a NeuronSFTConfig it renamed)."""
    statement = ctx.statement()
    return any(line.comment is not None and "neuron-migrate" in line.comment.value and "packing_strategy=" in line.comment.value
               for line in getattr(statement, "leading_lines", ()))


def _returns_list(fn: cst.FunctionDef) -> bool:
    """True when ``fn`` returns a list it builds (a list literal / comprehension, or a name bound to one)."""
    list_names: set[str] = set()
    returns: list[cst.BaseExpression] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, (cst.List, cst.ListComp)):
                for t in node.targets:
                    if isinstance(t.target, cst.Name):
                        list_names.add(t.target.value)

        def visit_Return(self, node: cst.Return) -> None:
            if node.value is not None:
                returns.append(node.value)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn

    fn.visit(V())
    return bool(returns) and all(
        isinstance(r, (cst.List, cst.ListComp)) or (isinstance(r, cst.Name) and r.value in list_names) for r in returns)


def _module_function(ctx: PythonContext, name: str) -> cst.FunctionDef | None:
    for stmt in ctx.module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


class SftUpgrade(PythonRule):
    id = "NM613"
    markers = SFT_MARKERS
    title = "TRL SFT: static-shape packing pinned, flipped defaults pinned, old trainer keywords, batched formatting_func"
    fix = "mixed"
    triggers = ("SFTConfig(", "SFTTrainer(", "SFTConfig,", "SFTConfig)")
    why = """
        TRL 1.16 changed what an old SFT script does without an error: `packing=True` packs
        "bfd" by default, other examples than TRL <= 0.18's fixed blocks cut from the concatenated
        examples, so `"wrapped"` (those blocks) is pinned with a comment where the config says
        it was written for such a TRL (`max_seq_length`), and a marker says which TRL packed how
        otherwise; `gradient_checkpointing` now defaults to True on SFTConfig and `bf16` to True
        unless `fp16` is set (the generated upgrade data records both flips), so the old False is
        pinned with a comment (gradient checkpointing as `activation_checkpointing`, the name 5.23
        reads; the old one is its deprecated alias); `formatting_func` is called
        per example, so a batched one (returning a list) is wrapped. Keywords the old SFTTrainer
        took itself (`max_seq_length`, `dataset_text_field`, `packing`) get a marker: they are
        SFTConfig fields now. A literal `dataset_kwargs` with keys other than `skip_prepare_dataset`
        (`add_special_tokens`, `append_concat_token`: TRL 0.x's dataset preparation read them) gets a
        marker: TRL 1.16 ignores them.
    """
    before = """
        from trl import SFTConfig

        config = SFTConfig(output_dir="out", max_seq_length=512, packing=True)
    """
    after = """
        from trl import SFTConfig

        # "wrapped": fixed max_length blocks cut from the concatenated examples, as TRL 0.x packed (TRL 1.16's default "bfd" packs other examples)
        # activation_checkpointing=False, bf16=False: TRL 0.x defaults kept (TRL 1.16.0 turns them on)
        config = SFTConfig(
            output_dir="out",
            max_length=512,
            packing=True,
            packing_strategy="wrapped",
            activation_checkpointing=False,
            bf16=False,
        )
    """
    caveats = """
        A parser of SFTConfig (`parser = TrlParser((..., SFTConfig))`, HfArgumentParser alike)
        gets `parser.set_defaults(gradient_checkpointing=False, bf16=False)` right after it is
        built: argparse defaults, so a flag on the command line or a TrlParser `--config` file
        still sets them, as it did with TRL 0.x; a parse of a JSON/YAML file or a dict
        (`parse_json_file`...) does not read those defaults: a marker. Otherwise only `SFTConfig(...)` calls (also those the Neuron rules emit: a keyword their rule adds
        itself, like NM202's `packing_strategy`, is not added twice), and `formatting_func=` of
        `SFTTrainer(...)` naming a function of the module. A `**kwargs` call is left alone. The old SFTTrainer keywords are not moved
        into the config: the marker names them.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Assign: self._on_assign}

    # ------------------------------------------------------------------ configs parsed from the command line
    def _parses_sft(self, ctx: PythonContext, call: cst.BaseExpression) -> bool:
        """``HfArgumentParser((..., SFTConfig, ...))`` / ``TrlParser(SFTConfig)``: a parser of SFT configs."""
        if not isinstance(call, cst.Call) or target_of(ctx, call.func) not in PARSERS or not call.args:
            return False
        first = call.args[0].value
        items = [e.value for e in first.elements] if isinstance(first, (cst.Tuple, cst.List)) else [first]
        return any(target_of(ctx, item) == SFT_CONFIG for item in items if isinstance(item, (cst.Name, cst.Attribute)))

    def _pins(self) -> list[tuple[str, bool]]:
        pins = []
        for field, _write_as, _unless in PINNED:
            change = data().default_change(SFT_CONFIG, field)
            if change is not None and isinstance(change[0], bool):
                pins.append((field, change[0]))
        return pins

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        value = node.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and self._parses_sft(ctx, value.func.value):
            ctx.marker(node, PARSED_MARKER)  # TrlParser(...).parse_args_and_config(): no statement in between
            return
        if not self._parses_sft(ctx, value) or len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        statement = ctx.statement()
        pins = self._pins()
        if not pins or not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return
        name = node.targets[0].target.value
        ctx.local_state().setdefault("sft parsers", set()).add(name)
        state = ctx.local_state()
        if "code" not in state:
            state["code"] = ctx.module.code
        if f"{name}.set_defaults(" in state["code"]:
            return  # the script sets the parser's defaults itself (or a migration did)
        args = ", ".join(f"{field}={value}" for field, value in pins)
        text = f"{PARSED_COMMENT}\n{name}.set_defaults({args})\n"
        ctx.insert_after(statement, [cst.parse_statement(text)])
        ctx.finding(node, f"{name}.set_defaults({args}): TRL 0.x defaults kept for configs parsed from the command "
                          f"line (a flag or a --config file still sets them)")

    def _parsed_file(self, node: cst.Call, ctx: PythonContext) -> None:
        """``parser.parse_json_file(...)`` / ``parse_yaml_file`` / ``parse_dict``: the values come from the file
        (set_defaults does not apply there): which keys it has is not in sight."""
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in FILE_PARSES):
            return
        if (isinstance(func.value, cst.Name) and func.value.value in ctx.local_state().get("sft parsers", ())) \
                or self._parses_sft(ctx, func.value):
            ctx.marker(node, FILE_MARKER)

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        self._parsed_file(node, ctx)
        target = target_of(ctx, node.func)
        if target == SFT_CONFIG:
            self._config(node, ctx)
        elif target == SFT_TRAINER:
            self._trainer(node, ctx)

    def _dataset_kwargs(self, kw: dict, ctx: PythonContext) -> None:
        """A literal ``dataset_kwargs`` with keys TRL 1.16 ignores (it reads only skip_prepare_dataset)."""
        arg = kw.get("dataset_kwargs")
        if arg is None:
            return
        value = arg.value
        if isinstance(value, cst.Dict):
            keys = [el.key.evaluated_value for el in value.elements
                    if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString)]
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
            keys = [a.keyword.value for a in value.args if a.keyword is not None]
        else:
            return
        ignored = [k for k in keys if k not in DATASET_KWARGS_READ]
        if ignored:
            ctx.marker(arg, fitted(DATASET_KWARGS_MARKER.format(keys=", ".join(ignored)), DATASET_KWARGS_SHORT))

    def _config(self, node: cst.Call, ctx: PythonContext) -> None:
        if any(a.star == "**" for a in node.args):
            return
        kw = keywords(node)
        self._dataset_kwargs(kw, ctx)
        plan = ArgPlan()
        q = quote_of(node)
        if ("packing" in kw and literal(kw["packing"].value) is not False and "packing_strategy" not in kw
                and "padding_free" not in kw and api().accepts(SFT_CONFIG, "packing_strategy") is True
                and not owned_elsewhere(ctx, node.func, self.id)):  # NeuronSFTConfig: NM203 knows its TRL
            if "max_seq_length" in kw:  # TRL <= 0.19's name: fixed-length blocks (wrapped) until 0.18
                plan.add.append(("packing_strategy", lambda: cst.SimpleString(f"{q}{STATIC_STRATEGY}{q}")))
                _comment_above(ctx, PACKING_COMMENT)
                ctx.finding(kw["packing"], "packing_strategy=\"wrapped\" pinned (TRL 0.x before max_length packed "
                                           "fixed-length blocks)")
            elif not _packing_marked(ctx):
                ctx.marker(kw["packing"], PACKING_UNDECIDED)
        pinned = []
        for field, write_as, unless in PINNED:
            change = data().default_change(SFT_CONFIG, field)
            if (field in kw or write_as in kw or any(k in kw for k in unless) or change is None
                    or not isinstance(change[0], bool)):
                continue
            if api().accepts(SFT_CONFIG, write_as) is not True:
                write_as = field
            plan.add.append((write_as, lambda v=change[0]: cst.Name(str(v))))
            pinned.append(f"{write_as}={change[0]}")
            ctx.finding(node, f"{field}={change[0]} pinned (trl {change[2]}'s default; {data().target_versions.get('trl')} "
                              f"defaults to {EFFECTIVE.get(field, change[1])})")
        if pinned:
            _comment_above(ctx, f"# {', '.join(pinned)}: TRL 0.x default{'s' if len(pinned) > 1 else ''} kept (TRL "
                                f"{data().target_versions.get('trl')} turns {'them' if len(pinned) > 1 else 'it'} on)")
        if plan.add:
            adds = list(plan.add)
            indent = statement_indent(ctx) + " " * line_prefix(ctx, node)
            step = ctx.module.default_indent
            # against the UPDATED call: another rule may have added the keyword to it already
            ctx.replace(node, lambda new: apply_plan(
                new, ArgPlan(add=[(k, f) for k, f in adds if k not in keywords(new)]), MAX_LINE, indent, step))

    def _trainer(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        self._dataset_kwargs(kw, ctx)
        change = data().method_change(f"{SFT_TRAINER}.__init__")
        if change is not None and not owned_elsewhere(ctx, node.func, self.id):  # NM202 moves them for its trainers
            gone = [k for k in kw if k in {p[0] for p in change["old"]} and api().accepts(SFT_TRAINER, k) is False
                    and k != "tokenizer"]
            if gone:
                ctx.marker(node, f"Pass {', '.join(g + '=' for g in gone)} to the SFTConfig given as args=: SFTTrainer no "
                                 "longer takes them.")
        fmt = kw.get("formatting_func")
        if fmt is not None and isinstance(fmt.value, cst.Name):
            fn = _module_function(ctx, fmt.value.value)
            if fn is not None and _returns_list(fn):
                name = fmt.value.value
                wrapper = f"lambda example: {name}({{key: [value] for key, value in example.items()}})[0]"
                rewrite_call(ctx, node, ArgPlan(revalue={"formatting_func": lambda v: cst.parse_expression(wrapper)}))
                ctx.finding(fmt, f"formatting_func={name} (batched) called on a batch of one: TRL 1.x calls it per example")


RULES = (SftUpgrade,)
