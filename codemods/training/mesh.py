"""The whole mesh of a ``DistributedConfig`` the training rules write (NM201, NM203, NM301, NM303).

In transformers 5.23 a model loaded with ``distributed_config=`` builds one device mesh of shape
``(pp_size, dp_replicate_size, fsdp_size, tp_size)`` and refuses to load unless its product equals
the world size (``The parallel mesh requires 8 processes, but world_size is 32``). optimum-neuron
made every process beyond ``tensor_parallel_size x pipeline_parallel_size`` a data-parallel rank
by itself, so a layout that keeps only ``tp_size`` fails every launch with data parallelism. The
data-parallel dimension is kept:

* ``zero_1=True`` (ZeRO-1: optimizer state sharded over the data-parallel ranks) became
  ``fsdp_size = WORLD_SIZE // tp_size`` already (FSDP2 shards parameters and gradients too);
* otherwise the processes left are ``dp_replicate_size = WORLD_SIZE // (tp_size x fsdp_size)``
  replicas: parameters replicated, gradients all-reduced (transformers applies FSDP2 over a
  ``(dp_replicate, fsdp)`` mesh whose shard dimension is 1), what plain data parallelism did;
* with pipeline parallelism there is none: ``DistributedConfig`` raises "Combining FSDP with
  pipeline parallelism is not supported yet" for ``dp_replicate_size x fsdp_size > 1``, so the
  launch must start exactly ``tp_size x pp_size`` processes (the marker says so).

``WORLD_SIZE`` is set by torchrun; a plain ``python script.py`` run has none (1), which gives 1 for
the data-parallel size when no other size is > 1.
"""

from __future__ import annotations

import re

import libcst as cst

from migrator.model import fitted

#: DistributedConfig fields of the data-parallel dimension
DATA_PARALLEL = ("fsdp_size", "dp_replicate_size")

_ATOMS = (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)


def _code(expr: cst.BaseExpression) -> str:
    return cst.Module(body=[]).code_for_node(expr)


def env_size(environ: str, var: str, quote: str = '"') -> str:
    """``int(os.environ.get("TP_SIZE", "1"))``: a size of the launch environment (1 when unset)."""
    return f"int({environ}.get({quote}{var}{quote}, {quote}1{quote}))"


def rest_of_world(environ: str, factors: list[cst.BaseExpression], quote: str = '"') -> str:
    """``WORLD_SIZE // (a * b)``: the processes left beside the sizes ``factors``."""
    world = env_size(environ, "WORLD_SIZE", quote)
    if not factors:
        return world
    codes = product(factors)
    return f"{world} // {codes if len(factors) == 1 else f'({codes})'}"


def _literal_int(expr: cst.BaseExpression | None) -> int | None:
    return expr.evaluated_value if isinstance(expr, cst.Integer) else None


def has_pipeline(sizes: dict[str, cst.BaseExpression]) -> bool:
    """Whether the layout may have pipeline stages (a pp_size other than a literal 1)."""
    return "pp_size" in sizes and _literal_int(sizes["pp_size"]) != 1


def whole_mesh(sizes: dict[str, cst.BaseExpression], environ: str,
               quote: str = '"') -> dict[str, cst.BaseExpression]:
    """``sizes`` (DistributedConfig field -> expression; tp_size / pp_size / fsdp_size) with the
    data-parallel dimension that makes their product the world size: ``dp_replicate_size`` for the
    processes the other sizes leave. Unchanged with a literal pp_size > 1 (no data-parallel
    dimension combines with it; a pp_size read at run time is a factor: 1 leaves replicas, more
    fails at load unless it leaves none), with fsdp_size = WORLD_SIZE // ... (zero_1: the rest of
    the world already), or without tensor or pipeline parallelism (nothing to complete)."""
    pp = sizes.get("pp_size")
    if "dp_replicate_size" in sizes or (_literal_int(pp) or 1) > 1:
        return dict(sizes)
    if "tp_size" not in sizes and pp is None:
        return dict(sizes)
    fsdp = sizes.get("fsdp_size")
    if fsdp is not None and "WORLD_SIZE" in _code(fsdp):
        return dict(sizes)
    factors = model_factors(sizes)
    replicas = rest_of_world(environ, factors, quote)
    if any(_literal_int(f) is None for f in factors):
        # sizes known at run time only: all of them 1 is a plain data-parallel run, which the Trainer
        # replicates itself (DDP, resumable); no mesh then
        replicas = f"{replicas} if {product(factors)} > 1 else 1"
    return {**sizes, "dp_replicate_size": cst.parse_expression(replicas)}


