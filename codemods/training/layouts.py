"""The parallel layout of NM201/NM203 moves to the model load: parallel sizes given to the training
arguments (or an SFT config) are followed to the ``from_pretrained``/``from_config`` call of the
model handed to the trainer, through variables and module functions, and become its
``distributed_config=``; arguments that shard get ``save_only_model=True``."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from codemods.common.arg_plan import (
    MAX_LINE,
    SAVE_ONLY_MARKER,
    SAVE_ONLY_MODEL,
    ArgPlan,
    apply_plan,
    fsdp_size_code,
    has_star_kwargs,
    keywords,
    line_prefix,
    literal,
    quote_of,
    save_only_model_code,
    statement_indent,
)
from codemods.training.lora import fsdp_instead, lora_blocks_tp, lora_marker, tensor_parallel
from codemods.training.mesh import (
    config_code,
    describe,
    env_size,
    launch_advice,
    launch_detail,
    layout_text,
    model_factors,
    product,
    sentence,
    whole_mesh,
)
from codemods.training.sources import (
    DISTRIBUTED_CONFIG,
    LAZY_LOAD,
    LOADERS,
    NOT_MODELS,
    SFT_TRAINER_SOURCES,
    TRAINER_SOURCES,
)
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext
from migrator.tree import walk_with_ancestors

_MODEL_ID_RE = re.compile(
    r"(?:^|_)(?:model_id|model_name|model_name_or_path|name_or_path|model_path|model_dir|checkpoint)$"
)


def _code(ctx: PythonContext, node: cst.CSTNode) -> str:
    return ctx.module.code_for_node(node)


# ---------------------------------------------------------------------------------------------
# The parallel layout moves to the load of the model handed to the trainer (NM201, NM203)
# ---------------------------------------------------------------------------------------------

TRAINER_CLASSES = TRAINER_SOURCES + SFT_TRAINER_SOURCES + (
    "transformers.Trainer", "transformers.Seq2SeqTrainer", "trl.SFTTrainer")


@dataclass
class _Layout:
    """Arguments built with parallel sizes: ``call`` (bound to ``target`` = (scope, name), or None)."""

    call: cst.Call
    sizes: dict
    target: tuple | None
    statement: cst.CSTNode
    plan: ArgPlan
    layout: str
    #: arguments parsed from the command line (``call`` is the parse): the sizes are the launch environment's
    parsed: bool = False
    #: the dict literal unpacked into ``call`` (``**settings``, spread.py), when it is visible
    spread: object = None
    #: ``target`` is a parameter of the module function the arguments are passed to under the same name
    #: (``training_function(script_args, training_args)``): it is bound by the call, not by an assignment
    passed: bool = False


#: the layout of parsed arguments (they no longer carry the sizes): TP_SIZE and FSDP_SIZE of the launch environment
PARSED_SIZES = (("tp_size", "TP_SIZE"), ("fsdp_size", "FSDP_SIZE"))


def parsed_layout(environ: str, quote: str = '"') -> dict[str, cst.BaseExpression]:
    return whole_mesh({field: cst.parse_expression(env_size(environ, var, quote)) for field, var in PARSED_SIZES},
                      environ, quote)


@dataclass
class _Load:
    """A ``<transformers class>.from_pretrained/from_config(...)`` call and the (lazy) edit of its arguments."""

    node: cst.Call
    scope: int
    lazy: bool  # inside `with lazy_load_for_parallelism(...)`: NM301 gives it the layout
    plan: ArgPlan
    indent: int = 0  # of its statement (where a DistributedConfig of several lines is laid out)
    step: str = "    "


def _track(ctx: PythonContext) -> dict:
    return ctx.local_state().setdefault("track", {
        "funcs": {}, "assigns": {}, "returns": {}, "calls": {}, "trainers": [], "loads": {}})


def _tracking_handlers() -> dict:
    return {cst.FunctionDef: _track_def, cst.Assign: _track_assign, cst.AnnAssign: _track_assign,
            cst.Return: _track_return}


def _track_def(node: cst.FunctionDef, ctx: PythonContext) -> None:
    if len(ctx.stack) == 2:  # defined at module level
        funcs = _track(ctx)["funcs"]
        name = node.name.value
        funcs[name] = None if name in funcs else node


def _track_assign(node: cst.Assign | cst.AnnAssign, ctx: PythonContext) -> None:
    assigns = _track(ctx)["assigns"]
    scope = ctx.scope_id
    if node.value is not None:  # where a value is bound (the dict literals of spread.py)
        _track(ctx).setdefault("assign_statements", {})[id(node.value)] = ctx.statement()
    if isinstance(node, cst.Assign):
        _track_mutation(node, ctx)
    if isinstance(node, cst.AnnAssign):
        if isinstance(node.target, cst.Name) and node.value is not None:
            assigns.setdefault((scope, node.target.value), []).append(node.value)
        return
    for t in node.targets:
        if isinstance(t.target, cst.Name):
            assigns.setdefault((scope, t.target.value), []).append(node.value if len(node.targets) == 1 else None)
        for name in _unpacked(t.target):
            if name is not None:
                assigns.setdefault((scope, name), []).append(None)


#: a key set by a mutation that cannot be read (``settings[name] = ...``, ``settings.update(other)``)
UNKNOWN = None


def _track_mutation(node: cst.CSTNode, ctx: PythonContext) -> None:
    """``name["key"] = value`` (Assign) and ``name.update(key=value)`` (Call): the keys set on a name."""
    muts = _track(ctx).setdefault("dict_sets", {})
    scope = ctx.scope_id
    if isinstance(node, cst.Assign):
        for t in node.targets:
            target = t.target
            if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                key = _subscript_key(target)
                muts.setdefault((scope, target.value.value), {})[key] = literal(node.value) if key else None
        return
    func = node.func
    if isinstance(node, cst.Call) and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.attr.value in ("update", "setdefault", "pop", "__setitem__"):
        sets = muts.setdefault((scope, func.value.value), {})
        if func.attr.value == "update":
            for a in node.args:
                if a.keyword is not None:
                    sets[a.keyword.value] = literal(a.value)
                else:
                    sets[UNKNOWN] = None
        else:
            key = literal(node.args[0].value) if node.args else None
            sets[key if isinstance(key, str) else UNKNOWN] = None


def _subscript_key(target: cst.Subscript) -> str | None:
    if len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
        return None
    key = literal(target.slice[0].slice.value)
    return key if isinstance(key, str) else None


def _track_return(node: cst.Return, ctx: PythonContext) -> None:
    _track(ctx)["returns"].setdefault(ctx.scope_id, []).append(node.value)


def _track_call(node: cst.Call, qual: str | None, ctx: PythonContext) -> None:
    """Calls of module functions (counted), trainer calls, and model loads of transformers classes."""
    func = node.func
    _track_mutation(node, ctx)
    if isinstance(func, cst.Name):
        calls = _track(ctx)["calls"]
        calls[func.value] = calls.get(func.value, 0) + 1
    if qual in TRAINER_CLASSES:
        _track(ctx)["trainers"].append((ctx.scope_id, node))
        return
    if not isinstance(func, cst.Attribute) or func.attr.value not in LOADERS:
        return
    cls = ctx.qualname(func.value) or ""
    if not cls.startswith("transformers.") or any(w in cls.rsplit(".", 1)[-1] for w in NOT_MODELS):
        return
    lazy = any(isinstance(a, cst.With) and any(isinstance(i.item, cst.Call) and ctx.qualname(i.item.func) in LAZY_LOAD
                                               for i in a.items) for a in ctx.stack)
    plan = ArgPlan()
    indent, prefix, step = statement_indent(ctx), " " * line_prefix(ctx, node), ctx.module.default_indent
    if not lazy and func.attr.value == "from_pretrained":
        ctx.replace(node, lambda new: new if plan.empty() else apply_plan(new, plan, MAX_LINE, indent + prefix, step))
    _track(ctx)["loads"][id(node)] = _Load(node, ctx.scope_id, lazy, plan, len(indent), step)


def _positional(call: cst.Call, index: int) -> cst.BaseExpression | None:
    args = [a for a in call.args if a.keyword is None]
    if index < len(args) and not args[index].star and all(not a.star for a in args[:index]):
        return args[index].value
    return None


def _follow(expr: cst.BaseExpression | None, scope: int, track: dict):
    """The load that builds ``expr`` (a load call, a name assigned once from one, or a call of a module
    function that returns one): ((load, call site, helper name or None), None) or (None, why not)."""
    if isinstance(expr, cst.Name):
        values = track["assigns"].get((scope, expr.value), [])
        if len(values) != 1 or values[0] is None:
            return None, (f"{expr.value} is not built in this function" if not values else
                          f"{expr.value} is assigned more than once in this function" if len(values) > 1 else
                          f"{expr.value} is not assigned from a model load")
        expr = values[0]
    if not isinstance(expr, cst.Call):
        return None, "the model is not built by a call the rule can follow"
    load = track["loads"].get(id(expr))
    if load is not None:
        return (load, expr, None), None
    name = expr.func.value if isinstance(expr.func, cst.Name) else None
    helper = track["funcs"].get(name) if name else None
    if helper is None:
        return None, "the model is not built by a transformers from_pretrained in this module"
    returns = track["returns"].get(id(helper), [])
    if len(returns) != 1:
        return None, f"{name}() does not return one model load"
    value = returns[0]
    if isinstance(value, cst.Name):
        values = track["assigns"].get((id(helper), value.value), [])
        value = values[0] if len(values) == 1 else None
    load = track["loads"].get(id(value)) if isinstance(value, cst.Call) else None
    if load is None:
        return None, f"{name}() does not return a transformers from_pretrained load the rule can follow"
    return (load, expr, name), None


def _load_of(entry: _Layout, track: dict):
    """The load of the model that the trainer(s) given ``entry``'s arguments train."""
    found, reason = None, None
    if entry.target is not None and len(track["assigns"].get(entry.target, ())) != (0 if entry.passed else 1):
        return None, f"{entry.target[1]} is assigned more than once in this function"
    for scope, trainer in track["trainers"]:
        kw = keywords(trainer)
        args = kw["args"].value if "args" in kw else _positional(trainer, 1)
        if args is not entry.call and not (entry.target is not None and isinstance(args, cst.Name)
                                           and (scope, args.value) == entry.target):
            continue
        model = kw["model"].value if "model" in kw else _positional(trainer, 0)
        if model is None:
            return None, "the trainer gets no model the rule can see"
        if _is_model_id(model):
            return None, "the trainer loads the model from a name itself"
        got, reason = _follow(model, scope, track)
        if got is None:
            return None, reason
        if found is not None and found[0] is not got[0]:
            return None, "the arguments train models loaded in different places"
        found = got
    return found, reason


