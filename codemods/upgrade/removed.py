"""Names the old releases exported and the targets removed or moved (NM608), read from the
generated upgrade data (``codemods.upgrade.data``): a name whose object lives on under another
module or name is imported from there; any other gets a marker naming what is gone and, where one
exists, the replacement."""

from __future__ import annotations

import libcst as cst

from codemods.upgrade.data import data
from migrator.rules import NameClash, PythonContext, PythonRule
from migrator.selfcheck.targetapi import api

#: names other NM6xx rules own (NM601: AdamW; NM606: send_example_telemetry)
OWNED = frozenset({"transformers.AdamW", "transformers.optimization.AdamW", "transformers.send_example_telemetry",
                   "transformers.utils.send_example_telemetry", "datasets.set_caching_enabled"})
#: the libraries whose modules the target API data holds whole (a name it lacks is not in the target)
TARGET_LIBRARIES = ("transformers", "diffusers", "trl", "peft", "accelerate")
#: replacement modules outside the target API data (stdlib; huggingface_hub: tests/test_upgrade_api.py imports them)
STDLIB_TARGETS = ("math.", "builtins.", "huggingface_hub.")

#: what to use instead, for removed names the data cannot map one to one: name -> (what to do, in a few
#: words for the marker; the background, for the finding's detail and `explain`)
HINTS = {
    "LlamaLinearScalingRotaryEmbedding": (
        "set config.rope_scaling for LlamaRotaryEmbedding",
        "the scaling variants were folded into LlamaRotaryEmbedding(config): set config.rope_scaling = "
        "{\"rope_type\": \"linear\", \"factor\": ...}"),
    "LlamaDynamicNTKScalingRotaryEmbedding": (
        "set config.rope_scaling for LlamaRotaryEmbedding",
        "the scaling variants were folded into LlamaRotaryEmbedding(config): set config.rope_scaling = "
        "{\"rope_type\": \"dynamic\", \"factor\": ...}"),
    "is_torch_tpu_available": (
        "drop the check: it is False on the neuron device",
        "it was renamed is_torch_xla_available (4.39); the migrated code runs on the native \"neuron\" device "
        "without torch-xla, where that is False"),
    "is_tpu_available": (
        "drop the check: it is False on the neuron device",
        "accelerate renamed it is_torch_xla_available; the migrated code runs on the native \"neuron\" device "
        "without torch-xla, where that is False"),
    "VisionRotaryEmbedding": (
        "keep the old class in the project",
        "5.23's Qwen2VLVisionRotaryEmbedding takes the config and returns (cos, sin) for position ids: no "
        "drop-in; keep the old class (dim, theta -> freqs) in the project"),
    "CrossAttention": ("use diffusers.models.attention_processor.Attention", ""),
    "HfFolder": (
        "use huggingface_hub.get_token(), login() or logout()",
        "get_token() reads the token, login(token=...) checks it online and then saves it (save_token), "
        "logout() deletes it (delete_token)"),
    "load_metric": (
        "use evaluate.load(name, config) (pip install evaluate)",
        "datasets 3.0 moved metrics to the `evaluate` library, which the migrated stack does not install "
        "(pip install evaluate): evaluate.load(name, config) loads the same metric from the Hub"),
    "list_metrics": ("use evaluate.list_evaluation_modules()", "the metrics moved to the `evaluate` library"),
    "inspect_metric": ("use evaluate.load(path) on the local metric", "the metrics moved to the `evaluate` library"),
    "Metric": ("use evaluate.Metric", "the metrics moved to the `evaluate` library"),
    "MetricInfo": ("use evaluate.MetricInfo", "the metrics moved to the `evaluate` library"),
    "list_datasets": (
        "use [d.id for d in huggingface_hub.list_datasets()]",
        "huggingface_hub.list_datasets() yields DatasetInfo objects"),
    "set_caching_enabled": ("use datasets.enable_caching() or disable_caching()", ""),
    "inspect_dataset": (
        "download its files with huggingface_hub.snapshot_download",
        "datasets 4.0 runs no loading script: download the dataset's files with "
        "huggingface_hub.snapshot_download(repo_id, repo_type=\"dataset\")"),
    "Repository": (
        "use HfApi().upload_folder() and snapshot_download()",
        "huggingface_hub 1.0 removed the git-based Repository: upload with HfApi().upload_folder(repo_id=..., "
        "folder_path=...), download with snapshot_download(repo_id)"),
    "cached_download": (
        "use hf_hub_download(repo_id, filename)", "the repository and file of the URL it downloaded"),
    "InferenceApi": ("use huggingface_hub.InferenceClient", ""),
    "BeamScorer": (
        "generate(num_beams=...) runs beam search itself", "transformers v5 removed the beam-scorer classes"),
    "BeamSearchScorer": (
        "generate(num_beams=...) runs beam search itself", "transformers v5 removed the beam-scorer classes"),
    "find_pruneable_heads_and_indices": (
        "copy the function into the project", "transformers v5 removed the head-pruning helpers"),
}
_TASK_TEMPLATE = ("rename and cast the columns with rename_column / cast_column",
                  "datasets 3.0 removed the task templates (and prepare_for_task)")