def model_factors(sizes: dict[str, cst.BaseExpression]) -> list[cst.BaseExpression]:
    """The sizes other than the data-parallel replicas (literal 1s left out)."""
    return [sizes[k] for k in ("tp_size", "pp_size", "fsdp_size") if k in sizes and _literal_int(sizes[k]) != 1]


def product(factors: list[cst.BaseExpression]) -> str:
    codes = [_code(f) if isinstance(f, _ATOMS) else f"({_code(f)})" for f in factors]
    return " * ".join(codes) if codes else "1"


_ENV_READ = re.compile(r"""int\([\w.]+\.get\((["'])(\w+)\1, \1\d+\1\)\)""")


def describe(sizes: dict[str, cst.BaseExpression]) -> str:
    """The layout for a marker: ``int(os.environ.get("TP_SIZE", "1"))`` shown as TP_SIZE."""
    return _ENV_READ.sub(lambda m: m.group(2), layout_text(sizes))


def one_per_line(parts: list[str], indent: str, offset: int, width: int = 119) -> str:
    """``keyword=value,`` lines at ``indent``; a value too wide is broken before its ``//``."""
    lines = []
    for part in parts:
        line = f"{indent}{part},"
        if offset + len(line) > width and " // " in part:
            left, right = part.split(" // ", 1)
            lines.append(f"{indent}{left}")
            right, cond, rest = right.partition(" if ")
            if cond and offset + len(indent) + len(f"// {right} if {rest},") > width:
                lines += [f"{indent}// {right}", f"{indent}if {rest},"]
            else:
                lines.append(f"{indent}// {right}{cond}{rest},")
        else:
            lines.append(line)
    return "".join(line + "\n" for line in lines)


def config_code(dist: str, sizes: dict[str, cst.BaseExpression], offset: int, step: str, width: int = 119,
                depth: int = 1, key: str = "distributed_config=") -> str:
    """``DistributedConfig(sizes)`` as a value ``depth`` levels below a statement indented by
    ``offset`` (1: a keyword argument ``key`` of a call; 2: an entry of a dict argument): on one
    line when it fits, else one size per line (the whitespace is relative to the block's indentation)."""
    parts = [f"{k}={_code(v)}" for k, v in sizes.items()]
    one_line = f"{dist}({', '.join(parts)})"
    if offset + len(step) * depth + len(key) + 1 + len(one_line) <= width:
        return one_line
    return f"{dist}(\n{one_per_line(parts, step * (depth + 1), offset, width)}{step * depth})"


def layout_text(sizes: dict[str, cst.BaseExpression]) -> str:
    return ", ".join(f"{k}={_code(v)}" for k, v in sizes.items())


def launch_advice(sizes: dict[str, cst.BaseExpression]) -> str:
    """What the marker of a load sharded with ``sizes`` (after :func:`whole_mesh`) says about the launch:
    a short clause (``launch_detail`` has the why)."""
    if has_pipeline(sizes):
        return "launch exactly tp_size x pp_size processes"
    if "dp_replicate_size" in sizes:
        model = " x ".join(k for k in ("tp_size", "fsdp_size") if k in sizes)
        return f"launch with torchrun --nproc_per_node=<a multiple of {model}>"
    if "fsdp_size" in sizes:
        return "launch with torchrun --nproc_per_node=<tp_size x fsdp_size>"
    return "launch with torchrun"