def _move_layouts(ctx: PythonContext, entries: list[_Layout], what: str) -> list[tuple[_Layout, str | None]]:
    """Give each load of a model trained with ``entries`` its ``distributed_config``; return the
    entries it could not do it for, with the reason (None: no trainer of these arguments found)."""
    if not entries:
        return []
    track = ctx.local_state().get("track") or _track(ctx)
    failed: list[tuple[_Layout, str | None]] = []
    by_load: dict[int, tuple[_Load, str | None, list]] = {}
    for entry in entries:
        found, reason = _load_of(entry, track)
        if found is None:
            failed.append((entry, reason))
            continue
        load, site, helper = found
        by_load.setdefault(id(load.node), (load, helper, []))[2].append((entry, site))
    for load, helper, users in by_load.values():
        reason = _cannot_edit(ctx, load, helper, users, track)
        if reason:
            failed.extend((entry, reason) for entry, _site in users)
            continue
        if load.lazy:
            for entry, _site in users:
                ctx.finding(entry.statement, f"the parallel sizes go to the model load inside "
                                             f"lazy_load_for_parallelism (NM301): DistributedConfig({entry.layout})")
                _save_only_model(ctx, entry)
            continue
        first = users[0][0]
        quote = quote_of(load.node)
        try:
            dist = _code(ctx, ctx.name_for(DISTRIBUTED_CONFIG, anchor=ctx.imports.binding_of(first.call.func)))
            sizes = dict(first.sizes)
            if first.parsed:
                environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
                sizes = parsed_layout(environ, quote)
            elif "fsdp_size" in sizes or whole_mesh(sizes, "os.environ") != sizes:
                environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
                if "fsdp_size" in sizes:
                    sizes["fsdp_size"] = cst.parse_expression(fsdp_size_code(environ, sizes.get("tp_size"), quote))
                sizes = whole_mesh(sizes, environ, quote)
            lora = lora_blocks_tp(ctx) if tensor_parallel(sizes) else None
            if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
                environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
                sizes = fsdp_instead(environ, quote)
        except NameClash as exc:
            failed.extend((entry, f"add it by hand: {exc}") for entry, _site in users)
            continue
        layout = layout_text(sizes)
        given = ctx.scratch.setdefault("NM201+NM203 layouts", {})  # one load, two rules (NM201 and NM203)
        if id(load.node) in given:
            failed.extend((entry, "the load already gets a layout from other arguments") for entry, _site in users)
            continue
        given[id(load.node)] = layout
        text = config_code(dist, sizes, load.indent, load.step)
        load.plan.add.append(("distributed_config", lambda text=text: cst.parse_expression(text)))
        where = f" in {helper}()" if helper else ""
        ctx.finding(load.node, f"distributed_config=DistributedConfig({describe(sizes)}) added to the load of the model "
                               f"trained with the {what} (their parallel sizes)")
        parsed = ("the parsed training arguments no longer carry tensor_parallel_size: set TP_SIZE (and FSDP_SIZE "
                  "for zero_1) in the environment of the launch, as NM515 does in the launch scripts it migrates; "
                  if first.parsed else "")
        if lora:
            ctx.marker(load.node, lora_marker(lora), detail=lora)
        else:
            ctx.marker(load.node, sharded_load_marker(sizes, first.parsed),
                       detail=f"The model is sharded when it is loaded (DistributedConfig({describe(sizes)})): "
                              f"{parsed}{launch_detail(sizes)}")
        for entry, _site in users:
            ctx.finding(entry.statement, f"the parallel sizes moved to the load of the trained model{where}: "
                                         f"distributed_config=DistributedConfig({describe(sizes)})")
            _save_only_model(ctx, entry)
    return failed


