"""NM900: old-stack imports and names that no rule migrates automatically."""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.accelerators import serves_other_accelerators
from codemods.common.renames import load_table
from codemods.common.venvs import VENV_MARKER, xla_era_venv
from migrator.model import KEEPS_OLD_STACK, fitted
from migrator.imports import falls_back, import_gate, old_stack_alternative
from migrator.rules import PythonContext, PythonRule

#: top-level packages of the old stack; none of them exists under TorchNeuron
OLD_STACK = (
    "optimum.neuron",
    "torch_xla",
    "torch_neuronx",
    "torch_neuron",
    "transformers_neuronx",
    "neuronx_distributed",
    "neuronx_distributed_training",
    "libneuronxla",
    "neuronx_distributed_inference",
    "neuronxcc.nki",
    "optimum.commands.neuron",
    "optimum.commands.export.neuron",
    "optimum.commands.export.neuronx",
    "optimum.exporters.neuron",
    "neuronperf",
)


#: old-stack packages replaced as a whole (no name of theirs has a native twin): one marker on the import
WHOLE = ("neuronperf",)
#: old-stack packages that moved (their names live on in another package): the marker on each import says
#: where, and covers the uses of what it binds (a kernel's every `nl.load` is no TODO of its own)
MOVED = ("neuronxcc.nki",)

#: ``import torch_neuronx`` itself is the TorchNeuron plugin (the seeds import it); only its XLA-era APIs are old
NATIVE = ("torch_neuronx",)
#: submodules of TorchNeuron's own torch_neuronx, which the XLA-era package never had: ``nki_hop`` wraps NKI
#: kernels as torch operators (``wrap_nki``) for eager mode and torch.compile
NATIVE_SUBMODULES = ("torch_neuronx.nki_hop",)
#: the device-module functions TorchNeuron provides (those of ``torch.neuron``, the ``torch.cuda`` of the neuron
#: device): none of them was XLA-era torch-neuronx API (that stack used torch_xla's ``xm`` for devices and memory)
NATIVE_DEVICE_API = frozenset({
    "device_count", "current_device", "set_device", "is_available", "synchronize", "get_device_name",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "empty_cache", "manual_seed", "manual_seed_all", "seed", "initial_seed",
    "get_rng_state", "set_rng_state", "Stream", "Event", "stream", "current_stream", "default_stream",
})


def old_stack(qualified: str) -> bool:
    if qualified in NATIVE or any(qualified.startswith(n + ".__") for n in NATIVE):
        return False  # the plugin module itself and its module attributes (`torch_neuronx.__version__`)
    if any(qualified == n or qualified.startswith(n + ".") for n in NATIVE_SUBMODULES):
        return False
    if any(qualified.startswith(n + ".") and qualified[len(n) + 1:].split(".")[0] in NATIVE_DEVICE_API
           for n in NATIVE):
        return False  # `torch_neuronx.device_count()`: TorchNeuron's own
    return any(qualified == p or qualified.startswith(p + ".") for p in OLD_STACK)


#: other libraries' torch-xla integrations (they set up torch_xla's process group and device): prefix -> marker
XLA_INTEGRATIONS = {
    "ray.train.torch.xla": "Replace `{name}`, Ray's torch-xla setup: use ray.train.torch.TorchConfig with the neuron backend.",
}
#: what runs a program or sets the environment it runs in (a venv's path in its arguments is used, not named)
_RUNNERS = ("subprocess.", "os.system", "os.popen", "os.exec", "os.spawn", "os.putenv", "os.environ.")