HINTS.update({f"datasets.{name}": _TASK_TEMPLATE for name in (
    "AudioClassification", "AutomaticSpeechRecognition", "ImageClassification", "LanguageModeling",
    "QuestionAnsweringExtractive", "Summarization", "TaskTemplate", "TextClassification")})


def _split(qual: str) -> tuple[str, str]:
    module, _, name = qual.rpartition(".")
    return module, name


def _usable(target: str) -> bool:
    if target.startswith(STDLIB_TARGETS):
        return True
    module, name = _split(target)
    return api().name_exists(module, name) is True


def lookup(qual: str | None) -> dict | None:
    """The upgrade entry of a removed name (None: not removed, owned elsewhere, or present in the target)."""
    if not qual or qual in OWNED or "." not in qual:
        return None
    module, name = _split(qual)
    entry = data().removed_name(module, name)
    exists = api().name_exists(module, name)
    if (entry is None and module.split(".", 1)[0] in TARGET_LIBRARIES and api().module_exists(module) is True
            and exists is False):
        # a name the target's module lacks that the upgrade data does not know (the generator probes the public
        # names of the modules it lists; a re-export, a private helper of the old release): gone all the same
        entry = {}
    if entry is None or exists is True:
        return None
    if entry.get("moved_to") and not _usable(entry["moved_to"]):
        entry.pop("moved_to")
    if not entry.get("moved_to") and name.endswith("FeatureExtractor"):
        # Transformers 4's vision feature extractors were their image processor under an old name (`class
        # ViTFeatureExtractor(ViTImageProcessor)`, a deprecation warning only): v5 keeps the image processor
        twin = f"{module}.{name[:-len('FeatureExtractor')]}ImageProcessor"
        if _usable(twin):
            entry = {**entry, "moved_to": twin}
    return entry


def _lib_version(module: str) -> str:
    root = module.split(".", 1)[0]
    v = data().target_versions.get(root)
    return f"{root} {v}" if v else root


def message(qual: str, entry: dict) -> str:
    """The marker of a removed name: one sentence saying what to use instead."""
    module, name = _split(qual)
    hint = HINTS.get(qual) or HINTS.get(name)
    return f"`{name}` is gone in {module.split('.', 1)[0]}: {hint[0] if hint else 'replace it by hand'}."


def detail(qual: str, entry: dict) -> str:
    """The long form of :func:`message`: the release that dropped the name, the last that had it, why."""
    module, name = _split(qual)
    last = entry.get("last")
    hint = HINTS.get(qual) or HINTS.get(name)
    why = f": {hint[1]}" if hint and hint[1] else ""
    return f"{qual} is gone in {_lib_version(module)}" + (f" (last in {last})" if last else "") + why