def sharded_load_marker(sizes: dict[str, cst.BaseExpression], parsed: bool = False) -> str:
    """The marker of a load the migration gave a DistributedConfig: how to launch it."""
    if parsed:
        return "Set TP_SIZE (and FSDP_SIZE) in the launch environment: the parsed arguments no longer carry the sizes."
    advice = sentence(launch_advice(sizes))
    return fitted(f"{advice}: this load shards the model ({describe(sizes)}).",
                  f"{advice}: this load shards the model with a DistributedConfig.")


#: the long forms of the markers of moved layouts (``Rule.markers`` of the rules that move them)
SHARDED_MARKERS = (
    ("{launch}: this load shards the model ({layout}).",
     """The parallel layout is set where the model is loaded (DistributedConfig on from_pretrained, under
     torchrun): the launch must start processes that fit it. The other processes beyond tp_size x
     fsdp_size are data-parallel replicas (dp_replicate_size: parameters replicated, gradients
     all-reduced, as in the old data parallelism); giving that size to fsdp_size instead shards them with
     FSDP2 (less memory per core, what zero_1 did for the optimizer state)."""),
    ("Set TP_SIZE (and FSDP_SIZE) in the launch environment: the parsed arguments no longer carry the sizes.",
     """The script parses its training arguments (HfArgumentParser), whose tensor_parallel_size no longer
     exists: the migrated load reads TP_SIZE and FSDP_SIZE from the environment, which the launch sets (NM515
     does it in the launch scripts it migrates)."""),
    (SAVE_ONLY_MARKER,
     """The Trainer refuses a model sharded at load time unless save_only_model=True or save_strategy="no":
     its optimizer state cannot be checkpointed for resuming. The rule could not set it here."""),
)