def _runs_or_sets(ctx: PythonContext) -> bool:
    """Whether the string being visited is an argument of a call that runs a program (`subprocess.run([...])`,
    `os.system(...)`) or sets the environment (`os.environ.update`), or the value of `os.environ[...] = ...`:
    a help text or a prompt that names a path does not use it."""
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.Call):
            qual = ctx.qualname(node.func) or ""
            if qual.startswith(_RUNNERS):
                return True
        elif isinstance(node, (cst.Assign, cst.AugAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            return any((ctx.qualname(t.value) if isinstance(t, cst.Subscript) else None) == "os.environ"
                       for t in targets)
        elif isinstance(node, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
            return False
    return False


#: an import line of the old stack, in the text of a string that holds a program
_OLD_IMPORT_LINE = re.compile(r"^[ \t]*(?:import|from)[ \t]+(?:torch_neuron(?!x)|torch_xla|optimum\.neuron|"
                              r"transformers_neuronx|neuronx_distributed|libneuronxla)\b", re.M)
#: torch_neuronx (the TorchNeuron plugin too) imported for the XLA era's traced artifacts
_TRACE_PROGRAM = re.compile(r"^[ \t]*(?:import|from)[ \t]+torch_neuronx\b(?s:.*)(?:torch_neuronx\.trace|torch\.jit\.load)",
                            re.M)
SHEBANG_MARKER = ("Run this script with a TorchNeuron (torch-neuronx 2.13+) Python: its #! line names an XLA-era "
                  "Deep Learning AMI venv.")
STRING_CODE_MARKER = "Migrate the Python code in this string by hand: code inside strings is not rewritten."
#: a unit of the Inf1 stack (its TorchScript loads read torch-neuron artifacts)
_INF1_UNIT = re.compile(r"\bimport torch_neuron\b(?!x)|^\s*import torch\.neuron[ \t]*(?:#.*)?$|torch\.neuron\.trace\b", re.M)
#: what torch-neuron (Inf1) put on torch.neuron; the native torch.neuron (is_available, device_count...) stays
INF1_API = frozenset({"torch.neuron.trace", "torch.neuron.DataParallel", "torch.neuron.analyze_model",
                      "torch_neuron.trace", "torch_neuron.DataParallel", "torch_neuron.analyze_model"})
INF1_TRACES = frozenset({"torch.neuron.trace", "torch_neuron.trace"})
INF1_MARKER = "Replace `{name}`, torch-neuron's Inf1 API: compile with torch.compile(model.to(\"neuron\"), backend=\"neuron\")."
INF1_SHORT = "Replace `{name}` (Inf1): use torch.compile(model.to(\"neuron\"), backend=\"neuron\")."
#: `import torch_neuron` registered the Inf1 API on torch.neuron: it stays while those calls do
INF1_IMPORT_MARKER = "Remove this import once the torch-neuron (Inf1) calls below are ported."
#: a torch.neuron.trace result saved, and a TorchScript load in a unit of the Inf1 stack
INF1_SAVE_MARKER = "Save the weights instead (save_pretrained or a state_dict): torch-neuron artifacts do not load on TorchNeuron."
INF1_LOAD_MARKER = "Load the model's weights and torch.compile it instead: this reads a torch-neuron (Inf1) artifact."
#: a torch.load in a unit that saves torch-neuron artifacts: it may read one back (or a plain checkpoint)
INF1_MAYBE_LOAD_MARKER = "If this reads a saved torch-neuron (Inf1) model, load its weights and torch.compile it instead."


XLA_STRING_MARKER = 'Use "neuron" here if this "xla" names a device: TorchNeuron has no xla device.'
#: a name compared with "xla" (`requested == "xla"`, `backend != 'xla'`)
_XLA_KEY_COMPARE = re.compile(r"""(?<![.\w])([A-Za-z_][\w.]*)\s*[!=]=\s*["']xla["']""")
_XLA_DEVICE = re.compile(r"xla(?::\d+)?")
#: the names a device string goes by
_DEVICE_NAME = re.compile(r"device|accelerator|backend|platform", re.I)

#: the first torch_xla import of a module written for other XLA devices (codemods.common.accelerators)
OTHER_XLA_MARKER = (f"{KEEPS_OLD_STACK}torch_xla code for TPUs and add a neuron path beside it (torch.device(\"neuron\")), or "
                    "port it by hand.")

#: an old-stack import in a ``try`` that only tolerates its absence (``except ImportError: pass``)
GATE_MARKER = "Replace or remove this old-stack import: TorchNeuron lacks it, so the rest of the try body never runs."

#: the advice for transformers-neuronx / NxD Inference model classes, and for their functions
MODEL_CLASS_ADVICE = "Replace `{name}` with its Transformers class on \"neuron\" (DistributedConfig under torchrun if sharded)."
HELPER_ADVICE = "Replace `{name}`, a helper of the old inference stack, with Transformers or plain torch code."

#: NxD Inference's test, accuracy and benchmark helpers: a module that uses them is an NxDI test or validation
#: script, whose every NxDI name (config, model class, adapter, helper) is one program to port, not names to swap
NXDI = "neuronx_distributed_inference"
NXDI_TESTING = (f"{NXDI}.utils.testing", f"{NXDI}.utils.accuracy", f"{NXDI}.utils.benchmark")
NXDI_PROGRAM_MARKER = ("Port this NxD Inference test script to Transformers on \"neuron\" by hand: NxDI has no TorchNeuron "
                       "form.")

#: (package prefixes, marker) for what is left of the old stack; ``{name}`` is the use as written
ADVICE = (
    (("optimum.neuron.utils.ecr",),
     "Replace `{name}` by the URI of a TorchNeuron serving image: optimum-neuron's ecr helper names its old containers."),
    (("optimum.neuron",), "Replace `{name}` with its Transformers/TRL/Diffusers equivalent, or remove it."),
    (("optimum.exporters.neuron",),
     "Remove `{name}`, optimum-neuron's exporter: compare the compiled model with torch.testing.assert_close."),
    (("torch_neuronx.xla_impl.ops.nki_jit", "torch_neuronx.nki_jit"),
     "Replace `{name}` with `nki.jit` from the `nki` package: TorchNeuron calls NKI kernels directly."),
    (("torch_xla.utils.serialization.load",),
     "Convert these xser checkpoints once where torch_xla is installed: torch.load cannot read the format."),
    (("torch_xla.utils.serialization",), "Replace `{name}` by torch.save or safetensors: TorchNeuron writes no xser files."),
    (("neuronperf",), "Replace `{name}` by timing the compiled model in a loop: neuronperf benchmarks Neuron TorchScript files."),
    (("torch_xla.core.xla_model.xla_device_hw", "torch_xla.core.xla_model.xla_real_devices",
      "torch_xla.runtime.device_type"),
     "Replace `{name}` by a Neuron test: hasattr(torch, \"neuron\") and torch.neuron.is_available()."),
    (("torch_neuronx.xla_impl.trace", "torch_neuronx.trace"),
     "Replace `{name}` (a Neuron trace) with torch.compile(model.to(\"neuron\").eval(), backend=\"neuron\")."),
    (("torch_xla", "torch_neuronx", "torch_neuron"), "Replace `{name}` with its torch or torch.distributed equivalent."),
    (("neuronxcc.nki.kernels", "neuronxcc.nki._private_kernels"),
     "Copy the `{name}` kernel's source from nki-samples into the project and port it to `@nki.jit`."),
    (("neuronxcc.nki",), "`{name}` is from the old `neuronxcc.nki`: import it from `nki` (neuronxcc.nki.X is nki.X), then port the kernel."),
    (("neuronx_distributed_inference.models.diffusers",),
     "Replace `{name}`: load the pipeline with its Diffusers class and move it with .to(\"neuron\")."),
    (NXDI_TESTING,
     "Replace `{name}` (NxDI test code): run the module on \"neuron\" and compare with torch.testing.assert_close."),
    (("neuronx_distributed_inference.utils.hf_adapter.HuggingFaceGenerationAdapter",
      "transformers_neuronx.generation_utils.HuggingFaceGenerationModelAdapter"),
     "Call generate() on the Transformers model itself instead of wrapping it in `{name}`."),
    (("transformers_neuronx.config.GenerationConfig",),
     "Replace `{name}` with a transformers.GenerationConfig (do_sample, top_k, top_p, temperature) for generate()."),
    (("transformers_neuronx.config", "transformers_neuronx.constants"),
     "Map what `{name}` sets to Transformers options (from_pretrained, generate), then delete it."),
    (("neuronx_distributed_inference.modules.generation.sampling",),
     "Replace `{name}`: pass do_sample, top_k, top_p and temperature to generate() or a GenerationConfig."),
    (("neuronx_distributed_inference.models.config", "neuronx_distributed_inference.utils.hf_adapter"),
     "Replace `{name}`: configure the model with its Transformers config (AutoConfig) and a GenerationConfig."),
    (("neuronx_distributed_inference.modules.checkpoint",),
     "Read the checkpoint with safetensors.torch.load_file instead of `{name}` (NxD Inference is not on TorchNeuron)."),
    (("transformers_neuronx", "neuronx_distributed_inference"), MODEL_CLASS_ADVICE),
    (("neuronx_distributed.quantization", "neuronx_distributed.experimental.quantization"),
     "Copy `{name}` into the project from neuronx-distributed (not on TorchNeuron), or drop its use."),
    ((), "Replace `{name}` with DTensor, DistributedConfig or torch.distributed code."),
)


def _holds_trace(expr: cst.BaseExpression, traced: set[tuple[int, str]], ctx: PythonContext) -> bool:
    """Whether ``expr`` is a name (of this scope) or an attribute (``self.m``) a torch.neuron.trace result was
    assigned to."""
    code = ctx.module.code_for_node(expr)
    return bool({(ctx.scope_id, code), (0, code)} & traced)


class OldStackLeftovers(PythonRule):
    id = "NM900"
    title = "Old-stack import or name with no automatic native replacement"
    fix = "manual"
    triggers = ("optimum.neuron", "optimum import", "torch_xla", "neuronperf", "torch_neuron", "transformers_neuronx", "neuronx_distributed",
                "libneuronxla", "neuronxcc", "optimum.commands", "torch.neuron.trace", "torch.neuron.DataParallel",
                "torch.neuron.analyze_model", "optimum.exporters.neuron", "train.torch.xla", "import torch.neuron",
                "/opt/aws_neuron")  # (a venv in a string or the #! line)
    why = """
        optimum-neuron, torch-xla, torch-neuronx (XLA), transformers-neuronx and
        neuronx-distributed are not part of the TorchNeuron stack. Every import of them that no
        rule rewrites is flagged, so that nothing of the old stack is left behind silently and
        `--check` keeps failing until it is gone.
    """
    before = """
        from optimum.neuron.utils.instance import current_instance_type
    """
    after = """
        # TODO(neuron-migrate NM900): Replace `current_instance_type` with its Transformers/TRL/Diffusers equivalent, or remove it.
        from optimum.neuron.utils.instance import current_instance_type
    """
    caveats = """
        Names owned by a specific rule, and names of the rename table, are not flagged here.
    """
    markers = ((XLA_STRING_MARKER, """An "xla" string left where no rule could follow it as a device (passed to a
        function, a parameter default, a dict value, a dataclass field, under a device's name): torch.device("xla")
        fails on TorchNeuron, whose device is "neuron". Strings compared, printed or under another name are left
        alone."""),
               (GATE_MARKER, """A `try:` whose handler only passes, logs or re-raises keeps its imports (they decide
        whether the body runs); the old-stack package is not installed on TorchNeuron, so the import raises and every
        statement after it in the try body (often the Neuron set-up itself) is skipped silently."""),
               (OTHER_XLA_MARKER, """The module names Neuron nowhere and is written for Google TPUs (their wheels or
        runtime settings, a device named "tpu"), or uses torch_xla as one optional backend beside CUDA/MPS: its
        torch_xla code serves other XLA devices, so the torch-xla rules leave it alone. Add a TorchNeuron path
        (torch.neuron.is_available(), torch.device("neuron")) beside it, or port it by hand if it was Neuron code."""),
               (NXDI_PROGRAM_MARKER, """The module uses NxD Inference's test, accuracy or benchmark helpers: it
        compiles an NxDI model or block, runs it and checks it against a reference, and each of its NxDI names
        (NeuronConfig, the Neuron model class, the generation adapter, the helpers) belongs to that one program.
        With TorchNeuron the model is the Transformers one (from_pretrained with device_map="neuron", or
        DistributedConfig under torchrun where it was sharded), generate() runs it, and
        torch.testing.assert_close compares it with the CPU reference. The marker's long form lists what each
        name becomes."""),
               (HELPER_ADVICE, """A function of transformers-neuronx or NxD Inference (a checkpoint, sharding or
        compile helper): neither package is part of TorchNeuron, and Transformers' own loading, generation and
        DistributedConfig sharding take their place, or plain torch code does."""),
               (INF1_MARKER, """torch-neuron compiled models for Inferentia 1 (Inf1) and registered trace, DataParallel
        and analyze_model on torch.neuron when `import torch_neuron` ran; on TorchNeuron torch.neuron is the native
        device module, which has none of them (AttributeError), and Inf1 devices are not supported: compile the
        model for the neuron device with torch.compile instead."""),
               *((m, """Ray Train's torch-xla backend (TorchXLAConfig and its backend classes) initialises torch_xla's
        runtime and an "xla" process group on each worker; TorchNeuron has neither. Ray's plain TorchConfig sets up
        torch.distributed on each worker: give it the backend TorchNeuron documents for init_process_group
        ("neuron") and move the model to the "neuron" device in the training function.""")
                 for m in XLA_INTEGRATIONS.values()),
               (SHEBANG_MARKER, """The script's first line runs it with the python of a Neuron Deep Learning
        AMI virtual environment that has the XLA-era stack (`#!/opt/aws_neuronx_venv_pytorch_2_9_nxd_inference/bin/
        python3`); the migrated code needs a TorchNeuron (torch-neuronx 2.13+) environment."""),
               (VENV_MARKER, """A string names a virtual environment of the Neuron Deep Learning AMI that has the
        XLA-era stack (`/opt/aws_neuronx_venv_pytorch_2_9_nxd_inference`): a PATH set to its bin folder, a
        subprocess run with its python. The migrated code needs a TorchNeuron (torch-neuronx 2.13+)
        environment; NM528 says the same of shell scripts."""),
               (STRING_CODE_MARKER, """A triple-quoted string holds a Python program that imports the old stack (an
        endpoint's inference.py or a worker script that a notebook or a launcher writes out): the rules rewrite the
        code of the files they read, not code inside strings. Migrate it by hand, or write it out as a file of
        the project and run the migration on that file."""),
               (INF1_IMPORT_MARKER, """`import torch_neuron` is what registered trace, DataParallel and analyze_model on
        torch.neuron: while the calls marked below are not ported, removing it turns each into an AttributeError
        before a person reaches it. Once they compile with torch.compile on the neuron device, the import goes."""),
               (INF1_SAVE_MARKER, """A torch.neuron.trace result is a TorchScript module holding Inf1 NEFFs; TorchNeuron
        neither runs nor loads it. Save what the model is built from instead (save_pretrained for a Transformers
        model, torch.save(model.state_dict(), path) otherwise) and compile again after loading."""),
               (INF1_LOAD_MARKER, """In a unit of the Inf1 stack a torch.jit.load reads what torch.neuron.trace saved
        (a TorchScript module with Inf1 NEFFs inside), which TorchNeuron cannot run: rebuild the model, load its
        weights (from_pretrained, or load_state_dict of what the migrated save writes) and torch.compile it with
        backend="neuron")."""),
               (INF1_MAYBE_LOAD_MARKER, """This unit saves torch.neuron.trace results (TorchScript modules with Inf1 NEFFs
        inside) and torch.load can read such a file back, which TorchNeuron cannot run: where it does, rebuild the
        model, load its weights and torch.compile it with backend="neuron"."""),) + tuple(zip((text for _, text in ADVICE), (
        """optimum.neuron.utils.ecr.image_uri looked up the Deep Learning Containers that optimum-neuron published
        (its TGI and vLLM images), built on the XLA-era Neuron SDK; a deployment of the migrated model uses a
        TorchNeuron serving image (Neuron SDK 2.33+), given as its URI (sagemaker.image_uris.retrieve, or the
        repository of the image the project builds).""",
        """optimum-neuron is not part of TorchNeuron: Hugging Face's Neuron guidance is to use Transformers,
        TRL, Diffusers, PEFT and Accelerate directly, with device_map="neuron" and DistributedConfig
        under torchrun. A utility with no counterpart (instance type, cache helpers) usually goes.""",
        """optimum-neuron's exporter (optimum.exporters.neuron) compiled a model ahead of time into a Neuron
        artifact and checked its outputs against the CPU model; TorchNeuron compiles at the first call
        (torch.compile(backend="neuron")), so there is nothing to export: run the model on "neuron" and compare
        its outputs with the CPU reference with torch.testing.assert_close.""",
        """torch-neuronx's XLA-era `nki_jit` wrapped an NKI kernel for the XLA graph; TorchNeuron runs kernels
        decorated with `@nki.jit` (the standalone `nki` package) on neuron tensors directly, in eager mode or
        under torch.compile.""",
        """torch_xla.utils.serialization (xser) pickles a tree of TensorReference placeholders and writes each
        tensor to `<path>.tensors/tensor_N.pt`: `torch.load(path)` cannot rebuild it without torch_xla. Read
        legacy checkpoints once where torch_xla is installed (a CPU install is enough) and save them with
        torch.save or safetensors; new checkpoints need no xser.""",
        """xser wrote checkpoints for XLA tensors, one file per tensor beside a pickled reference tree; TorchNeuron
        tensors save with torch.save, safetensors or torch.distributed.checkpoint (DCP) for sharded states.""",
        """neuronperf, the Neuron SDK's benchmarking package, loads a compiled TorchScript/NEFF file (torch.jit.save of
        a traced model) in worker processes; with TorchNeuron there is no such file (the migrated save writes
        weights, the model compiles at run time), so time the compiled model directly: warm it up, then loop
        over calls with time.perf_counter(), reading the outputs back (.cpu()) before stopping the clock.""",
        """torch-xla's device-kind queries told a Neuron core from a TPU or a GPU behind the one "xla" device; on
        TorchNeuron the accelerator is its own device type, so the test for Neuron is whether torch-neuronx is there
        and a core is visible (`torch.neuron` exists only where torch-neuronx is installed).""",
        """torch-neuronx's XLA-era trace compiled a model ahead of time into a TorchScript module for the XLA
        device; TorchNeuron compiles at the first call with torch.compile(model.to("neuron").eval(),
        backend="neuron", dynamic=False) (NM410 rewrites a trace it can follow; this one it could not: an
        import it cannot tell, such as one of two branches).""",
        """torch-xla is not part of TorchNeuron: the neuron device runs eagerly (torch.compile(backend="neuron")
        for graphs) with plain torch.distributed, so XLA-era helpers (mark_step, rendezvous, rng state,
        metrics) have a native torch or torch.distributed equivalent, or none and go.""",
        """neuronxcc.nki.kernels shipped ready-made kernels (attention, vision, normalization) inside the compiler
        package; the standalone `nki` package has the language (nki.language, nki.isa), not those kernels: their
        source is in the nki-samples repository, to copy and port to the `nki` API (a kernel returns its output
        instead of filling one it is given).""",
        """`neuronxcc.nki` is the NKI namespace of the XLA-era compiler package; NKI kernels called from
        TorchNeuron are written against the standalone `nki` package (`import nki`, `import nki.language as nl`,
        `@nki.jit`), whose API changed too (loads and stores are DMA copies in nki.isa, index grids are
        slices: see the NKI migration guide), so the kernel bodies are ported as well as the imports.""",
        """NxD Inference's diffusion applications (Flux and its backbone, text-encoder and VAE configs) compiled
        the pipeline's parts ahead of time; with TorchNeuron Diffusers loads the pipeline (FluxPipeline,
        StableDiffusionPipeline...) and runs it on the neuron device, its denoiser compiled with
        compile_repeated_blocks(backend="neuron"), tensor-parallel through parallel_config where it is large.""",
        """NxD Inference's test helpers (build_module, validate_accuracy, benchmark_sampling) compiled a block
        to a NEFF and compared it with a CPU reference; with TorchNeuron the block runs on the neuron device
        (eagerly or under torch.compile), and torch.testing.assert_close compares it with the reference.""",
        """HuggingFaceGenerationAdapter (transformers-neuronx's HuggingFaceGenerationModelAdapter) gave a compiled
        model Transformers' generate(); a Transformers model loaded with device_map="neuron" has generate() itself.""",
        """transformers-neuronx's GenerationConfig held the sampling settings of its on-device sampler; a
        transformers.GenerationConfig with the same do_sample/top_k/top_p/temperature, passed to generate() (or
        set as model.generation_config), does the same.""",
        """transformers-neuronx's NeuronConfig (and its constants: GQA sharding, layouts, quantization and
        continuous-batching configs) set compile-time options of the Neuron model; the Transformers model takes
        what has an equivalent as from_pretrained or generate options (dtype, quantization_config, a static cache),
        and the rest (GQA sharding, on-device sampling) has none: once mapped, the config and its import go.""",
        """NxD Inference's sampling parameters (per-row top_k/top_p/temperature tensors for on-device sampling)
        have no per-row equivalent in Transformers: generate() takes one do_sample/top_k/top_p/temperature.""",
        """NxD Inference's NeuronConfig/InferenceConfig held the compile-time shapes (batch size, sequence
        length, tp_degree) and the Transformers config it loaded; with TorchNeuron the model's own
        Transformers config is used, generation settings go into a GenerationConfig (a static cache with
        max_cache_len), and tensor parallelism into DistributedConfig under torchrun.""",
        """NxD Inference's checkpoint reader returned the checkpoint's tensors by name; safetensors.torch.load_file
        reads a .safetensors file the same way (one call per shard listed in model.safetensors.index.json), or
        the model's from_pretrained(...).state_dict() where the Transformers keys are wanted.""",
        """transformers-neuronx and NxD Inference are not part of TorchNeuron: Transformers loads the model with
        device_map="neuron" (one device) or, sharded over several (the old tp_degree), with
        distributed_config=DistributedConfig(tp_size=N) under torchrun (the two do not combine), and generates
        with a static KV cache; compiled artifacts are not reused.""",
        """neuronx-distributed's quantization helpers (microscaling, int8 layers) are plain torch code over
        its parallel layers; the package is not installed on TorchNeuron, so a test or script that uses them
        needs its own copy of the helpers it calls, or goes.""",
        """neuronx-distributed is not part of TorchNeuron: parallelism is DTensor/DeviceMesh (tensor-parallel
        plans, FSDP2) with torch.distributed under torchrun, or DistributedConfig for Transformers models.""",
    )))

    def handlers(self):
        return {cst.ImportAlias: self._on_alias, cst.ImportStar: self._on_star, cst.Attribute: self._on_attribute,
                cst.SimpleString: self._on_string, cst.Assign: self._on_assign, cst.Call: self._on_call}

    # ---- the Inf1 artifact flow: a torch.neuron.trace result saved, a TorchScript file loaded again
    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """``m = torch.neuron.trace(...)``: ``m`` holds a torch-neuron artifact in this scope."""
        value = node.value
        if isinstance(value, cst.Call) and ctx.qualname(value.func) in INF1_TRACES:
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    ctx.local_state().setdefault("inf1_traced", set()).add((ctx.scope_id, t.target.value))
                elif isinstance(t.target, cst.Attribute):  # `self.model_neuron = torch.neuron.trace(...)`: any method
                    ctx.local_state().setdefault("inf1_traced", set()).add((0, ctx.module.code_for_node(t.target)))

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        traced = ctx.local_state().get("inf1_traced", set())
        qual = ctx.qualname(func)
        if (isinstance(func, cst.Attribute) and func.attr.value == "save"
                and isinstance(func.value, (cst.Name, cst.Attribute)) and _holds_trace(func.value, traced, ctx)) or (
                qual == "torch.jit.save" and node.args and _holds_trace(node.args[0].value, traced, ctx)):
            ctx.marker(node, INF1_SAVE_MARKER)
            ctx.local_state()["inf1_saved"] = True
        elif qual == "torch.jit.load" and _INF1_UNIT.search(ctx.source) and "torch_neuronx" not in ctx.source:
            ctx.marker(node, INF1_LOAD_MARKER)  # (torch_neuronx's artifacts are NM410's)
            ctx.local_state()["inf1_used"] = True  # (the import registers the ops the artifact needs: kept)
        elif qual == "torch.load" and ctx.local_state().get("inf1_saved") and "torch_neuronx" not in ctx.source:
            ctx.marker(node, INF1_MAYBE_LOAD_MARKER)

    @staticmethod
    def _holds_code(node: cst.SimpleString, ctx: PythonContext) -> bool:
        """A triple-quoted string, not a docstring, holding a Python program that imports the old stack (an
        endpoint's inference.py written out by a notebook): the rules do not rewrite code inside strings."""
        if node.quote not in ('"""', "'''") or isinstance(ctx.parent, cst.Expr):
            return False
        text = node.evaluated_value
        if not isinstance(text, str) or not (_OLD_IMPORT_LINE.search(text) or _TRACE_PROGRAM.search(text)):
            return False
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError:
            return False
        return True

    def _on_string(self, node: cst.SimpleString, ctx: PythonContext) -> None:
        """An ``"xla"`` device string (``"xla:1"``) held under a device's name (``device = "xla" if ... else
        None``, a parameter default ``device="xla"``, a field ``device: str = "xla"``, ``{"device": "xla"}``,
        ``f(device="xla")``): where no rule rewrote it, finish() marks it. Compared, printed or under another
        name (a tag, a mode), it is not known to be a device."""
        if self._holds_code(node, ctx):
            ctx.marker(node, STRING_CODE_MARKER)
            return
        if isinstance(node.evaluated_value, str) and xla_era_venv(node.evaluated_value) and _runs_or_sets(ctx):
            # `os.environ["PATH"] = "/opt/aws_neuronx_venv_pytorch_2_9_nxd_inference/bin:..."`, a subprocess that
            # runs its python: the shell rules' NM528 marks it in scripts, this in Python
            ctx.marker(node, VENV_MARKER)
            return
        if not _XLA_DEVICE.fullmatch(node.value[1:-1] if len(node.value) > 1 and node.value[0] in "\"'" else ""):
            return
        child: cst.CSTNode = node
        for outer in reversed(ctx.stack[:-1]):
            name = None
            if isinstance(outer, (cst.IfExp, cst.BooleanOperation, cst.Element, cst.List, cst.Tuple)):
                child = outer
                continue
            if isinstance(outer, cst.Param) and outer.default is child:
                name = outer.name.value
            elif isinstance(outer, cst.Arg) and outer.keyword is not None and outer.value is child:
                name = outer.keyword.value
            elif isinstance(outer, cst.DictElement) and outer.value is child:
                name = outer.key.value[1:-1] if isinstance(outer.key, cst.SimpleString) else None
            elif isinstance(outer, (cst.Assign, cst.AnnAssign)) and outer.value is child:
                targets = [t.target for t in outer.targets] if isinstance(outer, cst.Assign) else [outer.target]
                name = " ".join(t.value if isinstance(t, cst.Name) else t.attr.value if isinstance(t, cst.Attribute)
                                else "" for t in targets)
            if name is not None and _DEVICE_NAME.search(name):
                ctx.local_state().setdefault("xla", []).append((node, tuple(ctx.stack[:-1])))
            return

    @classmethod
    def _detail(cls, qual: str, written: str) -> str:
        """The long form of a marker: the qualified name, then why (the rule's ``markers``)."""
        return f"{qual} has no automatic native replacement. {cls.marker_detail(_advice(qual, written))}"

    def _covered(self, ctx: PythonContext, qualified: str) -> bool:
        """A table rename or a rule that owns the name (or a prefix of it) handles it."""
        parts = qualified.split(".")
        table = load_table()
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in table or ctx.owner(prefix) is not None:
                return True
        return False

    def _on_alias(self, node: cst.ImportAlias, ctx: PythonContext) -> None:
        stmt = ctx.parent
        if isinstance(stmt, cst.ImportFrom):
            if stmt.relative or stmt.module is None:
                return
            qual = f"{_dotted(stmt.module)}.{_dotted(node.name)}"
        else:
            qual = _dotted(node.name)
        integration = next((m for p, m in XLA_INTEGRATIONS.items() if qual == p or qual.startswith(p + ".")), None)
        if integration is not None:
            ctx.marker(node, integration.format(name=_dotted(node.name)))
            return
        if qual == "torch.neuron" and isinstance(stmt, cst.Import) and node.asname is None:
            # `import torch.neuron`: on the Inf1 stack it registered the ops its TorchScript artifacts run
            ctx.local_state().setdefault("inf1_imports", []).append(node)
            return
        if not old_stack(qual) and not any(p.startswith(qual + ".") for p in OLD_STACK):
            return
        local = (
            node.asname.name.value
            if node.asname is not None and isinstance(node.asname.name, cst.Name)
            else _dotted(node.name).split(".")[0] if isinstance(stmt, cst.Import) else _dotted(node.name)
        )
        line = next((i for i in range(len(ctx.stack) - 1, -1, -1) if isinstance(ctx.stack[i], cst.SimpleStatementLine)),
                    None)
        gate = import_gate(ctx.stack[:line]) if line is not None else None
        if gate is not None and falls_back(gate):
            return  # an availability gate (`try: import torch_xla ... except ImportError: <other path>`): NM420's
        if qual.startswith("torch_xla") and serves_other_accelerators(ctx.source):
            # TPU code: the torch-xla rules leave it alone; one marker on its first torch_xla import says so
            if not ctx.local_state().get("tpu"):
                ctx.local_state()["tpu"] = True
                ctx.marker(node, OTHER_XLA_MARKER)
            return
        if old_stack(qual) and not self._covered(ctx, qual):
            # a try that only moves between two old-stack module paths is no gate: the plain advice applies
            in_try = gate is not None and not old_stack_alternative(gate)
            ctx.local_state().setdefault("aliases", []).append((node, qual, local, in_try, id(stmt)))

    def finish(self, ctx: PythonContext) -> None:
        """Mark the imports of old-stack names that the code uses other than as ``mod.name``.

        Decided from the references of the whole unit, once the pass is over: an import whose
        every reference roots an attribute chain (``xm.mark_step()``) leaves each use to be
        checked on its own, and an import nothing refers to is the self-check's (NM992). A bare
        reference (``if xm is not None:``, ``xm = None``, ``f(xm)``) is marked on this run: the
        rules rewrite ``xm.name`` uses away but leave bare ones, so a second run, seeing only
        those, would otherwise add the marker the first one did not."""
        first = ctx.source.split("\n", 1)[0]
        if first.startswith("#!") and xla_era_venv(first) and ctx.module.body:
            ctx.marker(ctx.module.body[0], SHEBANG_MARKER)  # (the script runs with that venv's python)
        if any(old_stack(b.qualified) for b in ctx.imports.all_bindings()) and not serves_other_accelerators(ctx.source):
            # the unit is migrated: an "xla" device string no rule could follow fails on TorchNeuron; where the
            # code compares a name that is not a device with "xla" (`if backend == "xla":`), "xla" is its own
            # key for a code path (NM420 marks that path's gate), not a device: changing it breaks the path
            keyed = any("device" not in m.group(1).lower() for m in _XLA_KEY_COMPARE.finditer(ctx.source))
            for node, stack in () if keyed else ctx.local_state().get("xla", ()):
                if not ctx.edited(node, stack) and not ctx.marked(node, stack):
                    ctx.marker(node, XLA_STRING_MARKER)
        # one marker per import statement and advice: the names of `from m import A, B, C` are listed in it
        grouped: dict[tuple[int, str], list[tuple[cst.ImportAlias, str, str]]] = {}
        if ctx.local_state().get("inf1_used"):
            for node in ctx.local_state().get("inf1_imports", ()):
                ctx.marker(node, INF1_IMPORT_MARKER)  # (the marked Inf1 code below still needs it)
        for node, qual, local, in_try, stmt in ctx.local_state().get("aliases", ()):
            if qual in ("torch_neuron", "torch.neuron") and ctx.local_state().get("inf1_used") \
                    and not ctx.references(local):
                # the import registered the Inf1 API the marked calls below still use: removing it now would
                # turn each of them into an AttributeError before it is ported
                ctx.marker(node, INF1_IMPORT_MARKER)
                continue
            if in_try:
                # the engine keeps a try's imports (they decide whether its body runs): on TorchNeuron this
                # one fails, and the rest of the try body is skipped without a word. One text whether uses are
                # left or not: the rules may rewrite them away, and a second run must find the same marker
                ctx.marker(node, GATE_MARKER, detail=self._detail(qual, local))
                continue
            refs = ctx.references(local)
            if qual.startswith(WHOLE):
                # replaced as a whole: one marker on its first import covers every use (and its other imports)
                if refs or "NM992" not in ctx.checks:
                    names = grouped.setdefault((-1, _template(qual)), [])
                    if all(n != local for _, _, n in names):
                        names.append((node, qual, local))
                continue
            if qual.startswith(MOVED):  # (the self-check does not remove them: they are no old-stack root)
                grouped.setdefault((stmt, _template(qual)), []).append((node, qual, local))
                continue
            bare = [n for n, anc in refs if not (anc and isinstance(anc[-1], cst.Attribute) and anc[-1].value is n)]
            if not bare and (refs or "NM992" in ctx.checks):
                continue  # only `mod.name` uses (each checked on its own), or none (NM992 removes it)
            grouped.setdefault((stmt, _template(qual)), []).append((node, qual, local))
        program = [names for (_stmt, _t), names in grouped.items() if names[0][1].startswith(NXDI)]
        if any(q.startswith(NXDI_TESTING) for names in program for _, q, _ in names):
            # an NxDI test script: one marker on its first NxDI import, the advice for each name in its long form
            for names in program:
                del grouped[next(k for k, v in grouped.items() if v is names)]
            found = [entry for names in program for entry in names]
            ctx.marker(found[0][0], NXDI_PROGRAM_MARKER,  # (the aliases are in the order of the source)
                       detail=" ".join(f"{n}: {_advice(q, n)}" for _, q, n in found))
        for names in grouped.values():
            node, qual, local = names[0]
            message = _advice(qual, local) if len(names) == 1 else _list_advice(qual, [n for _, _, n in names])
            ctx.marker(node, message, detail=" ".join(self._detail(q, n) for _, q, n in names))

    def _on_star(self, node: cst.ImportStar, ctx: PythonContext) -> None:
        stmt = ctx.parent
        if isinstance(stmt, cst.ImportFrom) and stmt.module is not None and old_stack(_dotted(stmt.module)):
            ctx.marker(node, f"replace `from {_dotted(stmt.module)} import *` with explicit imports of the native names")

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return  # only the whole chain
        if isinstance(parent, (cst.ImportFrom, cst.Import)):
            return  # `from a.b import c`: the module path is not a use
        qual = ctx.qualname(node)
        if qual is not None and qual in INF1_API:
            # `import torch_neuron` registered these on torch.neuron (Inferentia 1); on TorchNeuron torch.neuron is
            # the native device module, which has none of them
            ctx.marker(node, fitted(INF1_MARKER.format(name=qual), INF1_SHORT.format(name=qual)))
            ctx.local_state()["inf1_used"] = True
            return
        if qual is None or not old_stack(qual) or qual.startswith(WHOLE + MOVED):
            return  # (a package replaced as a whole, or moved: the marker on its import covers its uses)
        if self._covered(ctx, qual):
            return
        if qual.startswith("torch_xla") and serves_other_accelerators(ctx.source):
            return  # code for other XLA devices: the one marker on its import or gate says what to do
        written = cst.Module([]).code_for_node(node)
        ctx.marker(node, _advice(qual, written), detail=self._detail(qual, written))


def _dotted(node) -> str:
    from migrator.imports import dotted

    return dotted(node) or ""


def _template(qual: str) -> str:
    """The advice (a template of :data:`ADVICE`) for the package of ``qual``; a function (a lower-case name) of
    the old inference stack is no model class: it gets the helper advice."""
    if qual in INF1_API:
        return INF1_MARKER
    text = next(text for prefixes, text in ADVICE if not prefixes or qual.startswith(prefixes))
    last = qual.rsplit(".", 1)[-1]
    if text == MODEL_CLASS_ADVICE and last[:1].islower():
        return HELPER_ADVICE
    return text


def _listed(names: list[str]) -> str:
    """The names one import marker covers, each in backticks: "`A`, `B` and `C`" ("`A`, `B` and 3 more" past three)."""
    quoted = [f"`{n}`" for n in names]
    if len(names) > 3:
        return f"{', '.join(quoted[:2])} and {len(names) - 2} more"
    return f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def _list_advice(qual: str, names: list[str]) -> str:
    """The marker for several names of one import statement (same advice)."""
    text = _template(qual)
    listed = _listed(names)
    return fitted(text.replace("`{name}`", listed), text.replace("`{name}`", f"`{names[0]}` and {len(names) - 1} more"),
                  text.replace("`{name}`", "these names"))


def _advice(qual: str, written: str) -> str:
    """The marker for an old-stack name left in the code: one sentence naming the use as written."""
    text = _template(qual)
    last = qual.rsplit(".", 1)[-1]
    return fitted(text.format(name=written if len(written) <= 40 else last), text.format(name=last),
                  text.replace("`{name}`", "this name"))


RULES = (OldStackLeftovers,)
