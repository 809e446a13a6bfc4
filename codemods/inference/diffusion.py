"""NM104: optimum.neuron diffusion pipelines (Neuron*Pipeline) -> the diffusers pipeline on "neuron".

optimum-neuron compiled every component of a diffusion pipeline for static shapes::

    pipe = NeuronStableDiffusionPipeline.from_pretrained(
        model_id, export=True, batch_size=1, height=512, width=512, auto_cast="matmul", auto_cast_type="bf16"
    )
    image = pipe(prompt).images[0]

Under TorchNeuron the diffusers pipeline runs on the ``neuron`` device; the shapes become call-time
arguments (keep them fixed: one shape, one compiled graph) and LoRA adapters are loaded and fused::

    pipe = StableDiffusionPipeline.from_pretrained(model_id, dtype=torch.bfloat16).to("neuron")
    image = pipe(prompt, height=512, width=512).images[0]

The rename table (NM100) renames the classes; this rule owns their ``from_pretrained`` arguments.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.export_only import mark_export_only
from codemods.inference.args import (
    drop_expanded_dicts,
    COMPILER_KNOBS,
    DTYPES,
    EQ,
    expand_literal_kwargs,
    literal_dicts,
    hug_layout,
    indent_of,
    layout,
    line_context,
    literal,
    prefix_len,
    quote_style,
    torch_dtype,
)
from codemods.common.renames import load_table
from migrator.imports import build_dotted
from migrator.model import OUTSIDE_NAMES, fitted
from migrator.rules import NameClash, PythonContext, PythonRule


def _sources() -> dict[str, str]:
    out: dict[str, str] = {}
    for qual, rename in load_table().items():
        if rename.rule == "NM100" and rename.target.startswith("diffusers."):
            out[qual] = qual.rsplit(".", 1)[1]
    return out


SOURCES = _sources()
CLASS_NAMES = tuple(sorted(set(SOURCES.values())))

#: shapes that become arguments of the pipeline call
CALL_SHAPES = ("height", "width", "num_images_per_prompt")
SHAPES = ("batch_size", "sequence_length", *CALL_SHAPES, "image_size", "num_channels", "vae_scale_factor",
          "encoder_hidden_size", "rotary_axes_dim")
#: pipelines whose call takes no height/width: the output size follows the input image
NO_SIZE = ("NeuronStableDiffusionImg2ImgPipeline", "NeuronStableDiffusionXLImg2ImgPipeline",
           "NeuronStableDiffusionInstructPix2PixPipeline")
LORA = ("lora_model_ids", "lora_weight_names", "lora_adapter_names", "lora_scales")
IP_ADAPTER = ("ip_adapter_id", "ip_adapter_subfolder", "ip_adapter_weight_name", "ip_adapter_scale")
FILE_NAMES = ("text_encoder_file_name", "text_encoder_2_file_name", "unet_file_name", "transformer_file_name",
              "vae_encoder_file_name", "vae_decoder_file_name", "controlnet_file_name", "image_encoder_file_name",
              "model_and_vae_file_name")
PARALLEL = ("data_parallel_mode", "device_ids")
#: the denoiser of each pipeline family and how to compile it: diffusers' compile_repeated_blocks
#: compiles each repeated block once (``_repeated_blocks`` of UNet2DConditionModel and
#: FluxTransformer2DModel, diffusers 0.42.1); PixArtTransformer2DModel declares none, so the
#: whole module is compiled (``nn.Module.compile``)
COMPILE = (
    ("NeuronFlux", ("transformer", "compile_repeated_blocks")),
    ("NeuronPixArt", ("transformer", "compile")),
    ("Neuron", ("unet", "compile_repeated_blocks")),  # Stable Diffusion (XL), LCM, ControlNet, ...
)
#: the transformer a tensor-parallel pipeline is sharded through: the one of these pipelines whose
#: class declares a ``_tp_plan`` in diffusers 0.42.1 (FluxPipeline, FluxInpaintPipeline and
#: FluxKontextPipeline all take a FluxTransformer2DModel; PixArt's transformer and the UNets have none)
TP_TRANSFORMERS = {"NeuronFlux": "FluxTransformer2DModel"}
#: the variable the sharded transformer is assigned to
TP_NAME = "transformer"
#: loading options of the pipeline that apply to the transformer load as well
HUB = ("revision", "variant", "cache_dir", "token", "local_files_only", "force_download", "proxies")
#: loading options that a tensor-parallel load rejects (diffusers.hooks.tensor_parallel._check_tp_supported)
NO_TP = ("device_map", "low_cpu_mem_usage", "use_safetensors", "quantization_config", "use_flashpack")
CONTROLNET = "diffusers.ControlNetModel"
KNOBS = tuple(dict.fromkeys((*COMPILER_KNOBS, *FILE_NAMES, "export", "auto_cast_type", "output_attentions",
                             "output_hidden_states")))



def _short(code: str, width: int = 30) -> str:
    """Code as a marker names it: one line, at most ``width`` characters."""
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


class DiffusionPipelinesOnNeuron(PythonRule):
    id = "NM104"
    title = "Neuron*Pipeline (diffusion) -> diffusers pipeline .to('neuron'), shapes at call time, LoRA loaded and fused"
    fix = "mixed"
    triggers = tuple(CLASS_NAMES)
    owns = tuple(SOURCES)
    why = """
        optimum-neuron compiled the text encoder, denoiser and VAE of a diffusion pipeline for static
        shapes (`export=True, batch_size, height, width, num_images_per_prompt`), with the compiler
        casting matmuls to bf16, LoRA adapters fused at compile time and several NeuronCores used for
        data parallelism. Under TorchNeuron the diffusers pipeline itself runs on the `neuron`
        device: it is loaded with `dtype` and moved with `.to("neuron")`, the shapes are passed
        to the pipeline call (keep them fixed so that one graph is compiled), and LoRA adapters are
        loaded with `load_lora_weights`, fused with `fuse_lora` and their PEFT layers unloaded with
        `unload_lora_weights` (the fused weights stay; a saved pipeline then loads back as the old
        export did).
    """
    before = """
        from optimum.neuron import NeuronStableDiffusionPipeline

        pipe = NeuronStableDiffusionPipeline.from_pretrained(
            "stable-diffusion-v1-5/stable-diffusion-v1-5", export=True, batch_size=1, height=512, width=512,
            auto_cast="matmul", auto_cast_type="bf16",
        )
        image = pipe("a photo of an astronaut riding a horse on mars").images[0]
    """
    after = """
        import torch
        from diffusers import StableDiffusionPipeline

        pipe = StableDiffusionPipeline.from_pretrained(
            "stable-diffusion-v1-5/stable-diffusion-v1-5", dtype=torch.bfloat16
        ).to("neuron")
        pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)
        image = pipe("a photo of an astronaut riding a horse on mars", height=512, width=512).images[0]
    """
    caveats = """
        The shapes are added to calls of the pipeline's name in the same function (or module), or of
        `self.pipe` in any method of the class that loads it (literal shapes only there); elsewhere a
        marker lists them. A load without `export=True` reads compiled artifacts diffusers cannot load: a
        marker (a true one in a cache branch whose other branch exports and saves to that directory).
        A compile-and-save script (`pipe = X.from_pretrained(..., export=True)` whose name is only saved or
        pushed) is obsolete: it is left as it is with a marker naming what its consumer loads instead
        (codemods/common/export_only.py); one kept on `self.pipe` keeps the load and the save, without
        `.to("neuron")` and compile, and a marker says what the serving script does now. When the
        precision is not given by a literal (`auto_cast_type`, `dtype`), a marker says that the compiled
        pipeline ran its matmuls in bf16 and the load now runs in float32. `batch_size` is the number of prompts per call (a marker when
        it is not 1). `auto_cast_type` becomes `dtype` (the keyword Diffusers 0.42 documents; `torch_dtype` is
        its older alias; the whole pipeline runs in it) unless `dtype`/`torch_dtype` is given or `auto_cast="none"`. LoRA and IP-Adapter statements are inserted
        only after a load assigned to a plain name; the denoiser is then compiled with
        `pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)`
        (`pipe.transformer` for Flux; `pipe.transformer.compile(...)` for PixArt, whose transformer
        declares no repeated blocks) after the adapters are fused. `controlnet_ids` (a string or a
        list of strings) becomes `controlnet=ControlNetModel.from_pretrained(id, dtype=<the
        pipeline's>)` (a list for several). Left to a person with a marker:
        `data_parallel_mode`/`device_ids` (one process per NeuronCore), `controlnet_ids` held in a
        variable, `unet_id`, non-literal LoRA lists, `**kwargs` variables and loads of a pre-exported
        (compiled) pipeline. `tensor_parallel_size=N` of a Flux pipeline (`DiffusionPipeline.from_pretrained`
        takes no `parallel_config`) becomes `dist.init_process_group(backend="neuron")` (unless the
        module calls `init_process_group` itself) and `transformer = FluxTransformer2DModel.from_pretrained(
        model_id, subfolder="transformer", dtype=..., parallel_config=TensorParallelConfig(tp_degree=N))`
        before the load, which gets `transformer=transformer`, plus a marker: launch with torchrun
        --nproc_per_node=N, the same generator on every rank, images saved on rank 0 only. Only for an
        `export=True` load assigned to a name on its own line, whose model id is a name or a string and
        whose scope does not use the name `transformer`; else (and for pipelines whose denoiser has no
        `_tp_plan`) a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained":
            qual = ctx.class_qualname(func.value)
            if qual in SOURCES:
                self._load(node, SOURCES[qual], ctx)
                return
        if isinstance(func, (cst.Name, cst.Attribute, cst.Subscript)) and _target_key(func) is not None:
            info = _scope(ctx)
            if id(node) in info["calls"]:
                self._pipe_call(node, info["calls"][id(node)], ctx)

    # ------------------------------------------------------------------ the load
    def _load(self, node: cst.Call, class_name: str, ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        if mark_export_only(ctx, node):
            return  # compile-and-save: obsolete, not a native load and re-save
        code = ctx.module.code_for_node
        quote = quote_style(node)
        args = expand_literal_kwargs(node.args, literal_dicts(ctx))
        kw = {a.keyword.value: a for a in args if a.keyword is not None}
        star = [a for a in args if a.star == "**"]
        markers: list[str] = []
        applied: list[str] = []
        export = kw.get("export")
        export_value = literal(export.value) if export is not None else None
        shapes = {k: kw[k].value for k in SHAPES if k in kw}
        name = _assigned_name(ctx, node)  # a name or `self.attr`
        plain = name if name is not None and name.isidentifier() else None
        info = _scope(ctx)
        called = name is not None and name in info["called"]
        # a compile-and-save script: the pipeline is exported and saved, never called
        saved_only = (export_value is True and name is not None and not called and name in info["saved"]
                      and name not in info["used"] and name not in OUTSIDE_NAMES.get())  # (nor a later block of a page)

        for a in star:
            markers.append((f"Pass the shapes in **{_short(code(a.value))} to the pipeline call; drop export and compiler options.",
                            "the arguments in **kwargs are not seen: drop export and the compiler options, pass the "
                            "shapes (height, width, num_images_per_prompt) to the pipeline call"))
        if export is not None and export_value not in (True, False):
            markers.append((f"Point this load at the original checkpoint where export={_short(code(export.value))} is false.",
                            "when export is false this loads a pre-exported Neuron pipeline (compiled NEFFs), which "
                            "diffusers cannot load"))
        elif export_value is not True and not _saved_on_page(ctx, node):
            saver = _saved_by_sibling_branch(ctx, node)
            if saver is not None:
                markers.append((
                    "Delete directories the old Neuron export filled: the branch above now saves a plain checkpoint here.",
                    f"this branch loads the directory the branch above saves with {saver}: after the migration that is "
                    "a plain diffusers checkpoint, which this load reads; directories compiled by the Neuron export "
                    "before hold NEFFs diffusers cannot load"))
            else:
                markers.append((
                    "Point this load at the original checkpoint: diffusers cannot load a pre-exported Neuron pipeline.",
                    "this loads a pre-exported Neuron pipeline (compiled NEFFs): model_index.json / the \"neuron\" "
                    "entries of the component configs name the original checkpoint; pass the compiled "
                    "height/width/num_images_per_prompt to the pipeline call"))

        # ---- dtype
        dtype_expr: cst.BaseExpression | None = None
        has_dtype = any(k in kw for k in ("torch_dtype", "dtype"))
        acast = kw.get("auto_cast_type")
        auto_cast = kw.get("auto_cast")
        casting = auto_cast is None or literal(auto_cast.value) not in ("none", None)
        if acast is not None and casting and not has_dtype:
            value = literal(acast.value)
            if isinstance(value, str) and value in DTYPES and DTYPES[value] != "float32":
                dtype_expr = torch_dtype(ctx, DTYPES[value], quote, ctx.imports.binding_of(node.func))
                applied.append(f"auto_cast_type={code(acast.value)} becomes dtype=torch.{DTYPES[value]}")
            elif not (isinstance(value, str) and value in DTYPES):
                markers.append(f"Pass dtype=torch.bfloat16 where auto_cast_type={_short(code(acast.value))} is 'bf16'.")

        if export_value is not True and not has_dtype and dtype_expr is None:
            markers.append(("Pass dtype=torch.bfloat16: a pipeline saved in bf16 fails to run in float32, and the compiled one ran bf16 matmuls.",
                            "the compiled pipeline computed its matmuls in bf16 unless it was exported with "
                            "auto_cast=None or auto_cast_type=\"fp32\"; a pipeline saved in bf16 needs the dtype too "
                            "(mat1 and mat2 must have the same dtype)"))
        elif export_value is True and not has_dtype and dtype_expr is None and auto_cast is None and acast is None:
            markers.append(("Pass dtype=torch.bfloat16 to keep the Neuron export's bf16 matmuls: this load is float32.",
                            "the Neuron export compiled this pipeline with matmuls cast to bf16 (its default "
                            "auto_cast=\"matmul\", auto_cast_type=\"bf16\")"))

        # ---- parallelism
        for k in PARALLEL:
            if k in kw:
                markers.append((
                    f"Load one pipeline per NeuronCore to use the cores of {k}: diffusers runs a pipeline on one.",
                    f"{k}={code(kw[k].value)} was dropped: the Neuron pipeline split each request's batch (the "
                    "conditional and unconditional halves of classifier-free guidance) across these NeuronCores; to "
                    "use more cores, load one pipeline per core (.to(\"neuron:1\"), ...) or serve one process per core "
                    "(a server's worker/replica count, or torchrun with each rank on f\"neuron:{LOCAL_RANK}\"); "
                    "tensor parallelism of the denoiser goes through parallel_config=TensorParallelConfig(...) where "
                    "diffusers supports it"))
        tp = kw.get("tensor_parallel_size")
        sharded: list[cst.SimpleStatementLine] = []  # the process group and the sharded transformer load
        if tp is not None and literal(tp.value) != 1:
            why = self._tensor_parallel(node, class_name, args, kw, plain, dtype_expr, ctx, quote, sharded)
            nproc = code(tp.value)
            if why is None:
                transformer = TP_TRANSFORMERS[_family(class_name)]
                applied.append(f"tensor_parallel_size={nproc} becomes transformer={transformer}.from_pretrained(..., "
                               f"parallel_config=TensorParallelConfig(tp_degree={nproc})), loaded before the pipeline")
                markers.append((
                    f"Launch with torchrun --nproc_per_node={_short(nproc, 12)}, one generator seed on every rank, images "
                    "saved on rank 0.",
                    f"the transformer is sharded over {nproc} NeuronCores: pass the same generator on every rank "
                    "(generator=torch.Generator(\"cpu\").manual_seed(0)) and save the images on rank 0 only "
                    "(torch.distributed.get_rank() == 0)"))
                if len(sharded) != 2:
                    markers.append("Initialize the process group (init_process_group(backend=\"neuron\")) before the "
                                   "transformer load.")
            else:
                markers.append((fitted(f"Shard the denoiser by hand: {why}.", "Shard the denoiser by hand under torchrun: "
                                       "tensor_parallel_size was dropped."),
                                f"tensor_parallel_size={nproc} was dropped: {why}"))
        controlnet: cst.BaseExpression | None = None
        if "controlnet_ids" in kw:
            controlnet = self._controlnet(kw["controlnet_ids"].value, kw, ctx, quote)
            if controlnet is None or "controlnet" in kw:
                advice = "load it with ControlNetModel.from_pretrained(...) and pass it as controlnet="
                markers.append(fitted(f"controlnet_ids={code(kw['controlnet_ids'].value)} was dropped: {advice}",
                                      f"controlnet_ids was dropped: {advice}"))
                controlnet = None
            else:
                applied.append(f"controlnet_ids={code(kw['controlnet_ids'].value)} becomes "
                               "controlnet=ControlNetModel.from_pretrained(...)")
        if "unet_id" in kw:
            advice = "load it with UNet2DConditionModel.from_pretrained(...) and pass it as unet="
            markers.append(fitted(f"unet_id={code(kw['unet_id'].value)} was dropped: {advice}",
                                  f"unet_id was dropped: {advice}"))

        # ---- shapes
        call_shapes = {k: v for k, v in shapes.items() if k in _call_shapes(class_name) and not _default(k, v)}
        size = [k for k in ("height", "width") if k in shapes and k not in _call_shapes(class_name)]
        if size:
            listed = ", ".join(f"{k}={code(shapes[k])}" for k in size)
            markers.append((f"Resize the input images to {_short(listed, 40)}: this pipeline's output follows its input size.",
                            "the static shapes were dropped; one input size keeps one compiled shape"))
        if call_shapes and not saved_only:
            listed = ", ".join(f"{k}={code(v)}" for k, v in call_shapes.items())
            if not called:  # a call of it reports (or marks) the shapes it is given where that edit lands
                markers.append((fitted(f"Pass {listed} to every call of this pipeline: fixed shapes avoid recompiles.",
                                       f"Pass {', '.join(call_shapes)} of the export to every call of this pipeline."),
                                f"pass {listed} to every call of this pipeline (fixed shapes avoid recompiles)"))
        batch = shapes.get("batch_size")
        if batch is not None:
            if literal(batch) == 1:
                applied.append("batch_size=1 dropped")
            else:
                markers.append(fitted(f"batch_size={code(batch)} was dropped: call the pipeline with {code(batch)} "
                                      "prompts at a time to keep one compiled shape",
                                      "batch_size was dropped: call the pipeline with that many prompts at a time to "
                                      "keep one compiled shape"))
        other = [k for k in shapes if k not in CALL_SHAPES and k != "batch_size"]  # vae/encoder shapes
        other += [k for k in CALL_SHAPES if k in shapes and _default(k, shapes[k])]
        if other:
            applied.append(f"static shapes dropped: {', '.join(other)}")
        knobs = [k for k in kw if k in KNOBS and k not in ("export", "auto_cast_type")]
        if knobs:
            applied.append(f"compiler options dropped: {', '.join(knobs)}")

        # ---- LoRA and IP-Adapter statements
        follow: list[tuple[str, list[cst.Arg]]] = []
        lora = {k: kw[k].value for k in LORA if k in kw}
        if lora:
            steps = _lora_steps(lora, quote)
            if steps is None:
                listed = ", ".join(f"{k}={code(v)}" for k, v in lora.items())
                markers.append(f"{listed} were dropped: load the adapters with pipe.load_lora_weights(model_id, "
                               "weight_name=..., adapter_name=...), then pipe.set_adapters([...], adapter_weights=[...]) "
                               "and pipe.fuse_lora()")
            else:
                follow.extend(steps)
        ip = {k: kw[k].value for k in IP_ADAPTER if k in kw}
        if ip:
            if "ip_adapter_id" in ip:
                load_args = [cst.Arg(ip["ip_adapter_id"])]
                for k in ("ip_adapter_subfolder", "ip_adapter_weight_name"):
                    load_args.append(cst.Arg(keyword=cst.Name(k[len("ip_adapter_"):]),
                                             value=ip.get(k, cst.Name("None")), equal=EQ))
                follow.append(("load_ip_adapter", load_args))
                if "ip_adapter_scale" in ip:
                    follow.append(("set_ip_adapter_scale", [cst.Arg(ip["ip_adapter_scale"])]))
            else:
                markers.append("ip_adapter_* arguments were dropped: load the adapter with pipe.load_ip_adapter(...)")
        if saved_only:
            shape_text = ", ".join(f"{k}={code(v)}" for k, v in call_shapes.items())
            markers.append((fitted(
                f"This saves a plain checkpoint now: serve it with from_pretrained(...).to(\"neuron\"), called with "
                f"{shape_text}.",
                "This saves a plain checkpoint now: serve it with from_pretrained(...).to(\"neuron\") and fixed shapes.")
                if shape_text else
                "This saves a plain checkpoint now: serve it with from_pretrained(...).to(\"neuron\") and fixed shapes.",
                "this script compiled the pipeline ahead of time and saved it; on TorchNeuron compilation is lazy "
                "(at the first call of the loaded pipeline), so it now saves a plain diffusers checkpoint"
                + (f" in {code(dtype_expr)}" if dtype_expr is not None else "")
                + f": the serving script loads it{_or_original(_model_id(args, kw), code)} with "
                f"from_pretrained(...).to(\"neuron\"), compiles the denoiser there"
                + (f" and calls the pipeline with {shape_text}" if shape_text else "")))
        if follow and name is None:
            markers.append("the LoRA/IP-Adapter arguments were dropped: load them on the pipeline with "
                           + ", ".join(f"pipe.{m}(...)" for m, _ in follow))
            follow = []
        elif follow and not _has_line(ctx):
            follow = []
        adapters = len(follow)
        denoiser, how = next(v for p, v in COMPILE if class_name.startswith(p))
        if name is not None and _has_line(ctx) and not saved_only:  # after the adapters are fused
            follow.append((f"{denoiser}.{how}", [
                cst.Arg(keyword=cst.Name("backend"), value=cst.SimpleString(f"{quote}neuron{quote}"), equal=EQ),
                cst.Arg(keyword=cst.Name("fullgraph"), value=cst.Name("True"), equal=EQ),
                cst.Arg(keyword=cst.Name("dynamic"), value=cst.Name("False"), equal=EQ),
            ]))

        drop = set(KNOBS) | set(SHAPES) | set(LORA) | set(IP_ADAPTER) | set(PARALLEL) | {
            "tensor_parallel_size", "controlnet_ids", "unet_id"}
        indent = indent_of(ctx)
        neuron = cst.SimpleString(f"{quote}neuron{quote}")
        moved = _already_moved(ctx, node) or saved_only

        dicts = literal_dicts(ctx)  # computed now: the rewrite runs after the pass
        def rewrite(updated: cst.Call) -> cst.BaseExpression:
            new_args = [a for a in expand_literal_kwargs(updated.args, dicts)
                        if not (a.keyword is not None and a.keyword.value in drop)]
            at = next((i for i, a in enumerate(new_args) if a.star == "**"), len(new_args))
            if dtype_expr is not None:
                new_args.insert(at, cst.Arg(keyword=cst.Name("dtype"), value=dtype_expr, equal=EQ))
                at += 1
            if controlnet is not None:
                new_args.insert(at, cst.Arg(keyword=cst.Name("controlnet"), value=controlnet, equal=EQ))
            if sharded:  # after the model id, as in the diffusers examples
                first = next((i for i, a in enumerate(new_args) if a.keyword is not None or a.star), len(new_args))
                new_args.insert(first, cst.Arg(keyword=cst.Name(TP_NAME), value=cst.Name(TP_NAME), equal=EQ))
            if moved:  # moved by the script itself (or a saved-only pipeline: stays on the CPU)
                return layout(updated, new_args, ctx.module, indent, prefix_len(ctx, node))
            prefix, rest = line_context(ctx, node)
            call = hug_layout(updated, new_args, ctx.module, indent, prefix, rest + len('.to("neuron")'))
            return cst.Call(func=cst.Attribute(value=call, attr=cst.Name("to")), args=[cst.Arg(neuron)])

        ctx.replace(node, rewrite)
        for dead in drop_expanded_dicts(ctx, node, dicts):
            applied.append(f"{dead} removed: its items are arguments of the call now")
        if follow or sharded:
            line = next(n for n in reversed(ctx.stack) if isinstance(n, cst.SimpleStatementLine))

            def method_of(path: str) -> cst.BaseExpression:
                func: cst.BaseExpression = cst.parse_expression(name)  # type: ignore[arg-type]
                for part in path.split("."):
                    func = cst.Attribute(value=func, attr=cst.Name(part))
                return func

            def statements(updated: cst.SimpleStatementLine) -> cst.FlattenSentinel:
                after = [
                    cst.SimpleStatementLine(body=[cst.Expr(cst.Call(
                        func=method_of(method),
                        args=[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(margs) - 1 else
                              a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                              for i, a in enumerate(margs)],
                    ))])
                    for method, margs in follow
                ]
                before = list(sharded)
                if before:  # the comments and blank lines above the load move above what precedes it
                    before[0] = before[0].with_changes(leading_lines=updated.leading_lines)
                    updated = updated.with_changes(leading_lines=())
                return cst.FlattenSentinel([*before, updated, *after])

            ctx.replace(line, statements)
            if adapters:
                applied.append("LoRA/IP-Adapter arguments become "
                               + ", ".join(f"{name}.{m}()" for m, _ in follow[:adapters]))
        if follow:
            applied.append(f"{name}.{denoiser}.{how}(backend=\"neuron\", fullgraph=True, dynamic=False): the denoiser "
                           "is compiled once for the fixed shapes (what optimum-neuron's export did ahead of time)")
        ctx.finding(node, f"{class_name}.from_pretrained" + ("(export=True)" if export_value is True else "")
                    + " -> diffusers from_pretrained(...)" + ("" if moved else ".to(\"neuron\")"))
        for message in applied:
            ctx.finding(node, message)
        for message in markers:  # a message, or (message, its long form)
            text, detail = message if isinstance(message, tuple) else (message, None)
            ctx.marker(node, text, detail=detail)

    # ------------------------------------------------------------------ tensor parallelism
    @staticmethod
    def _tensor_parallel(node: cst.Call, class_name: str, args: list[cst.Arg], kw: dict, name: str | None,
                         dtype_expr: cst.BaseExpression | None, ctx: PythonContext, quote: str,
                         out: list[cst.SimpleStatementLine]) -> str | None:
        """Fill ``out`` with ``init_process_group(backend="neuron")`` (unless the module already calls
        it) and ``transformer = <Transformer>.from_pretrained(model_id, subfolder="transformer",
        dtype=..., parallel_config=TensorParallelConfig(tp_degree=N))``, the statements that go
        before the pipeline load; else return why the load is left to a person."""
        code = ctx.module.code_for_node
        tp = kw["tensor_parallel_size"].value
        transformer = TP_TRANSFORMERS.get(_family(class_name))
        if transformer is None:
            return "diffusers has no tensor-parallel plan for this denoiser, it runs on one NeuronCore"
        hint = (f"under torchrun --nproc_per_node={code(tp)}, load `{TP_NAME} = {transformer}.from_pretrained("
                f"model_id, subfolder=\"transformer\", dtype=..., parallel_config=TensorParallelConfig("
                f"tp_degree={code(tp)}))` (from diffusers) after dist.init_process_group(backend=\"neuron\"), "
                f"before the pipeline, and pass it as {TP_NAME}=; seed the generator identically on every rank and "
                "save the images on rank 0 only")
        stack = ctx.stack
        line = next((n for n in reversed(stack) if isinstance(n, cst.SimpleStatementLine)), None)
        if name is None or line is None or len(line.body) != 1 or line.body[0] is not stack[stack.index(line) + 1]:
            return hint
        if kw.get("export") is None or literal(kw["export"].value) is not True:
            return hint  # a pre-exported pipeline: the model id is to be changed first
        if any(a.star for a in args):
            return hint
        positional = [a.value for a in args if a.keyword is None]
        model_id = positional[0] if len(positional) == 1 else None
        if not positional:
            model_id = kw["pretrained_model_name_or_path"].value if "pretrained_model_name_or_path" in kw else None
        if not isinstance(model_id, (cst.Name, cst.SimpleString)):
            return hint  # evaluated once for the transformer and once for the pipeline
        names = _scope(ctx)["names"]
        if TP_NAME in kw or TP_NAME in names or any(k in kw for k in NO_TP):
            return hint
        dtype = dtype_expr or next((kw[k].value for k in ("torch_dtype", "dtype") if k in kw), None)
        repeatable = (cst.Name, cst.Attribute, cst.SimpleString, cst.Integer)
        if dtype is not None and not isinstance(dtype, repeatable):
            return hint
        hub = [(k, kw[k].value) for k in HUB if k in kw]
        if any(not isinstance(v, repeatable) for _, v in hub):
            return hint
        anchor = ctx.imports.binding_of(node.func)
        try:
            cls = ctx.name_for(f"diffusers.{transformer}", anchor=anchor)
            config = ctx.name_for("diffusers.TensorParallelConfig", anchor=anchor)
            init = None
            state = ctx.local_state()
            if "process_group" not in state:  # once per unit: does the script set up torch.distributed itself?
                state["process_group"] = "init_process_group" in ctx.source
            if not state["process_group"]:
                dist = ctx.imports.local_for("torch.distributed")
                if dist is None and ctx.imports.is_free("dist", "torch.distributed") and "dist" not in names:
                    ctx.add_import("torch.distributed", None, "dist", anchor)  # the usual spelling
                    dist = "dist"
                init = (build_dotted(f"{dist}.init_process_group") if dist is not None else
                        ctx.name_for("torch.distributed.init_process_group", anchor=anchor, style="module"))
        except NameClash:
            return hint

        def kwarg(key: str, value: cst.BaseExpression) -> cst.Arg:
            return cst.Arg(keyword=cst.Name(key), value=value, equal=EQ)

        load_args = [cst.Arg(model_id.deep_clone()),
                     kwarg("subfolder", cst.SimpleString(f"{quote}{TP_NAME}{quote}"))]
        if dtype is not None:
            load_args.append(kwarg("dtype", dtype.deep_clone()))
        load_args.extend(kwarg(k, v.deep_clone()) for k, v in hub)
        load_args.append(kwarg("parallel_config", cst.Call(func=config, args=[kwarg("tp_degree", tp.deep_clone())])))
        load = cst.Call(func=cst.Attribute(value=cls, attr=cst.Name("from_pretrained")), args=load_args,
                        whitespace_before_args=cst.ParenthesizedWhitespace(indent=True))  # spread when too long
        load = hug_layout(load, load_args, ctx.module, indent_of(ctx), len(f"{TP_NAME} = "), 0)
        if init is not None:
            out.append(cst.SimpleStatementLine(body=[cst.Expr(cst.Call(
                func=init, args=[kwarg("backend", cst.SimpleString(f"{quote}neuron{quote}"))]))]))
        out.append(cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(TP_NAME))],
                                                             value=load)]))
        return None

    @staticmethod
    def _controlnet(value: cst.BaseExpression, kw: dict, ctx: PythonContext,
                    quote: str) -> cst.BaseExpression | None:
        """``ControlNetModel.from_pretrained(id[, dtype=...])`` (a list of them for a list of ids)."""
        if isinstance(value, (cst.List, cst.Tuple)):
            if not value.elements or any(not isinstance(e, cst.Element) for e in value.elements):
                return None
            ids = [e.value for e in value.elements]
        elif isinstance(value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            ids = [value]
        else:
            return None  # a variable may hold one id or a list of them
        try:
            cls = ctx.name_for(CONTROLNET, anchor=ctx.imports.binding_of(ctx.stack[-1].func))  # type: ignore[attr-defined]
        except NameClash:
            return None
        dtype = next((kw[k].value for k in ("torch_dtype", "dtype") if k in kw), None)
        if dtype is not None and not isinstance(dtype, (cst.Attribute, cst.Name, cst.SimpleString)):
            dtype = None  # not an expression that can be repeated

        def load(mid: cst.BaseExpression) -> cst.Call:
            args = [cst.Arg(mid.deep_clone())]
            if dtype is not None:
                args[0] = args[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                args.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype.deep_clone(), equal=EQ))
            return cst.Call(func=cst.Attribute(value=cls.deep_clone(), attr=cst.Name("from_pretrained")), args=args)

        if len(ids) == 1 and not isinstance(value, (cst.List, cst.Tuple)):
            return load(ids[0])
        # one model per line, one level deeper than the argument (the call is spread by layout)
        step = ctx.module.default_indent

        def newline(depth: int) -> cst.ParenthesizedWhitespace:
            return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True,
                                               last_line=cst.SimpleWhitespace(step * depth))

        return cst.List(
            [cst.Element(load(m), comma=cst.Comma(whitespace_after=newline(2 if i < len(ids) - 1 else 1)))
             for i, m in enumerate(ids)],
            lbracket=cst.LeftSquareBracket(whitespace_after=newline(2)),
        )

    # ------------------------------------------------------------------ the pipeline call
    def _pipe_call(self, node: cst.Call, loads: list[cst.Call], ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        have = {a.keyword.value for a in node.args if a.keyword is not None}
        if any(a.star == "**" for a in node.args):
            return
        # the shapes the loads of this pipeline compiled it for (a cache branch that loads the compiled
        # directory has none of its own; loads that disagree: nothing is added)
        found: dict[str, cst.BaseExpression | None] = {}
        for load in loads:
            class_name = SOURCES.get(ctx.class_qualname(load.func.value) or "", "")  # type: ignore[attr-defined]
            home = _scope(ctx)["where"].get(id(load))
            dicts = literal_dicts(ctx, home)  # those of the function that loads it
            kw = {a.keyword.value: a for a in expand_literal_kwargs(load.args, dicts) if a.keyword is not None}
            # in another method than the load, a name of the load's function is not defined: literals only
            elsewhere = home is not None and home not in ctx.stack
            for k in _call_shapes(class_name):
                if k not in kw or k in have or _default(k, kw[k].value):
                    continue
                value = kw[k].value
                ok = _copyable(value) and not (elsewhere and not isinstance(value, cst.Integer))
                if k in found and (found[k] is None or not ok or not found[k].deep_equals(value)):
                    found[k] = None
                else:
                    found[k] = value if ok else None
        add = [(k, v) for k, v in found.items() if v is not None]
        declined = [k for k, v in found.items() if v is None]
        if declined and not add:
            ctx.marker(node, f"Pass {', '.join(f'{k}=' for k in declined)} of the compiled pipeline to this call to keep "
                             "one compiled shape.",
                       detail="the Neuron pipeline was compiled for static shapes that this call cannot be given "
                              "automatically (not a literal, or the loads disagree); a call with other shapes compiles again")
        if not add:
            return
        indent = indent_of(ctx)
        prefix, rest = line_context(ctx, node)

        def rewrite(updated: cst.Call) -> cst.Call:
            new_args = list(updated.args) + [
                cst.Arg(keyword=cst.Name(k), value=v.deep_clone(), equal=EQ) for k, v in add
            ]
            return hug_layout(updated, new_args, ctx.module, indent, prefix, rest)

        ctx.replace(node, rewrite)
        ctx.finding(node, "static shapes of the compiled pipeline passed to the call: "
                    + ", ".join(f"{k}={ctx.module.code_for_node(v)}" for k, v in add))


def _lora_steps(lora: dict[str, cst.BaseExpression], quote: str) -> list[tuple[str, list[cst.Arg]]] | None:
    """load_lora_weights(...) per adapter, then set_adapters + fuse_lora + unload_lora_weights (None: not literal
    enough). The unload keeps the fused weights and drops the PEFT layers around them: without it save_pretrained
    writes `base_layer`/`lora_A` keys that the saved pipeline does not load back."""

    def items(value: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
        if value is None:
            return None
        if isinstance(value, (cst.List, cst.Tuple)):
            if any(not isinstance(e, cst.Element) for e in value.elements):
                return None
            return [e.value for e in value.elements]
        return [value]

    ids = items(lora.get("lora_model_ids"))
    if not ids:
        return None
    value = lora["lora_model_ids"]
    if not isinstance(value, (cst.List, cst.Tuple)) and not any(
        isinstance(v, (cst.SimpleString, cst.ConcatenatedString, cst.Float, cst.Integer)) for v in lora.values()
    ):
        return None  # a variable that may hold one id or a list of them
    weights = items(lora.get("lora_weight_names"))
    names = items(lora.get("lora_adapter_names"))
    scales = items(lora.get("lora_scales"))
    for seq in (weights, names, scales):
        if seq is not None and len(seq) != len(ids):
            return None
    steps: list[tuple[str, list[cst.Arg]]] = []
    for i, mid in enumerate(ids):
        margs = [cst.Arg(mid)]
        if weights is not None:
            margs.append(cst.Arg(keyword=cst.Name("weight_name"), value=weights[i], equal=EQ))
        if names is not None:
            margs.append(cst.Arg(keyword=cst.Name("adapter_name"), value=names[i], equal=EQ))
        steps.append(("load_lora_weights", margs))
    if len(ids) == 1:
        fuse = [cst.Arg(keyword=cst.Name("lora_scale"), value=scales[0], equal=EQ)] if scales else []
        steps.append(("fuse_lora", fuse))
        steps.append(("unload_lora_weights", []))  # the fused weights stay; save_pretrained writes plain keys
        return steps
    if names is None:
        return None  # several adapters need names to be weighted
    set_args = [cst.Arg(cst.List([cst.Element(n) for n in names]))]
    if scales is not None:
        set_args.append(cst.Arg(keyword=cst.Name("adapter_weights"), value=cst.List([cst.Element(s) for s in scales]),
                                equal=EQ))
    steps.append(("set_adapters", set_args))
    steps.append(("fuse_lora", []))
    steps.append(("unload_lora_weights", []))
    return steps


# ---------------------------------------------------------------------- scope analysis
def _self_attribute(expr: cst.BaseExpression) -> bool:
    """``self.attr``: a pipeline kept on the instance of a serving class."""
    return (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self")


def _target_key(expr: cst.BaseExpression) -> str | None:
    """The key of a place a pipeline can be kept in: a name, ``self.attr``, or any attribute/subscript
    chain over a name with plain keys (``pipes["sd"]``, ``app.state.pipe``), written as code: evaluating
    it again (for the compile statement, for the calls) reads the same place."""
    if isinstance(expr, cst.Name):
        return expr.value
    node = expr
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        if isinstance(node, cst.Subscript):
            if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index) or not isinstance(
                    node.slice[0].slice.value, (cst.Name, cst.SimpleString, cst.Integer)):
                return None
        node = node.value
    if not isinstance(node, cst.Name) or node is expr:
        return None
    return _EMPTY.code_for_node(expr)


_EMPTY = cst.Module(body=[])


def _scope(ctx: PythonContext) -> dict:
    """Pipelines assigned to a name in the innermost function (or module), or to ``self.attr`` anywhere in
    the class around it; the calls of them, which are saved (``.save_pretrained``) and which are used
    otherwise."""
    scope: cst.CSTNode = ctx.module
    cls: cst.ClassDef | None = None
    for i in range(len(ctx.stack) - 2, -1, -1):
        n = ctx.stack[i]
        if isinstance(n, (cst.FunctionDef, cst.Lambda)) and scope is ctx.module:
            scope = n
        elif isinstance(n, cst.ClassDef):
            cls = n
            break
    cache = ctx.local_state().setdefault("scopes", {})
    key = (id(scope), id(cls))
    if key in cache:
        return cache[key]
    loads: dict[str, list[cst.Call]] = {}
    where: dict[int, cst.CSTNode] = {}  # id(load) -> the function (or module) it is in
    calls: list[tuple[str, cst.Call]] = []
    saved: set[str] = set()
    used: set[str] = set()
    names: set[str] = set()  # every name used or bound in the scope (a new variable must not clash)

    def load_of(value: cst.BaseExpression) -> cst.Call | None:
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to"
                and isinstance(value.func.value, cst.Call)):
            value = value.func.value
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "from_pretrained" and ctx.class_qualname(value.func.value) in SOURCES):
            return value
        return None

    def walk(n: cst.CSTNode, attributes_only: bool, inside: cst.CSTNode) -> None:
        skip: set[int] = set()
        if isinstance(n, cst.Assign) and len(n.targets) == 1:
            k = _target_key(n.targets[0].target)
            load = load_of(n.value)
            if k is not None and load is not None and (_self_attribute(n.targets[0].target) or not attributes_only):
                loads.setdefault(k, []).append(load)  # a cache branch loads it twice
                where[id(load)] = inside
                skip.add(id(n.targets[0]))
        if isinstance(n, cst.Call):
            k = _target_key(n.func)
            if k is not None:
                calls.append((k, n))
                skip.add(id(n.func))
            f = n.func
            if isinstance(f, cst.Attribute) and f.attr.value == "save_pretrained":
                k = _target_key(f.value)
                if k is not None:
                    saved.add(k)
                    skip.add(id(f))
        k = _target_key(n) if isinstance(n, (cst.Name, cst.Attribute, cst.Subscript)) else None
        if k is not None:
            used.add(k)
        if isinstance(n, cst.Name) and not attributes_only:
            names.add(n.value)
        for child in n.children:
            if id(child) in skip:
                continue
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                if not isinstance(child, cst.Lambda) and not attributes_only:
                    names.add(child.name.value)
                if not (attributes_only and isinstance(child, cst.FunctionDef)):
                    continue
            walk(child, attributes_only, inside)

    walk(scope.body if isinstance(scope, (cst.FunctionDef, cst.Lambda)) else scope, False, scope)
    if cls is not None:  # `self.pipe` loaded in __init__ and called in another method
        for method in cls.body.body:
            if isinstance(method, cst.FunctionDef) and method is not scope:
                walk(method.body, True, method)
    found = {"calls": {}, "called": set(), "names": names, "saved": saved, "where": where,
             "used": {k for k in used if k in loads}}
    for k, call in calls:
        if k in loads and not any(a.star == "**" for a in call.args):
            found["calls"][id(call)] = loads[k]
            found["called"].add(k)
    cache[key] = found
    return found