def _cannot_edit(ctx: PythonContext, load: _Load, helper: str | None, users: list, track: dict) -> str | None:
    layouts = sorted({entry.layout for entry, _site in users})
    if len(layouts) > 1:
        where = f"{helper}()" if helper else "the same load"
        return f"{where} loads models trained with different layouts: " + " and ".join(
            f"DistributedConfig({x})" for x in layouts)
    if helper:
        sites = {id(site) for _entry, site in users}
        if track["calls"].get(helper, 0) > len(sites):
            return f"{helper}() is called elsewhere too: every model it loads would be sharded"
        if not users[0][0].parsed and any(not isinstance(v, cst.Integer) for k, v in users[0][0].sizes.items()
                                          if k != "fsdp_size"):
            return f"the sizes are not literals and the model is loaded in {helper}()"
    if load.lazy:
        return None
    node = load.node
    if node.func.attr.value == "from_config":
        return "the model is built with from_config, which takes no distributed_config: load it with from_pretrained"
    kw = keywords(node)
    for name in ("distributed_config", "device_map"):
        if name in kw:
            return (f"the load of the model already passes {name}=: device_map and distributed_config exclude "
                    "each other, keep one")
    if has_star_kwargs(node):
        return "the load passes **kwargs, which may hold device_map or distributed_config"
    return None


