"""NM510, NM511, NM512, NM514, NM526, NM528: launch, Slurm and shell scripts.

Shell units are ``.sh``/``.slurm`` files, notebook ``!`` lines and ``%%bash`` cells, and bash fences
of Markdown documents. Every unit is lexed and parsed once (:mod:`codemods.project.shell_syntax`)
and the rules of this module edit the commands they understand, word by word, through a plan shared
by all of them (:mod:`codemods.project.shell_plans`; NM513 in :mod:`codemods.project.neuron_cc_flags`
and NM515/NM516/NM523 in :mod:`codemods.project.launch_flags` use it too).
"""

from __future__ import annotations

import re

from codemods.project.shell_plans import (
    _SHELLS,
    ShellPlan,
    ShellRule,
    ShellUnit,
    appends,
    assignments,
    command_name,
    comment_line,
    embedded_scripts,
    launched_source,
    literal_script,
    references,
    rewrite_script,
    word_value,
)
from codemods.project.dockerfile import (
    TARGET_PYTHON, VENV_PYTHON_MARKER, environment_python, xla_era_image, xla_era_server_image,
)
from codemods.project.serving import SERVER_SCRIPT_MARKER, SERVER_SCRIPT_WHY, neuron_sdk_server
from codemods.project.shell_syntax import NAME_RE, Simple
from codemods.common.venvs import VENV_MARKER, xla_era_venv
from codemods.project.xla_env import (
    BF16_VARS, ENV_MARKERS, MARKED_VARS, XLA_ONLY_PREFIXES, XLA_ONLY_VARS, switched_on, ignored_by_torchneuron,
    mark_bf16_launch, xla_only_reason)
from migrator.model import fitted, ignored_rules, is_silenced


# ------------------------------------------------------------------------------------------------
# NM510: optimum-cli


_EXPORT_BOOL = {
    "--disable_neuron_cache", "--trust-remote-code", "--inline-weights-neff", "--disable-weights-neff-inline",
    "--disable-validation", "--dynamic-batch-size", "--output_hidden_states", "--output_attentions",
    "-O1", "-O2", "-O3", "--O1", "--O2", "--O3",
}
_EXPORT_MULTI = {
    "--lora_model_ids", "--lora_weight_names", "--lora_adapter_names", "--lora_scales", "--controlnet_ids",
    "--ip_adapter_id", "--ip_adapter_subfolder", "--ip_adapter_weight_name", "--ip_adapter_scale",
}
_SHAPE_FLAGS = (
    "--batch_size", "--text_batch_size", "--image_batch_size", "--sequence_length", "--num_beams",
    "--num_choices", "--num_channels", "--width", "--height", "--image_size", "--patch_size",
    "--num_images_per_prompt", "--audio_sequence_length",
)
_TP_FLAGS = ("--tensor_parallel_size", "--num_cores")
_DTYPE_FLAGS = ("--auto_cast_type", "--torch_dtype", "--auto_cast")
_DTYPES = {"bf16": "torch.bfloat16", "bfloat16": "torch.bfloat16", "fp16": "torch.float16",
           "float16": "torch.float16", "fp32": "torch.float32", "float32": "torch.float32",
           "tf32": "torch.float32"}
_LOAD_FLAGS = {"--trust-remote-code": "trust_remote_code=True", "--subfolder": "subfolder=",
               "--cache_dir": "cache_dir=", "--output_hidden_states": "output_hidden_states=True",
               "--output_attentions": "output_attentions=True"}
_PIPE_FLAGS = ("--unet",) + tuple(sorted(_EXPORT_MULTI))
_PYTHON_RE = re.compile(r"python[0-9.]*\Z")


def _one_line(text: str) -> str:
    return " ".join(text.split())


#: what names a diffusion export: its task, a flag only the diffusers exporter takes, the model's name
_DIFFUSION_TASK_RE = re.compile(r"diffusion|text-to-image|image-to-image|inpaint|flux|pixart", re.I)
_DIFFUSION_FLAGS = frozenset({"--num_images_per_prompt", "--unet", *_EXPORT_MULTI})
_DIFFUSION_MODEL_RE = re.compile(r"diffusion|flux|sdxl|pixart|sd-turbo|sd_turbo|stable-cascade", re.I)


def _diffusion(model: str | None, task: str | None, flags: set[str]) -> bool:
    """Whether an `optimum-cli export neuron` command exports a diffusers pipeline (its tensor parallelism
    is diffusers' parallel_config=TensorParallelConfig(...), not Transformers' DistributedConfig)."""
    if task:
        return bool(_DIFFUSION_TASK_RE.search(task))
    return bool(flags & _DIFFUSION_FLAGS) or bool(model and _DIFFUSION_MODEL_RE.search(model))