def launch_detail(sizes: dict[str, cst.BaseExpression]) -> str:
    """The long form of :func:`launch_advice` (a marker's detail)."""
    if has_pipeline(sizes):
        return PIPELINE_ADVICE
    if "dp_replicate_size" in sizes:
        model = " x ".join(k for k in ("tp_size", "fsdp_size") if k in sizes)
        return REPLICAS_ADVICE.format(model=model, den=model if " " not in model else f"({model})")
    if "fsdp_size" in sizes:
        return "tp_size x fsdp_size must equal the number of processes torchrun starts"
    return "the layout is set where the model is loaded; torchrun starts the processes"


FROM_CONFIG_MARKER = "Load the model with from_pretrained(..., distributed_config=...) to shard it: from_config takes none."


def short_code(code: str, width: int = 40) -> str:
    """A piece of code as a marker names it: one line, at most ``width`` characters."""
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


def sentence(clause: str) -> str:
    """A lower-case clause as the start of a marker sentence."""
    return clause[:1].upper() + clause[1:]


REPLICAS_ADVICE = (
    "launch with torchrun --nproc_per_node=<a multiple of {model}>: the other processes are data-parallel replicas "
    "(dp_replicate_size = WORLD_SIZE // {den}: parameters replicated, gradients all-reduced, as in the old data "
    "parallelism); give that size to fsdp_size instead to shard them with FSDP2 (less memory per core, what zero_1 "
    "did for the optimizer state)"
)
PIPELINE_ADVICE = (
    "with pp_size > 1 launch exactly tp_size x pp_size processes (torchrun --nproc_per_node=<tp_size x pp_size>): transformers 5.23 "
    "does not combine pipeline parallelism with a data-parallel dimension (fsdp_size or dp_replicate_size), so the "
    "data-parallel ranks the old run had beside it are gone; drop pp_size and keep them with dp_replicate_size "
    "(or fsdp_size) = WORLD_SIZE // tp_size if the model fits"
)


#: a Trainer's arguments with pipeline stages: transformers 5.23's Trainer cannot train a model loaded with pp_size > 1
#: (tests/test_parallel_preconditions.py: the ranks' collectives mismatch at the first step)
PIPELINE_DROPPED = ("Fit the model with tp_size/fsdp_size: pipeline_parallel_size={value} was dropped, the Trainer "
                    "trains no stages.")
PIPELINE_MAYBE = "If pipeline_parallel_size={value} is > 1, fit the model with tp_size/fsdp_size: the Trainer trains no stages."
PIPELINE_PLAIN = "If the pipeline size is > 1, fit the model with tp_size/fsdp_size: the Trainer trains no stages."


def pipeline_marker(value: str, known: bool) -> str:
    """The marker of a dropped pipeline size (``known``: it is an integer > 1)."""
    return fitted((PIPELINE_DROPPED if known else PIPELINE_MAYBE).format(value=value), PIPELINE_PLAIN)


#: the long forms of the layout markers (``Rule.markers`` of the rules that write them)
LAYOUT_MARKERS = (
    (PIPELINE_DROPPED,
     """transformers 5.23's Trainer cannot train a model loaded with pp_size > 1 (the ranks' collectives
     mismatch at the first step), so the pipeline size was dropped: the processes that were pipeline
     stages are data-parallel ranks now."""),
    (PIPELINE_MAYBE,
     """transformers 5.23's Trainer cannot train a model loaded with pp_size > 1, so the pipeline size was
     dropped; its value is not known here."""),
    (PIPELINE_PLAIN,
     """transformers 5.23's Trainer cannot train a model loaded with pp_size > 1, so the pipeline size was
     dropped; its value is not known here."""),
)