def _save_only_model(ctx: PythonContext, entry: _Layout) -> None:
    if entry.parsed:  # after the parse: `if TP_SIZE * FSDP_SIZE > 1: <name>.save_only_model = True`
        done = ctx.local_state().setdefault("parsed save_only_model", set())
        if id(entry.statement) in done or not isinstance(entry.statement, cst.SimpleStatementLine):
            return
        done.add(id(entry.statement))
        try:
            environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
        except NameClash:
            ctx.marker(entry.statement, SAVE_ONLY_MARKER.format(where=f"{entry.target[1]}.save_only_model = True"))
            return
        factors = [_code(ctx, f) for f in model_factors(parsed_layout(environ))]
        ctx.insert_after(entry.statement, [cst.parse_statement(
            save_only_model_code(entry.target[1], factors, ctx.module.default_indent))])
        ctx.finding(entry.statement, f"{entry.target[1]}.save_only_model = True when TP_SIZE x FSDP_SIZE > 1: "
                                     f"{SAVE_ONLY_MODEL}")
        return
    kw = keywords(entry.call)
    if "save_only_model" in kw:
        if literal(kw["save_only_model"].value) is not True:
            ctx.marker(entry.statement, SAVE_ONLY_MARKER.format(where="save_only_model=True"))
        return
    try:
        value = _sharded_condition(ctx, entry)
    except NameClash as exc:
        ctx.marker(entry.statement, SAVE_ONLY_MARKER.format(where="save_only_model=True when the model is sharded"),
                   detail=str(exc))
        return
    if "save_strategy" in kw and literal(kw["save_strategy"].value) == "no":
        return
    spread = entry.spread
    if spread is not None:  # **settings of a visible dict literal: the key goes there
        if "save_only_model" in spread.keys():
            if spread.value_of("save_only_model") is not True:
                ctx.marker(entry.statement, SAVE_ONLY_MARKER.format(where=f"{spread.name}[\"save_only_model\"] = True"))
            return
        if spread.value_of("save_strategy") == "no":
            return
        spread.plan.add.append(("save_only_model", lambda: cst.parse_expression(value)))
        ctx.finding(entry.statement, f"added save_only_model={value} to {spread.name}: {SAVE_ONLY_MODEL}")
        return
    if has_star_kwargs(entry.call):
        ctx.marker(entry.statement, SAVE_ONLY_MARKER.format(where="save_only_model=True unless **kwargs does"))
        return
    entry.plan.add.append(("save_only_model", lambda: cst.parse_expression(value)))
    ctx.finding(entry.statement, f"added save_only_model={value}: {SAVE_ONLY_MODEL}")


def _sharded_condition(ctx: PythonContext, entry: _Layout) -> str:
    """``save_only_model``'s value for arguments whose model is loaded with ``entry``'s layout: ``True`` when a
    size is a literal above 1 (the model is always sharded), else ``<tp * pp * fsdp> > 1``: with every size 1
    ``from_pretrained`` builds no mesh, the model is not sharded and its checkpoints can be resumed, as before."""
    sizes = dict(entry.sizes)
    if "fsdp_size" in sizes:  # zero_1: WORLD_SIZE // tp_size, read where the arguments are built
        environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
        sizes["fsdp_size"] = cst.parse_expression(fsdp_size_code(environ, sizes.get("tp_size"), quote_of(entry.call)))
    factors = model_factors(sizes)
    if not factors or any(isinstance(f, cst.Integer) and f.evaluated_value > 1 for f in factors):
        return "True"
    return f"{product(factors)} > 1"