class RemovedNames(PythonRule):
    id = "NM608"
    title = "names the old Transformers/TRL/Diffusers/Accelerate/PEFT/hub/datasets exported and the targets removed"
    fix = "mixed"
    markers = (
        ("`{name}` is gone in {library}: {what to do}.",
         """The project's pinned release exported this name and the target release removed it, with no
         object to import instead: the marker says what replaces it; the finding's detail names the release
         that removed it, the last one that had it, and why."""),
        ("Use {target} here by hand: `{name}` is gone.",
         """The name moved to {target}, but importing it here would clash with a name the module already
         binds (the detail says which), so the use is left for a person to rewrite."""),
    )
    triggers = ("from transformers", "from diffusers", "from trl", "from accelerate", "from peft", "from datasets",
                "from huggingface_hub", "torch._six", "import transformers", "import diffusers")
    why = """
        Projects pinned the Transformers/Diffusers/TRL of their day; the migrated project runs on
        transformers 5.23, diffusers 0.42, trl 1.16. What the old releases exported and the new
        ones removed is generated from the libraries themselves (tools/gen_upgrade_api.py): a name
        whose object lives on elsewhere (an alias like `SampleDecoderOnlyOutput`, which had been
        `GenerateDecoderOnlyOutput` since 4.42, or a class moved to another module) is imported from
        there; any other removed name gets a marker naming the replacement where there is one. A
        vision `XFeatureExtractor` (Transformers 4: `class XFeatureExtractor(XImageProcessor)` with a
        deprecation warning) becomes the `XImageProcessor` the target still has.
    """
    before = """
        from transformers.generation import SampleDecoderOnlyOutput

        def wrap(sequences):
            return SampleDecoderOnlyOutput(sequences=sequences)
    """
    after = """
        from transformers.generation import GenerateDecoderOnlyOutput

        def wrap(sequences):
            return GenerateDecoderOnlyOutput(sequences=sequences)
    """
    caveats = """
        Only the modules the generator probes (the top-level packages, `transformers.generation`,
        `.utils`, `.trainer_utils`, `.optimization`, `.pytorch_utils`, the common `modeling_*`
        modules, `diffusers.models.*`, `accelerate.utils`, ...) and `torch._six` (removed in torch
        2.0: `inf`/`nan` come from `math`). A removed name with no one-to-one replacement (the
        Llama rotary-embedding scaling variants, `is_torch_tpu_available`, the beam scorers,
        `HfFolder`, `load_metric`) is left with a marker.
    """

    def handlers(self):
        return {cst.Name: self._on_use, cst.Attribute: self._on_use}

    def _in_import(self, ctx: PythonContext) -> bool:
        return any(isinstance(n, (cst.Import, cst.ImportFrom)) for n in ctx.stack)

    def _on_use(self, node: cst.Name | cst.Attribute, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(node, cst.Name) and (
                (isinstance(parent, cst.Attribute) and parent.attr is node)
                or (isinstance(parent, cst.Arg) and parent.keyword is node)
                or isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef))):
            return
        if ctx.imports.resolve(node) is None:
            return  # not a name an import binds (most are): no qualified name, nothing removed
        if isinstance(parent, cst.Attribute) and parent.value is node and lookup(ctx.qualname(parent)) is not None:
            return  # the longer dotted name is the removed one: handled at its Attribute
        if self._in_import(ctx) or ctx.is_ignored(node):
            return
        qual = ctx.qualname(node)
        entry = lookup(qual)
        if entry is None:
            return
        binding = ctx.imports.binding_of(node)
        target = entry.get("moved_to")
        state = ctx.local_state().setdefault(self.id, {"used": set(), "left": set(), "under": set()})
        if target is None:
            state["left"].add(qual)
            if isinstance(node, cst.Attribute):
                ctx.marker(node, message(qual, entry), detail=detail(qual, entry))
            return
        if isinstance(node, cst.Name) and binding is not None and binding.is_from and node.value == _split(target)[1]:
            return  # the same local name: only its import changes (finish)
        if target.startswith("builtins."):
            ctx.replace(node, cst.Name(_split(target)[1]))
        else:
            try:
                ctx.replace(node, ctx.name_for(target, anchor=binding, style="from" if binding is None or binding.is_from else "module"))
            except NameClash as exc:
                ctx.marker(node, f"Use {target} here by hand: `{_split(qual)[1]}` is gone.",
                           detail=f"{detail(qual, entry)}; the rewrite was not applied: {exc}")
                return
        state["used"].add(qual)
        state["under"].add(qual.rpartition(".")[0])
        ctx.finding(node, f"{qual} -> {target} (gone in {_lib_version(qual)})")

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state().get(self.id, {"used": set(), "left": set(), "under": set()})
        used = state["used"]
        for b in ctx.imports.all_bindings():
            if b.alias is None or not b.is_from or ctx.is_ignored(b.line):
                continue
            entry = lookup(b.qualified)
            if entry is None:
                continue
            target = entry.get("moved_to")
            if target is None:
                if b.qualified in state["under"] and b.qualified not in state["left"]:
                    continue  # every use was a moved attribute of it (HfFolder.get_token): the import goes
                ctx.marker(b.line, message(b.qualified, entry), detail=detail(b.qualified, entry))
                continue
            ctx.remove_import(b)
            module, name = _split(target)
            if b.qualified not in used and module != "builtins":
                ctx.add_import(module, name, b.local if b.local != name else None, anchor=b)
            ctx.finding(b.alias, f"{b.qualified} -> {target}")


RULES = (RemovedNames,)