def _export_args(args: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The flags (name, value) and the positional arguments (the output folder last) of an export's ARGS."""
    flags: list[tuple[str, str | None]] = []
    positional: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        if a.startswith("-") and len(a) > 1 and not a.lstrip("-")[:1].isdigit():
            if "=" in a:
                name, _, val = a.partition("=")
                flags.append((name, val))
            elif a in _EXPORT_BOOL:
                flags.append((a, None))
            elif a in _EXPORT_MULTI:
                vals = []
                while k + 1 < len(args) and not args[k + 1].startswith("-"):
                    k += 1
                    vals.append(args[k])
                flags.append((a, " ".join(vals)))
            elif k + 1 < len(args):
                k += 1
                flags.append((a, args[k]))
            else:
                flags.append((a, None))
        else:
            positional.append(a)
        k += 1
    return flags, positional


def export_comments(args: list[str], command: str = "optimum-cli export neuron") -> list[str]:
    """Where each flag of a removed `optimum-cli export neuron ARGS` command now lives."""
    flags, positional = _export_args(args)
    get = {("--model" if n == "-m" else n): v for n, v in flags}
    out = [f"removed `{command}`: TorchNeuron compiles the model on first use, there is no export step."]
    model, task = get.get("--model"), get.get("--task")
    diffusion = _diffusion(model, task, {n for n, _ in flags})
    where = f" wherever {positional[-1]} was loaded" if positional else ""
    if model:
        out.append(f"  model: load {model} with from_pretrained(){where}" + (f" (task {task})" if task else ""))
    shapes = [(n, v) for n, v in flags if n in _SHAPE_FLAGS]
    if shapes:
        text = " ".join(f"{n} {v}" for n, v in shapes)
        seq = get.get("--sequence_length")
        pad = f' (tokenizer padding="max_length", max_length={seq})' if seq and not diffusion else ""
        gen = (f'; generation: cache_implementation="static", max_cache_len={seq}'
               if seq and not diffusion and task in (None, "text-generation", "text-generation-with-past") else "")
        out.append(f"  {text}: static shapes -> keep inputs at these shapes{pad}{gen}")
    tp = next(((n, v) for n, v in flags if n in _TP_FLAGS), None)
    if tp:
        n, v = tp
        if diffusion and v != "1":
            out.append(f"  {n} {v}: load the denoiser with from_pretrained(..., parallel_config=TensorParallelConfig("
                       f"tp_degree={v})), launched with torchrun --nproc_per_node={v}")
        elif v == "1":
            out.append(f'  {n} 1: one NeuronCore -> from_pretrained(..., device_map="neuron")')
        else:
            # (the old stack padded attention heads to the core count; a tensor-parallel size must divide them)
            uneven = "" if not v.isdigit() or int(v) & (int(v) - 1) == 0 else \
                f" (if {v} divides the model's attention and KV heads; else the nearest size that does)"
            out.append(f"  {n} {v}: TP_SIZE={v} -> from_pretrained(..., distributed_config=DistributedConfig("
                       f"tp_size={v})), launched with torchrun --nproc_per_node={v}{uneven}")
    dtypes = [(n, v) for n, v in flags if n in _DTYPE_FLAGS]
    if dtypes:
        text = " ".join(f"{n} {v}" for n, v in dtypes)
        target = next((_DTYPES[v] for n, v in dtypes if n != "--auto_cast" and v in _DTYPES), None)
        out.append(f"  {text}: " + (f"from_pretrained(..., dtype={target})" if target else "the dtype= of from_pretrained"))
    load = [(n, v) for n, v in flags if n in _LOAD_FLAGS]
    if load:
        text = " ".join(n if v is None else f"{n} {v}" for n, v in load)
        kw = ", ".join(_LOAD_FLAGS[n] + ("" if v is None else v) for n, v in load)
        out.append(f"  {text}: from_pretrained(..., {kw})")
    pipe = [(n, v) for n, v in flags if n in _PIPE_FLAGS]
    if pipe:
        out.append("  " + " ".join(f"{n} {v}" for n, v in pipe) + ": load them in the diffusers pipeline code")
    known = {"--model", "--task", *_SHAPE_FLAGS, *_TP_FLAGS, *_DTYPE_FLAGS, *_LOAD_FLAGS, *_PIPE_FLAGS}
    dropped = [n if v is None else f"{n} {v}" for n, v in flags if n not in known and n != "-m"]
    if dropped:
        out.append("  no equivalent, dropped: " + " ".join(dropped))
    return [_one_line(x) for x in out[:1]] + ["  " + _one_line(x) for x in out[1:]]


OUTPUT_MARKER = "Put the checkpoint in {out} ({how}): later steps read it."
OUTPUT_SHORT = "Put the model's checkpoint in {out}: later steps read what the export wrote there."


def _output_read_later(u: ShellUnit, s: Simple, args: list[str], ctx) -> str | None:
    """The output folder of a removed export (its last positional argument, a `$VAR` read from its assignment
    in the unit) when the rest of the text names it again (a notebook's later cell packs it, a script copies it
    or loads from it): the folder no longer exists unless something puts the checkpoint there."""
    flags, positional = _export_args(args)
    if not positional or not positional[-1]:
        return None
    out = positional[-1]
    if out.startswith("$"):
        name = out.strip("${}")
        found = re.search(rf"^[ \t]*(?:export[ \t]+)?{re.escape(name)}=([\"']?)([^\s\"'#;]+)\1", u.src, re.M)
        if found is None:
            return None
        out = found.group(2)
    folder = out.rstrip("/")
    if not folder or folder in (".", "..") or "$" in folder:
        return None
    end = u.toks[s.last].end if s.last < len(u.toks) else len(u.src)
    named = re.compile(rf"(?<![\w.\-]){re.escape(folder)}(?![\w.\-])")
    # (named more often in the whole text, a notebook's other cells too, than in this unit up to the command)
    return out if len(named.findall(ctx.whole_text)) > len(named.findall(u.src[:end])) else None


CONSOLIDATE_MARKER = ("Delete this step if the migrated training wrote this checkpoint: it saves whole weights, "
                      "with nothing to consolidate.")
PRERUN_MARKER = "Delete this command unless it should run twice: it was the neuron_parallel_compile pre-run."
STRIPPED_MARKER = ("Delete this command if it only pre-compiled: without neuron_parallel_compile it now runs for "
                   "real.")
COMPILE_JOB_MARKER = "Delete this job: it only pre-compiled graphs with neuron_parallel_compile (TorchNeuron compiles on first use)."
EXTRACT_GRAPHS_MARKER = "Keep only the real-run branch and drop this NEURON_EXTRACT_GRAPHS_ONLY test: nothing sets it now."
EXTRACT_GRAPHS_OFF_MARKER = ("Delete this NEURON_EXTRACT_GRAPHS_ONLY=0 once the launched scripts drop their tests of it: "
                             "every run is real now.")
EXTRACT_GRAPHS_SET_MARKER = ("Delete this NEURON_EXTRACT_GRAPHS_ONLY setting: it asked for a graph-extraction run, "
                             "which TorchNeuron does not have.")


class OptimumCliCommands(ShellRule):
    id = "NM510"
    markers = ((OUTPUT_MARKER, """The removed export wrote the compiled model into this folder, and the rest of
        the script, page or notebook names the folder again (it packs it into a SageMaker archive, copies files into
        it, loads from it): without the export the folder does not exist. Put the original checkpoint there (hf
        download of the model id, or save_pretrained of the loaded model and tokenizer); the migrated loading code
        reads a plain Transformers checkpoint."""),
               (CONSOLIDATE_MARKER, """`optimum-cli neuron consolidate` needs optimum-neuron. The migrated
        training (the Trainer, a model loaded with a DistributedConfig) saves whole checkpoints: save_pretrained
        gathers the shards, so there is nothing to consolidate (transformers.distributed's
        consolidate_distributed_checkpoint reads only save_pretrained(distributed_checkpoint=True) saves, and
        raises on these). Checkpoints of the old run (neuronx-distributed shards) still need the old tool."""),)
    title = "optimum-cli export neuron / neuron cache commands removed, neuron consolidate flagged"
    fix = "mixed"
    triggers = ("optimum-cli", "optimum.exporters.neuron")
    why = """
        TorchNeuron has no ahead-of-time export: a model loaded with `device_map="neuron"` (or under
        torchrun with a DistributedConfig) compiles on first use and caches the compiled graphs
        itself. `optimum-cli export neuron` commands are removed; a comment above says where each
        flag now lives (static shapes -> input padding and the static cache's `max_cache_len`,
        `--tensor_parallel_size`/`--num_cores` -> `DistributedConfig(tp_size=...)` under torchrun,
        or, for a diffusers pipeline (its task, a diffusion-only flag or the model's name says so),
        the denoiser's `parallel_config=TensorParallelConfig(tp_degree=...)`;
        `--auto_cast_type`/`--torch_dtype` -> `dtype=`). `optimum-cli neuron cache ...` (the Hub
        compile cache) is dropped. `optimum-cli neuron consolidate` and `neuron serve` need
        optimum-neuron and are flagged.
    """
    before = """
        optimum-cli export neuron --model Qwen/Qwen2.5-0.5B-Instruct --batch_size 1 --sequence_length 512 --num_cores 2 --auto_cast_type bf16 compiled_model/
    """
    after = """
        # neuron-migrate NM510: removed `optimum-cli export neuron`: TorchNeuron compiles the model on first use, there is no export step.
        #   model: load Qwen/Qwen2.5-0.5B-Instruct with from_pretrained() wherever compiled_model/ was loaded
        #   --batch_size 1 --sequence_length 512: static shapes -> keep inputs at these shapes (tokenizer padding="max_length", max_length=512); generation: cache_implementation="static", max_cache_len=512
        #   --num_cores 2: TP_SIZE=2 -> from_pretrained(..., distributed_config=DistributedConfig(tp_size=2)), launched with torchrun --nproc_per_node=2
        #   --auto_cast_type bf16: from_pretrained(..., dtype=torch.bfloat16)
    """
    caveats = """
        Scripts that later load the export directory must load the original model instead; the
        Python rules migrate the loading code, this rule only says where the flags went. Where the
        rest of the text names the export's folder again (a later cell packs or copies it), a marker
        says to put the checkpoint there (`hf download <model> --local-dir <folder>`). A command
        inside `$(...)`, backticks or a heredoc is not touched. In a pipeline, next to `||`, or as
        the only command of an `if`/loop body, the command becomes `:` instead of disappearing.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            if any(re.search(r"optimum-cli\s+(export\s+neuronx?|neuron)\b|optimum\.exporters\.neuron", u.text(t))
                   for t in embedded_scripts(u, s)):
                plan.marker(ctx, s.group, "this command string runs optimum-cli's Neuron export or tools: remove "
                            "them (TorchNeuron compiles on first use, see `neuron-migrate explain NM510`)")
            name = command_name(u, s)
            vals = [u.value(i) for i in s.words]
            if name == "optimum-cli" and len(vals) >= 3 and vals[1] == "export" and vals[2] in ("neuron", "neuronx"):
                args, label = s.words[3:], f"optimum-cli export {vals[2]}"
            elif (name and _PYTHON_RE.match(name) and len(vals) >= 3 and vals[1] == "-m"
                  and vals[2] == "optimum.exporters.neuron"):
                args, label = s.words[3:], "python -m optimum.exporters.neuron"
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "cache":
                if plan.editable(self.id, s) and not s.heredoc:
                    plan.remove(self.id, s)
                    self.finding(ctx, plan, s.words[0], "removed `optimum-cli neuron cache`: the Hugging Face Hub "
                                 "compile cache of optimum-neuron does not exist with TorchNeuron, which caches "
                                 "compiled graphs locally")
                continue
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "consolidate":
                plan.marker(ctx, s.group, CONSOLIDATE_MARKER)
                continue
            elif name == "optimum-cli" and len(vals) >= 3 and vals[1] == "neuron" and vals[2] == "serve":
                plan.marker(ctx, s.group, "`optimum-cli neuron serve` needs optimum-neuron: serve the model "
                            "with vLLM on Neuron instead")
                continue
            else:
                continue
            if not plan.editable(self.id, s) or s.heredoc:
                plan.marker(ctx, s.group, f"remove this `{label}` command: TorchNeuron compiles on first use, "
                            "there is no export step")
                continue
            raw = [u.text(i) for i in args]
            plan.remove(self.id, s)
            values = [" ".join(r.split()) for r in raw]
            comments = export_comments(values, label)
            folder = _output_read_later(u, s, [v.strip("\"'") for v in values], ctx)
            if folder is not None:
                # the export made the folder that later steps package, copy or load: it must hold the checkpoint now
                model = dict(_export_args(values)[0]).get("--model") or dict(_export_args(values)[0]).get("-m")
                plan.marker(ctx, s.group, fitted(
                    OUTPUT_MARKER.format(out=folder, how=f"hf download {model} --local-dir {folder}" if model
                                         else "save_pretrained"),
                    OUTPUT_SHORT.format(out=folder), OUTPUT_SHORT.format(out="the export's folder")))
            plan.add_comment(s.group, comment_line(self.id, comments[0]))
            for extra in comments[1:]:
                plan.add_comment(s.group, "# " + extra)
            self.finding(ctx, plan, s.words[0], f"removed `{label}` (TorchNeuron compiles on first use); the "
                         "comment above says where its flags now live")


# ------------------------------------------------------------------------------------------------
# NM511: neuron_parallel_compile


class NeuronParallelCompile(ShellRule):
    id = "NM511"
    markers = ((STRIPPED_MARKER, """neuron_parallel_compile ran the command in a graph-extraction mode to fill the
        compile cache (no real training); the real run was another command, script or cell. TorchNeuron compiles at
        the first call, so the command without the wrapper is a real run of its own: keep it only if that run is
        wanted here."""),
               (PRERUN_MARKER, """neuron_parallel_compile ran the command once to extract and compile its graphs
        ahead of time, then the script ran it again for real. TorchNeuron compiles at the first call, so the
        pre-run became a real run of its own: delete it unless two runs are wanted."""),
               (COMPILE_JOB_MARKER, """The file is a pre-compilation job (its name says so, or the script it
        launches shortens its run under NEURON_EXTRACT_GRAPHS_ONLY): without the wrapper it would train for
        real, so the command is kept as it was, for a person to delete the job."""))
    title = "neuron_parallel_compile prefix removed"
    fix = "mixed"
    triggers = ("neuron_parallel_compile",)
    why = """
        `neuron_parallel_compile <cmd>` ran `<cmd>` once in a graph-extraction mode to fill the
        Neuron compile cache of the XLA stack. TorchNeuron compiles with `torch.compile` on first
        use; the wrapper does not exist any more. The prefix is removed and the command runs as is.
        When the script runs the very same command again afterwards (the usual "pre-compile, then
        train" pair), the pre-run is removed instead, so that training does not run twice. A file
        that is only a pre-compilation job (`precompile.sh`, `compile_llama.slurm`: its name says
        compile, or the script it launches shortens its run when `NEURON_EXTRACT_GRAPHS_ONLY` is
        set) is not turned into a real training job: its command is kept as it was and marked for
        deletion.
    """
    before = """
        neuron_parallel_compile torchrun --nproc_per_node=32 train.py --max_steps 10
    """
    after = """
        torchrun --nproc_per_node=32 train.py --max_steps 10
    """
    caveats = """
        A pre-run that differs from the real run (fewer steps, say) is kept and now really runs:
        delete it if it was only there to compile; in a notebook cell or a Markdown block (a step of
        its own, whose real run is another one) it gets a marker saying so. A command that launches a
        compile script (`precompile.py`) is a compile job. On a Markdown page or in a notebook, a pre-run
        whose command another block or cell runs for real keeps the stripped command with a marker
        to delete it (the two pieces are not one script, so nothing is removed). `neuron_parallel_compile --command ...` (collect,
        compile, clean, analyze) is flagged. Scripts that test `NEURON_EXTRACT_GRAPHS_ONLY` are
        flagged by NM514.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            if any("neuron_parallel_compile" in u.text(t) for t in embedded_scripts(u, s)):
                # (a job that only pre-compiled would run the real thing without the prefix: not just dropped)
                plan.marker(ctx, s.group, "Delete this command if it only pre-compiled, else remove "
                            "neuron_parallel_compile from its command string.")
            k = _npc_position(u, s)
            if k is None:
                continue
            npc = s.words[k]
            wrapped = s.words[k + 1:]
            if not wrapped or u.text(wrapped[0]).startswith("-"):
                plan.marker(ctx, s.group, "neuron_parallel_compile has no TorchNeuron equivalent (graphs "
                            "compile on first use): delete this command")
                continue
            if not plan.editable(self.id, s):
                plan.marker(ctx, s.group, "remove the neuron_parallel_compile prefix (TorchNeuron compiles "
                            "on first use)")
                continue
            key = tuple(u.text(i) for i in s.words if i != npc)
            twin = next((t for t in u.by_words.get(key, ()) if t is not s), None)
            if twin is not None and not s.heredoc:
                where = "later" if twin.first > s.first else "earlier"
                plan.remove(self.id, s)
                plan.add_comment(s.group, comment_line(
                    self.id, f"removed the neuron_parallel_compile pre-run of the `{u.text(wrapped[0])}` "
                    f"command that runs {where} in this script (TorchNeuron compiles on first use)."))
                self.finding(ctx, plan, npc, "removed the neuron_parallel_compile pre-run: the same "
                             f"command runs {where} in this script and compiles on first use")
                continue
            scripts = {u.text(i) for i in wrapped if u.text(i).endswith((".py", ".sh"))}
            if _compile_job(ctx, scripts):
                plan.marker(ctx, s.group, COMPILE_JOB_MARKER)
                continue
            plan.delete(self.id, npc)
            self.finding(ctx, plan, npc, "removed the neuron_parallel_compile prefix: the command now "
                         "runs for real (TorchNeuron compiles on first use); delete it if it was only a "
                         "pre-compilation run")
            if scripts and any(
                t is not s and t.words and u.text(t.words[0]) == u.text(wrapped[0])
                and scripts <= {u.text(i) for i in t.words}
                for t in u.simples_by_command.get(u.text(wrapped[0]), ())
            ) or _runs_elsewhere_on_page(ctx, " ".join(u.text(i) for i in wrapped)):
                plan.marker(ctx, s.group, PRERUN_MARKER)
            elif ctx.whole_text != ctx.text:
                # a notebook cell or a Markdown block: a step of its own, whose real run is another cell or page
                # (neuron_parallel_compile never ran the command for real): stripped, it is a real run that did
                # not happen before
                plan.marker(ctx, s.group, STRIPPED_MARKER)


def _runs_elsewhere_on_page(ctx, command: str) -> bool:
    """Whether the notebook or Markdown page this shell unit is a piece of runs ``command`` (the pre-run's wrapped
    command) in another of its pieces: `neuron_parallel_compile ./train.sh` in one fenced block, `./train.sh` in
    the next one (the pre-run, now a real run, would run it twice)."""
    page = ctx.whole_text
    if page == ctx.text:
        return False
    own = {line.strip() for line in ctx.text.splitlines()}
    return any(line.strip().lstrip("!$ ").strip() == command and line.strip() not in own
               for line in page.splitlines())


#: a file name that says the file is a compile job (`precompile.sh`, `compile_llama.slurm`, `neuron_compile.sh`)
_COMPILE_FILE = re.compile(r"compil", re.I)


def _compile_job(ctx, scripts: set[str]) -> bool:
    """Whether a neuron_parallel_compile command with no real run beside it is a pre-compilation job only: the
    file's name says compile, or a script it launches tests NEURON_EXTRACT_GRAPHS_ONLY (it shortened its run
    for the graph extraction). Without the wrapper such a job would train for real."""
    path = getattr(ctx, "path", None)
    if path is not None and _COMPILE_FILE.search(path.stem):
        return True
    if any(_COMPILE_FILE.search(name.rsplit("/", 1)[-1].rsplit(".", 1)[0]) for name in scripts):
        return True  # it launches a compile script (`precompile.py`, `compile_model.sh`)
    return any("NEURON_EXTRACT_GRAPHS_ONLY" in (launched_source(ctx, name) or "") for name in scripts)


#: commands that run their first operand as a program (`srun neuron_parallel_compile torchrun ...`)
_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec", "nohup", "exec", "sudo"})


def _npc_position(unit: ShellUnit, s: Simple) -> int | None:
    """Index in s.words of a `neuron_parallel_compile` that runs the words after it."""
    for k, i in enumerate(s.words):
        v = unit.value(i)
        if v is not None and v.rsplit("/", 1)[-1] == "neuron_parallel_compile":
            if k == 0 or command_name(unit, s) in _LAUNCHERS:
                return k
            return None
    return None


# ------------------------------------------------------------------------------------------------
# NM512: XLA-only environment variables


class XlaOnlyEnvironment(ShellRule):
    id = "NM512"
    markers = ENV_MARKERS + ((SERVER_SCRIPT_MARKER, SERVER_SCRIPT_WHY),)
    title = "XLA-only and optimum-neuron environment variables removed"
    fix = "mixed"
    triggers = tuple(sorted(XLA_ONLY_VARS)) + XLA_ONLY_PREFIXES + tuple(MARKED_VARS)
    why = """
        `XLA_USE_BF16`, `XLA_DOWNCAST_BF16`, `NEURON_FUSE_SOFTMAX`,
        `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS`, `XLA_IR_DEBUG`, `XLA_HLO_DEBUG`, `PJRT_DEVICE`,
        `NEURON_NUM_RECENT_MODELS_TO_KEEP` (and other torch-xla settings) are read only by the XLA
        stack, and `OPTIMUM_NEURON_*`-style variables only by optimum-neuron. TorchNeuron ignores
        them; bf16 comes from `dtype=torch.bfloat16` or `bf16=True`. They are removed from
        `export X=...`, `X=... cmd` prefixes, `env X=... cmd` and `unset X`, from the environment
        that launchers pass on (`mpirun -x X=...`, `srun --export=ALL,X=...`, `#SBATCH
        --export=...`), and from the scripts of `bash -c '...'`/`sh -c`/`eval '...'` when the
        string is a literal (re-lexed and re-quoted as it was). Runtime and EFA variables
        (`NEURON_RT_*` other than the one above, `FI_*`, `CCOM_*`) are kept. Removing
        `XLA_USE_BF16=1` / `XLA_DOWNCAST_BF16=1` changes the precision of the launch (torch-xla ran
        the float32 model in bf16): a marker in the launcher says that the script must now choose
        bf16 itself (NM415 rewrites the reads of these variables in the scripts it launches).
        `NEURON_COMPILE_CACHE_URL` (the XLA stack's NEFF cache: TorchNeuron's is
        `TORCH_NEURONX_NEFF_CACHE_DIR`, a setting a person chooses),
        `NEURON_PLATFORM_TARGET_OVERRIDE` (whether TorchNeuron reads it is not established) and
        Transformers 4's `TRANSFORMERS_CACHE` (Transformers 5 ignores it: `HF_HUB_CACHE`) are kept
        with a marker.
    """
    before = """
        export NEURON_FUSE_SOFTMAX=1 NEURON_RT_NUM_CORES=2
        PJRT_DEVICE=NEURON torchrun --nproc_per_node=2 train.py
    """
    after = """
        export NEURON_RT_NUM_CORES=2
        torchrun --nproc_per_node=2 train.py
    """
    caveats = """
        Forms inside `$(...)` and heredocs, and `declare -x`, are not edited. A command string
        with expansions, escapes or nested quotes (`bash -c "X=1 python $S"`), a quoted or
        expanded `--export` list, and one that would be left empty (`--export=XLA_USE_BF16=1`
        exports that variable alone) get a marker instead. A line that still reads a removed
        variable (`$XLA_USE_BF16`) gets a marker.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        if neuron_sdk_server(plan.unit.src):
            # a model server of the Neuron SDK keeps its environment (codemods.project.serving): said once, on the
            # first setting of the old stack's variables
            for s in plan.unit.simples:
                if any(a.form != "unset" and (a.name.startswith("NEURON") or xla_only_reason(a.name))
                       for a in plan.assignments(s)) and plan.editable(self.id, s):
                    plan.marker(ctx, s.group, SERVER_SCRIPT_MARKER)
                    break
            return
        u = plan.unit
        removed: dict[str, list[Simple]] = {}
        for s in u.simples:
            for a in plan.assignments(s):
                if a.name in MARKED_VARS and a.form != "unset":
                    plan.marker(ctx, s.group, MARKED_VARS[a.name])
                reason = xla_only_reason(a.name)
                if reason is None or not plan.editable(self.id, s):
                    continue
                plan.delete(self.id, a.tok)
                removed.setdefault(a.name, []).append(s)
                what = {"unset": f"`unset {a.name}`"}.get(a.form, a.name)
                self.finding(ctx, plan, a.tok, f"removed {what}: {reason}")
                if a.name in BF16_VARS and a.form != "unset" and switched_on(a.value):
                    # the precision of the run changes: say so in the launcher itself
                    mark_bf16_launch(plan, ctx, self.id, s.group, a.name)
            for a in appends(u, s):  # `XLA_FLAGS+=" --xla_dump_to=/tmp"`: adds to a variable with no effect either
                reason = xla_only_reason(a.name)
                if reason is None or a.name in BF16_VARS or a.name == "NEURON_CC_FLAGS":
                    continue  # (NEURON_CC_FLAGS: NM513's)
                if plan.editable(self.id, s):
                    plan.delete(self.id, a.tok)
                    removed.setdefault(a.name, []).append(s)
                    self.finding(ctx, plan, a.tok, f"removed the append to {a.name}: {reason}")
                else:
                    plan.marker(ctx, s.group, f"Remove this append to {a.name}: it has no effect on TorchNeuron.")
            name = command_name(u, s)
            if name in ("mpirun", "mpiexec", "orterun"):
                self._mpirun(plan, ctx, s, removed)
            elif name in ("srun", "sbatch", "salloc"):
                self._srun(plan, ctx, s, removed)
            for tok in embedded_scripts(u, s):
                self._embedded(plan, ctx, s, tok)
        self._sbatch_lines(plan, ctx)
        if not removed:
            return
        for s in u.simples:
            if plan.is_removed(s):
                continue
            for name, where in removed.items():
                if s in where:
                    continue
                if any(references(u.text(i), name) for i in range(s.first, s.last + 1)):
                    plan.marker(ctx, s.group, f"{name} is no longer set (XLA-only, removed by neuron-migrate): "
                                "update this use")
                    break

    def _mpirun(self, plan: ShellPlan, ctx, s: Simple, removed: dict[str, list[Simple]]) -> None:
        """`mpirun -x XLA_USE_BF16=1 -x FI_PROVIDER python t.py`: the `-x` pairs of XLA-only variables go."""
        u = plan.unit
        words = s.words
        k = 1
        while k + 1 < len(words):
            flag = u.value(words[k])
            if flag is None or not flag.startswith("-"):
                if flag is None or "/" in flag or flag.endswith((".py", ".sh")) or _PYTHON_RE.match(flag) or flag in (
                        "torchrun", "bash", "sh", "env", "neuron_parallel_compile"):
                    return  # the program: what follows are its own arguments
                k += 1
                continue
            if flag == "-x":
                operand = u.value(words[k + 1])
                var = (operand or "").split("=", 1)[0]
                reason = xla_only_reason(var) if operand is not None and NAME_RE.match(var) else None
                if reason is not None:
                    if not plan.editable(self.id, s):
                        plan.marker(ctx, s.group, f"remove `-x {operand}` ({reason})")
                        return
                    plan.delete(self.id, words[k])
                    plan.delete(self.id, words[k + 1])
                    removed.setdefault(var, []).append(s)
                    self.finding(ctx, plan, words[k], f"removed `-x {var}` from the MPI launch: {reason}")
                k += 2
                continue
            k += 1

    def _srun(self, plan: ShellPlan, ctx, s: Simple, removed: dict[str, list[Simple]]) -> None:
        """`srun --export=ALL,XLA_USE_BF16=1 ...`: the XLA-only variables leave the list."""
        u = plan.unit
        words = s.words
        for k in range(1, len(words)):
            text = u.text(words[k])
            if text.startswith("--export="):
                tok, prefix, value = words[k], "--export=", text[len("--export="):]
            elif text == "--export" and k + 1 < len(words):
                tok, prefix, value = words[k + 1], "", u.text(words[k + 1])
            else:
                continue
            plain = word_value(value)
            new = _export_list(plain) if plain is not None else None
            if new is None:
                names = sorted({m.group(1) for m in _ASSIGN_ANY_RE.finditer(value) if xla_only_reason(m.group(1))})
                if names:
                    plan.marker(ctx, s.group, f"Remove {', '.join(names)} from this --export list: "
                                f"{ignored_by_torchneuron(names)}.", detail=_reasons(names))
                return
            kept, gone = new
            if not gone:
                return
            reasons = _reasons(gone)
            if not kept or not plan.editable(self.id, s) or plain != value:
                plan.marker(ctx, s.group, f"Remove {', '.join(gone)} from this --export list: "
                            f"{ignored_by_torchneuron(gone)}.", detail=reasons)
                return
            plan.replace(self.id, tok, prefix + ",".join(kept))
            for g in gone:
                removed.setdefault(g, []).append(s)
            self.finding(ctx, plan, tok, f"removed {', '.join(gone)} from the --export list: {reasons}")
            return

    def _sbatch_lines(self, plan: ShellPlan, ctx) -> None:
        """`#SBATCH --export=ALL,XLA_USE_BF16=1` directive lines (comments to the shell)."""
        u = plan.unit
        comment_starts = {start for start, _end in u.comments}  # real comments: not heredoc or string text
        for li, line in enumerate(u.lines):
            m = _SBATCH_EXPORT_RE.match(line)
            if m is None or u.line_starts[li] not in comment_starts:
                continue
            new = _export_list(m.group(2))
            if new is None or not new[1]:
                continue
            kept, gone = new
            reasons = _reasons(gone)
            inside = any(a <= li <= b for a, b in u.groups)
            if "neuron-migrate" in line and is_silenced(ignored_rules(line), self.id):
                continue
            if not kept or inside or ctx.is_edited(li):
                ctx.marker(li, f"Remove {', '.join(gone)} from this --export list: {ignored_by_torchneuron(gone)}.",
                           detail=reasons)
                continue
            ctx.replace_lines(li, li + 1, [line[: m.start(2)] + ",".join(kept) + line[m.end(2):]],
                              f"removed {', '.join(gone)} from the #SBATCH --export list: {reasons}")

    def _embedded(self, plan: ShellPlan, ctx, s: Simple, tok: int) -> None:
        """`bash -c '...'` / `eval '...'`: a literal script is rewritten, anything else is flagged."""
        u = plan.unit
        text = u.text(tok)
        names = sorted({m.group(1) for m in _ASSIGN_ANY_RE.finditer(text) if xla_only_reason(m.group(1))})
        if not names:
            return
        found: list[str] = []
        bf16: list[str] = []

        def edit(sub: ShellPlan) -> bool:
            for inner in sub.unit.simples:
                for a in assignments(sub.unit, inner):
                    if xla_only_reason(a.name) is not None and sub.editable(self.id, inner):
                        sub.delete(self.id, a.tok)
                        found.append(a.name)
                        if a.name in BF16_VARS and a.form != "unset" and switched_on(a.value):
                            bf16.append(a.name)
            return bool(found)

        lit = literal_script(text)
        new = rewrite_script(lit[1], edit) if lit is not None else None
        if new is None or not plan.editable(self.id, s) or set(found) != set(names):
            plan.marker(ctx, s.group, f"Remove {', '.join(names)} from this command string: "
                        f"{ignored_by_torchneuron(names)}.", detail=_reasons(names))
            return
        if not new.strip() and s.words.index(tok) == len(s.words) - 1 and command_name(u, s) in _SHELLS | {"eval"}:
            plan.remove(self.id, s)  # `eval 'export XLA_USE_BF16=1'`: nothing left to run
        else:
            plan.replace(self.id, tok, lit[0] + new + lit[0])
        self.finding(ctx, plan, tok, f"removed {', '.join(names)} from the command string: "
                     + "; ".join(dict.fromkeys(str(xla_only_reason(n)) for n in names)))
        if bf16:  # the precision of the run changes: said in the launcher, as for a plain assignment
            mark_bf16_launch(plan, ctx, self.id, s.group, bf16[0])


def _reasons(names: list[str]) -> str:
    """What each of these old-stack environment variables did (a marker's detail)."""
    return "; ".join(f"{n}: {xla_only_reason(n)}" for n in names)


_SBATCH_EXPORT_RE = re.compile(r"^(#SBATCH\s+--export[= ])(\S+)(\s.*)?$")
_ASSIGN_ANY_RE = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*)=")
_EXPORT_ITEM_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(=[^,]*)?\Z")


def _export_list(value: str) -> tuple[list[str], list[str]] | None:
    """(kept items, removed variable names) of a Slurm ``--export`` list; None if it is not a plain
    list of ``ALL``/``NONE``/``NAME``/``NAME=value`` items (a value with a comma is ambiguous)."""
    items = value.split(",")
    kept: list[str] = []
    gone: list[str] = []
    for item in items:
        if item in ("ALL", "NONE", "NIL"):
            kept.append(item)
            continue
        if not _EXPORT_ITEM_RE.match(item) or "$" in item or "'" in item or '"' in item:
            return None
        name = item.split("=", 1)[0]
        if xla_only_reason(name) is not None:
            gone.append(name)
        else:
            kept.append(item)
    return kept, gone


# ------------------------------------------------------------------------------------------------
# NM514: NEURON_EXTRACT_GRAPHS_ONLY


class ExtractGraphsOnly(ShellRule):
    id = "NM514"
    markers = ((EXTRACT_GRAPHS_MARKER, """NEURON_EXTRACT_GRAPHS_ONLY was set by neuron_parallel_compile during its
        graph-extraction pre-run; without that tool nothing sets it, so only the real-run branch runs."""),
               (EXTRACT_GRAPHS_OFF_MARKER, """A launcher that sets NEURON_EXTRACT_GRAPHS_ONLY=0 asks the scripts it
        runs for the real run, which is now the only one: once their tests of the variable keep only that
        branch, the setting is dead. It is kept until then: a test written `= 0` would take the other branch
        without it."""),
               (EXTRACT_GRAPHS_SET_MARKER, """NEURON_EXTRACT_GRAPHS_ONLY=1 made the scripts run their short
        graph-extraction path for neuron_parallel_compile; TorchNeuron has no such pre-run."""))
    title = "NEURON_EXTRACT_GRAPHS_ONLY branches flagged"
    fix = "manual"
    triggers = ("NEURON_EXTRACT_GRAPHS_ONLY",)
    why = """
        neuron_parallel_compile set `NEURON_EXTRACT_GRAPHS_ONLY=1` during its graph-extraction
        run, and scripts tested it to shorten that run (`MAX_STEPS=10`). Without
        neuron_parallel_compile nothing sets it: only the branch of the real run is ever taken.
        Each test (or setting) of it is flagged so that a person keeps the right branch.
    """
    before = """
        if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = "1" ]; then MAX_STEPS=10; else MAX_STEPS=-1; fi
    """
    after = """
        # TODO(neuron-migrate NM514): Keep only the real-run branch and drop this NEURON_EXTRACT_GRAPHS_ONLY test: nothing sets it now.
        if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = "1" ]; then MAX_STEPS=10; else MAX_STEPS=-1; fi
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        seen: set[int] = set()
        for s in u.simples:  # a setting of it is no test: its own marker
            for a in plan.assignments(s):
                if a.name == "NEURON_EXTRACT_GRAPHS_ONLY" and a.form != "unset" and s.group not in seen:
                    seen.add(s.group)
                    plan.marker(ctx, s.group, EXTRACT_GRAPHS_SET_MARKER if switched_on(a.value)
                                else EXTRACT_GRAPHS_OFF_MARKER)
        for i, tok in enumerate(u.toks):
            if tok.kind not in ("word", "arith") or "NEURON_EXTRACT_GRAPHS_ONLY" not in tok.text:
                continue
            g = u.group_of_tok[i]
            if g < 0 or g in seen:
                continue
            seen.add(g)
            plan.marker(ctx, g, EXTRACT_GRAPHS_MARKER)


# ------------------------------------------------------------------------------------------------
# NM526: XLA-era Deep Learning Container images pulled or run


#: a container image reference: registry/name[:tag][@digest], no spaces (a sentence naming an image is not one)
_IMAGE_REF_RE = re.compile(r"[\w.\-/]+(:[\w.\-]+)?(@[\w:]+)?\Z")
IMAGE_MARKER = "Use a TorchNeuron image (Neuron SDK 2.33+) here: this XLA-era Neuron container has no native neuron device."
SERVER_IMAGE_MARKER = "Move this Neuron SDK model server (vLLM, DJL, TGI) to a TorchNeuron serving image as a whole."
#: a model-server image built for Neuron (DJL's `djl-serving:0.29.0-pytorch-inf2`, `djl-inference:...-neuronx-...`);
#: `djl-serving:0.29.0-lmi` is DJL for GPUs
_NEURON_TAG_RE = re.compile(r"neuronx|inf2|inferentia", re.I)


def _server_image(ref: str) -> bool:
    """Whether a container image reference is one of the Neuron SDK's model servers of the XLA era."""
    return xla_era_server_image(ref) and _NEURON_TAG_RE.search(ref) is not None


class XlaDlcImageCommand(ShellRule):
    id = "NM526"
    markers = ((IMAGE_MARKER, """The `pytorch-training-neuronx` / `pytorch-inference-neuronx` Deep Learning
        Containers of Neuron SDKs before TorchNeuron ship torch-xla and torch-neuronx's XLA backend; the
        migrated code needs TorchNeuron (torch-neuronx 2.13+, Neuron SDK 2.33+)."""),
               (SERVER_IMAGE_MARKER, """The Neuron SDK's model servers (DJL LMI `djl-serving:*-inf2` /
        `djl-inference:*-neuronx-*`, vLLM on NxD Inference, TGI's Neuron backend) bring their own XLA-era
        torch-neuronx, compiler flags and compile cache: the migration leaves the server's launcher as it is
        (codemods.project.serving). Moving the deployment to TorchNeuron means a TorchNeuron serving image and
        that server's own configuration for it, not an edit of this command."""),)
    title = "XLA-era Neuron Deep Learning Container image pulled, run or named in a shell command"
    fix = "manual"
    triggers = ("-neuronx", "djl-serving", "-inf2")
    why = """
        NM520 flags the base image of a Dockerfile. Launch scripts, notebooks and READMEs name the
        same images on the command line: `docker pull <image>`, `docker run ... <image> python
        train.py`, `docker build --build-arg BASE_IMAGE=<image>`, or a variable (`IMAGE=<image>`)
        that later commands use. The migrated code needs TorchNeuron, which those images do not
        have: each command (or assignment) that names an XLA-era image gets a marker. An image of one
        of the Neuron SDK's model servers (DJL's `deepjavalibrary/djl-serving:0.29.0-pytorch-inf2`) gets
        its own marker: the migration leaves a server's launcher as it is, and the image is what says so.
    """
    before = """
        docker pull 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04
    """
    after = """
        # TODO(neuron-migrate NM526): Use a TorchNeuron image (Neuron SDK 2.33+) here: this XLA-era Neuron container has no native neuron device.
        docker pull 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04
    """
    caveats = """
        The image test is NM520's: a tag that names Neuron SDK 2.33 or later, or starts with
        PyTorch 2.13 or later, is a TorchNeuron image and is not flagged. An image built from
        variables (`$REGISTRY/pytorch-training-neuronx:$TAG`) is not recognised.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            values = [u.value(i) for i in (*s.assigns, *s.words)]
            images = [v.split("=", 1)[-1] for v in values if v is not None]
            if any(_IMAGE_REF_RE.match(v) and xla_era_image(v) for v in images):
                plan.marker(ctx, s.group, IMAGE_MARKER)
            elif any(_IMAGE_REF_RE.match(v) and _server_image(v) for v in images):
                plan.marker(ctx, s.group, SERVER_IMAGE_MARKER)


# ------------------------------------------------------------------------------------------------
# NM528: XLA-era DLAMI virtual environments


class XlaDlamiVenv(ShellRule):
    id = "NM528"
    markers = ((VENV_MARKER, """The virtual environments of the Neuron Deep Learning AMI before TorchNeuron
        (`/opt/aws_neuronx_venv_pytorch_2_9_nxd_inference`, `..._inference_vllm_0_16`, `..._transformers_neuronx`)
        hold torch-xla, the XLA-era torch-neuronx and the libraries built on them; the migrated scripts need
        TorchNeuron (torch-neuronx 2.13+), which they do not have."""),)
    title = "XLA-era Deep Learning AMI virtual environment activated or used"
    fix = "manual"
    triggers = ("_venv",)
    why = """
        Launch scripts, notebooks and READMEs activate one of the Neuron Deep Learning AMI's
        virtual environments (`source /opt/aws_neuronx_venv_pytorch_2_9/bin/activate`), run its
        interpreter (`/opt/aws_neuronx_venv_.../bin/python train.py`) or put it on the PATH. Those
        environments have the XLA-era stack (torch-xla, NxD, optimum-neuron, vLLM on NxD
        Inference); the migrated code needs TorchNeuron. Each command or assignment that names
        one gets a marker: which environment to use instead depends on the user's AMI and SDK.
    """
    before = """
        source /opt/aws_neuronx_venv_pytorch_2_9_nxd_inference/bin/activate
        python generate.py
    """
    after = """
        # TODO(neuron-migrate NM528): Use a TorchNeuron (torch-neuronx 2.13+) environment here: this Deep Learning AMI venv has the XLA-era Neuron stack.
        source /opt/aws_neuronx_venv_pytorch_2_9_nxd_inference/bin/activate
        python generate.py
    """
    caveats = """
        Only activating the environment, running one of its programs or assigning its path (`PATH=`,
        `PY=`) counts: a command that only reads its files (`ls .../site-packages`) is not flagged.
        A venv whose name says PyTorch 2.13 or later (`aws_neuronx_venv_pytorch_2_13`) is taken for a
        TorchNeuron one and left alone; the TensorFlow environments are not flagged. A path built
        from variables is recognised only where the literal path appears (a default value counts).
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            if any(xla_era_venv(u.toks[i].text) for i in s.assigns) or self._uses_venv(u, s):
                plan.marker(ctx, s.group, VENV_MARKER)

    @staticmethod
    def _uses_venv(u: ShellUnit, s: Simple) -> bool:
        """The command activates the environment (`source .../bin/activate`) or runs one of its programs
        (`/opt/aws_neuronx_venv_.../bin/python train.py`); naming its files otherwise (`ls .../site-packages`) is
        reading the old stack, not running on it."""
        words = [u.toks[i].text for i in s.words]
        if not words:
            return False
        if xla_era_venv(words[0]):
            return True
        return words[0] in ("source", ".") and len(words) > 1 and xla_era_venv(words[1])


# ------------------------------------------------------------------------------------------------
# NM530: environments made with a Python older than the migrated stack needs


#: a script that installs the migrated stack (what cannot install on an older Python)
_INSTALLS_STACK = re.compile(r"\b(?:pip3?|uv pip)\s+install\b[^\n]*\b(?:transformers|diffusers|trl|optimum|peft|accelerate)\b")


class OldPythonEnvironment(ShellRule):
    id = "NM530"
    markers = ((VENV_PYTHON_MARKER, """The migrated requirements (transformers 5.23, diffusers 0.42, TRL 1.x) declare
        Requires-Python >= 3.11: in an environment made with Python 3.8-3.10, pip finds no matching distribution of
        them. NM527 says the same of a Dockerfile's base image."""),)
    title = "Virtual environment made with a Python older than the migrated stack needs (3.11 for transformers 5.23)"
    fix = "manual"
    triggers = ("venv", "virtualenv", "conda create", "mamba create")
    why = """
        Setup scripts make the environment the project installs into: `python3.9 -m venv env`,
        `virtualenv -p python3.8 env`, `conda create -n env python=3.10`, `uv venv --python 3.9`.
        transformers 5.23 and diffusers 0.42 need Python 3.11 or later, so the migrated pins
        (NM523) cannot install there. In a script that installs the Hugging Face libraries, each
        such command gets a marker.
    """
    before = """
        python3.9 -m venv env
        source env/bin/activate
        pip install "transformers>=5.23"
    """
    after = """
        # TODO(neuron-migrate NM530): Make this environment with Python 3.11+ (transformers 5.23 needs it): it uses Python 3.9.
        python3.9 -m venv env
        source env/bin/activate
        pip install "transformers>=5.23"
    """
    caveats = """
        Only versions written in the command count (a `python3 -m venv`, whose version is the host's, is
        not flagged); a script that installs none of the Hugging Face libraries, or that starts a Neuron
        SDK model server, is left alone.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        if neuron_sdk_server(u.src) or not _INSTALLS_STACK.search(ctx.whole_text):
            return
        for s in u.simples:
            version = environment_python([u.value(i) for i in s.words])
            if version is not None and version < TARGET_PYTHON and plan.editable(self.id, s):
                plan.marker(ctx, s.group, VENV_PYTHON_MARKER.format(version=f"{version[0]}.{version[1]}"))


# ------------------------------------------------------------------------------------------------
# NM529: checkouts of the old stack's repositories


#: the old stack's repositories (a checkout is installed with `pip install .`, or its example scripts are run)
_OLD_STACK_REPOSITORY = re.compile(
    r"github\.com[/:](?:huggingface/optimum-neuron|aws-neuron/(?:transformers-neuronx|neuronx-distributed(?:-inference)?"
    r"|neuronx-nemo-megatron|aws-neuron-reference-for-megatron-lm))(?:\.git)?/?$")
#: a Hub repository of the aws-neuron organisation: a model optimum-neuron exported ahead of time (NM113)
_EXPORTED_MODEL_REPOSITORY = re.compile(r"huggingface\.co/aws-neuron/[\w.-]+(?:\.git)?/?$")
EXPORTED_CLONE_MARKER = "Clone the original checkpoint instead: this aws-neuron repository is a pre-exported Neuron model."
CHECKOUT_MARKER = ("This checkout is old Neuron stack code: install the libraries the migrated code imports, or "
                   "migrate its scripts.")


class OldStackCheckout(ShellRule):
    id = "NM529"
    markers = ((EXPORTED_CLONE_MARKER, """A `git clone https://huggingface.co/aws-neuron/<model>`: the aws-neuron
        organisation publishes models optimum-neuron (or transformers-neuronx) exported ahead of time, NEFFs for one
        SDK release and fixed shapes, which Transformers cannot load. Clone or download the model they were exported
        from (NM113 says the same of Hub downloads in Python)."""),
               (CHECKOUT_MARKER, """A `git clone` of optimum-neuron, transformers-neuronx, neuronx-distributed(-inference),
        neuronx-nemo-megatron or the Neuron reference Megatron-LM: the checkout is then installed from source (`cd
        optimum-neuron && pip install .`), which NM523 cannot replace as it does a `pip install optimum-neuron`, or
        its example scripts are run (`cd neuronx-distributed/examples/training/llama && ./run.sh`), and those
        scripts run on torch-xla. The migrated code imports Transformers/TRL/Diffusers: install those instead,
        or migrate the scripts you run from the checkout (they are not part of this project)."""),)
    title = "git clone of an old Neuron stack repository (installed from source, or its scripts run)"
    fix = "manual"
    triggers = ("optimum-neuron", "transformers-neuronx", "neuronx-distributed", "neuronx-nemo-megatron",
                "aws-neuron-reference-for-megatron-lm", "huggingface.co/aws-neuron/")
    why = """
        Setup scripts, notebooks and READMEs install the old stack from a checkout (`git clone
        https://github.com/huggingface/optimum-neuron.git && cd optimum-neuron && pip install .`) or
        clone neuronx-distributed to run its example scripts. NM523 replaces `pip install
        optimum-neuron`; a source install names no package it could replace, and the checkout's
        scripts are torch-xla code outside the project. Each `git clone` of one of those repositories
        gets a marker.
    """
    before = """
        git clone https://github.com/huggingface/optimum-neuron.git
        cd optimum-neuron && pip install .
    """
    after = """
        # TODO(neuron-migrate NM529): This checkout is old Neuron stack code: install the libraries the migrated code imports, or migrate its scripts.
        git clone https://github.com/huggingface/optimum-neuron.git
        cd optimum-neuron && pip install .
    """
    caveats = """
        Only a `git clone` whose words name the repository's URL counts (a URL held in a variable
        does not); clones of other repositories (aws-neuron-samples, the Hugging Face libraries:
        NM624) are left alone. The clone stays: what replaces it depends on what the checkout was for.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        for s in u.simples:
            values = [u.value(i) for i in s.words]
            if len(values) >= 3 and values[0] == "git" and "clone" in values[1:3] and any(
                    v and _OLD_STACK_REPOSITORY.search(v) for v in values):
                plan.marker(ctx, s.group, CHECKOUT_MARKER)
            elif len(values) >= 3 and values[0] == "git" and "clone" in values[1:3] and any(
                    v and _EXPORTED_MODEL_REPOSITORY.search(v) for v in values):
                plan.marker(ctx, s.group, EXPORTED_CLONE_MARKER)


RULES = (OptimumCliCommands, NeuronParallelCompile, XlaOnlyEnvironment, ExtractGraphsOnly, XlaDlcImageCommand,
         XlaDlamiVenv, OldStackCheckout, OldPythonEnvironment)