PARSE_METHODS = ("parse_args_and_config", "parse_args_into_dataclasses", "parse_dict", "parse_json_file",
                 "parse_yaml_file")


def _config_index(call: cst.Call, ctx: PythonContext, sources: tuple[str, ...]) -> int | None:
    """``HfArgumentParser((A, NeuronSFTConfig))`` / ``TrlParser(NeuronSFTConfig)``: where the config
    class is among the dataclasses the parser returns (None: it is not there)."""
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        return None
    first = call.args[0].value
    if isinstance(first, (cst.Tuple, cst.List)):
        items = [e.value for e in first.elements]
    else:
        items = [first]
    for i, item in enumerate(items):
        # (by what the name resolves to: `NeuronTrainingArguments as TrainingArguments` is the Neuron class)
        if isinstance(item, (cst.Name, cst.Attribute)) and ctx.qualname(item) in sources:
            return i
    return None


def _track_parsed(node: cst.Assign, ctx: PythonContext, sources: tuple[str, ...]) -> None:
    """``parser = TrlParser((ScriptArguments, NeuronSFTConfig))`` and ``a, b = parser.parse_...()``:
    the name that holds the parsed arguments of one of ``sources``, recorded in the rule's state as
    ``"parsed"``: (name, statement that binds it, scope, the parse call)."""
    value = node.value
    if len(node.targets) != 1 or not isinstance(value, cst.Call):
        return
    state = ctx.local_state()
    target = node.targets[0].target
    index = _config_index(value, ctx, sources)
    if index is not None and isinstance(target, cst.Name):
        state.setdefault("parsers", {})[(ctx.scope_id, target.value)] = index
        return
    func = value.func
    if not isinstance(func, cst.Attribute) or func.attr.value not in PARSE_METHODS:
        return
    if isinstance(func.value, cst.Name):
        index = state.get("parsers", {}).get((ctx.scope_id, func.value.value))
    elif isinstance(func.value, cst.Call):
        index = _config_index(func.value, ctx, sources)
    if index is None:
        return
    names = _unpacked(target)
    if index < len(names) and names[index] is not None:
        state.setdefault("parsed", []).append((names[index], ctx.statement(), ctx.scope_id, value))


def _unpacked(target: cst.BaseExpression) -> list[str | None]:
    """``a, b, c`` / ``(a,)`` / ``[a, b]``: the names in order (None for anything else)."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return []
    return [e.value.value if isinstance(e.value, cst.Name) and not isinstance(e, cst.StarredElement) else None
            for e in target.elements]


def _is_to_dict(expr: cst.BaseExpression) -> bool:
    return (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "to_dict"
            and not expr.args)


def _is_model_id(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    if isinstance(expr, cst.Attribute):
        return bool(_MODEL_ID_RE.search(expr.attr.value))
    if isinstance(expr, cst.Name):
        return bool(_MODEL_ID_RE.search(expr.value))
    return False


def passed_on(ctx: PythonContext, name: str, scope: int) -> list[int]:
    """The module functions (their ids) that the function ``scope`` (or the module, 0) calls with ``name`` as an
    argument bound to a parameter of the same name (``training_function(script_args, training_args)``, or
    ``f(training_args=training_args)``): the parsed arguments reach their trainer there."""
    funcs = {stmt.name.value: stmt for stmt in ctx.module.body if isinstance(stmt, cst.FunctionDef)}
    out: list[int] = []
    for n, ancestors in walk_with_ancestors(ctx.module):
        if not (isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in funcs):
            continue
        where = next((id(a) for a in reversed(ancestors) if isinstance(a, (cst.FunctionDef, cst.Lambda))), 0)
        if where != scope:
            continue
        params = [p.name.value for p in funcs[n.func.value].params.params]
        for i, a in enumerate(n.args):
            if not (isinstance(a.value, cst.Name) and a.value.value == name) or a.star:
                continue
            bound = a.keyword.value if a.keyword is not None else (params[i] if i < len(params) else None)
            if bound == name:
                out.append(id(funcs[n.func.value]))
    return out