def _saved_on_page(ctx: PythonContext, load: cst.Call) -> bool:
    """Whether the unit saves a pipeline with ``save_pretrained`` to the directory this load reads, above the load
    (in a notebook or on a page: above it in the whole text), neither of them in an ``if``: the migrated export there
    writes a plain diffusers checkpoint, which the load reads (a sibling branch that saves is
    :func:`_saved_by_sibling_branch`'s)."""
    if not load.args or load.args[0].keyword is not None:
        return False
    path = ctx.module.code_for_node(load.args[0].value)
    if any(isinstance(n, cst.If) for n in ctx.stack):
        return False  # a cache check: which branch runs is the sibling-branch marker's business
    text = ctx.whole_text
    at = text.find(ctx.module.code_for_node(load))
    save = re.compile(r"^[ \t]*[\w.]+\.save_pretrained\(\s*" + re.escape(path) + r"\s*[,)]", re.MULTILINE)
    return at >= 0 and any(m.start() < at for m in save.finditer(text))


def _saved_by_sibling_branch(ctx: PythonContext, load: cst.Call) -> str | None:
    """For a load in one branch of an ``if`` (a cache check: ``if exists(dir): load(dir) else: export and
    save(dir)``), the ``x.save_pretrained(dir)`` of another branch that saves to the directory it loads."""
    if not load.args or load.args[0].keyword is not None:
        return None
    path = ctx.module.code_for_node(load.args[0].value)
    for i in range(len(ctx.stack) - 2, -1, -1):
        node = ctx.stack[i]
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return None
        if not isinstance(node, cst.If):
            continue
        for branch in (node.body, node.orelse):
            if branch is None or branch in ctx.stack:
                continue
            found: list[str] = []

            class Find(cst.CSTVisitor):
                def visit_Call(self, call: cst.Call) -> None:
                    f = call.func
                    if (isinstance(f, cst.Attribute) and f.attr.value == "save_pretrained" and call.args
                            and ctx.module.code_for_node(call.args[0].value) == path):
                        found.append(ctx.module.code_for_node(call))

            branch.visit(Find())
            if found:
                return found[0]
    return None


def _or_original(model_id: cst.BaseExpression | None, code) -> str:
    return f" (or the original checkpoint, {code(model_id)})" if model_id is not None else ""


def _model_id(args: list[cst.Arg], kw: dict) -> cst.BaseExpression | None:
    positional = [a.value for a in args if a.keyword is None and not a.star]
    if positional:
        return positional[0]
    arg = kw.get("pretrained_model_name_or_path")
    return arg.value if arg is not None else None


def _family(class_name: str) -> str:
    return next(p for p, _ in COMPILE if class_name.startswith(p))


def _call_shapes(class_name: str) -> tuple[str, ...]:
    return ("num_images_per_prompt",) if class_name in NO_SIZE else CALL_SHAPES


def _default(key: str, value: cst.BaseExpression) -> bool:
    """num_images_per_prompt=1 is the pipeline call's default: nothing to pass."""
    return key == "num_images_per_prompt" and literal(value) == 1


def _copyable(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Name, cst.Attribute))


def _assigned_name(ctx: PythonContext, call: cst.Call) -> str | None:
    """Where a load is kept (``pipe = X.from_pretrained(...)`` or ``... .to(...)``): the name, or
    ``self.attr`` (a serving class)."""
    stack = ctx.stack
    i = len(stack) - 1
    value: cst.CSTNode = call
    parent = stack[i - 1] if i > 0 else None
    if isinstance(parent, cst.Attribute) and parent.value is call and parent.attr.value == "to" and i > 1:
        grand = stack[i - 2]
        if isinstance(grand, cst.Call) and grand.func is parent:
            value, parent = grand, stack[i - 3] if i > 2 else None
    if isinstance(parent, cst.Assign) and parent.value is value and len(parent.targets) == 1:
        return _target_key(parent.targets[0].target)
    return None


def _already_moved(ctx: PythonContext, call: cst.Call) -> bool:
    parent = ctx.parent
    return isinstance(parent, cst.Attribute) and parent.value is call and parent.attr.value == "to"


def _has_line(ctx: PythonContext) -> bool:
    return any(isinstance(n, cst.SimpleStatementLine) for n in ctx.stack)


RULES = (DiffusionPipelinesOnNeuron,)
