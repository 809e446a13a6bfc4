"""The fault catalogue of ``neuron-migrate verify --against`` (issue 15 §4).

Each scenario is an ORIGINAL old-stack script (``<scenario>_original.py`` here), its migration (what
``neuron-migrate --write`` makes of it, computed by the test) and variants of the migration:

* faults: an edit that changes behaviour a user cares about; verify must exit 1 and the report must
  name what differed (``expect``: a text of the failing check's name or detail),
* correct variants: an edit that keeps the results (eager vs compiled, other logging); verify must
  exit 0.

A variant is ``(name, [(old, new), ...], expect)``: each ``old`` must occur exactly once in the
migrated script. Used by ``tests/verify_faults/test_catalogue.py`` (each scenario's original runs
once, its observations are reused through ``--original-cache``) and ``benchmarks/verify_faults.py``
(the catch table).

The custom-loop and data-loading scenarios are caught by what verify observes of a script's own loop:
the ``loss.backward()`` values, the optimizer steps and learning rates, checkpoints and printed output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LLAMA = ROOT / "tests" / "verify_fixtures" / "tiny-llama"
CLASSIFIER = ROOT / "tests" / "verify_fixtures" / "tiny-classifier"


@dataclass
class Variant:
    name: str
    edits: list[tuple[str, str]]
    expect: str | None = None          # None: a correct variant (exit 0)

    @property
    def fault(self) -> bool:
        return self.expect is not None


@dataclass
class Scenario:
    name: str
    args: list[str]
    variants: list[Variant] = field(default_factory=list)
    build: object = None                # build(tmp): models the scenario needs, made in tmp
    options: list[str] = field(default_factory=list)   # verify options of every variant (tolerances)
    libraries: tuple[str, ...] = ("torch", "transformers")  # the test is skipped without them

    @property
    def original(self) -> Path:
        return HERE / f"{self.name}_original.py"


GENERATION = Scenario("generation", [str(LLAMA)], [
    Variant("shorter generation", [("max_new_tokens=8", "max_new_tokens=6")], "generate[0]"),
    Variant("bf16 instead of fp32", [("dtype=torch.float32", "dtype=torch.bfloat16")], "generate[0]"),
    Variant("sampling instead of greedy",
            [("do_sample=False", "do_sample=True, top_k=20"), ("prompts = [", "torch.manual_seed(1)\nprompts = [")],
            "generate[0]"),
    Variant("repetition penalty added", [("do_sample=False,", "do_sample=False, repetition_penalty=1.5,")],
            "generate[0]"),
    Variant("other weights (lm_head scaled)",
            [("prompts = [", "with torch.no_grad():\n    model.lm_head.weight.mul_(1.5)\nprompts = [")],
            "scores"),
    Variant("other prompt", [("[1, 17, 33, 250, 7]", "[1, 17, 33, 250, 8]")], "generate[0]"),
    Variant("eager (no static cache compile)", [('model.generation_config.cache_implementation = "static"\n', "")]),
    Variant("more logging", [('    print("generated"', '    print("prompt", prompt)\n    print("generated"')]),
])

TRAINER = Scenario("trainer", [str(LLAMA)], [
    Variant("learning rate 1e-2", [("learning_rate=1e-3", "learning_rate=1e-2")], "losses"),
    Variant("three steps instead of four", [("max_steps=4", "max_steps=3")], "losses"),
    Variant("batch size 1", [("per_device_train_batch_size=2", "per_device_train_batch_size=1")], "losses"),
    Variant("gradient accumulation 2", [("max_steps=4,", "max_steps=4, gradient_accumulation_steps=2,")],
            "losses"),
    Variant("other seed", [("torch.manual_seed(0)", "torch.manual_seed(1)"), ("seed=0", "seed=1")], "losses"),
    Variant("other labels (shifted)", [('"labels": ids.clone()', '"labels": ids.roll(1)')], "losses"),
    Variant("eager (no torch_compile)", [("    torch_compile=True,\n", "")]),
    Variant("more logging", [("    disable_tqdm=True,", "    disable_tqdm=True, logging_first_step=True,")]),
])

def build_classifier(tmp: Path) -> None:
    """``tmp/classifier``: the committed tiny classifier's architecture and tokenizer with larger random
    weights (initializer_range 0.5): the committed one's scores hardly depend on the text (all about 0.5
    within 1e-5), so a changed input could not show."""
    code = (
        "import shutil, sys, torch\n"
        "from transformers import AutoConfig, AutoModelForSequenceClassification\n"
        "src, dst = sys.argv[1], sys.argv[2]\n"
        "config = AutoConfig.from_pretrained(src)\n"
        "config.initializer_range = 0.5\n"
        "torch.manual_seed(0)\n"
        "AutoModelForSequenceClassification.from_config(config).save_pretrained(dst)\n"
        "for name in ('tokenizer.json', 'tokenizer_config.json'):\n"
        "    shutil.copy(f'{src}/{name}', f'{dst}/{name}')\n")
    subprocess.run([sys.executable, "-c", code, str(CLASSIFIER), str(tmp / "classifier")], check=True,
                   capture_output=True, env=env(), timeout=300)


# the model is given by a path relative to the working directory: it resolves in each side's scratch one
ENCODER = Scenario("encoder", ["classifier"], build=build_classifier, variants=[
    Variant("raw scores (no softmax)", [("    truncation=True,\n", "    truncation=True,\n    function_to_apply=\"none\",\n")],
            "pipeline[0]"),
    Variant("labels swapped", [("texts = [", "classifier.model.config.id2label = {0: 'POSITIVE', 1: 'NEGATIVE'}\ntexts = [")],
            "pipeline[0]"),
    Variant("truncated to 4 tokens", [("max_length=128", "max_length=4")], "pipeline[0]"),
    Variant("other text", [("it rained", "it snowed")], "pipeline[0]"),
    Variant("batched calls", [("classifier(texts)", "classifier(texts, batch_size=2)")]),
    Variant("no padding to max_length", [('    padding="max_length",\n', "")]),
])

SFT = Scenario("sft", [str(LLAMA)], [
    Variant("learning rate 1e-2", [("learning_rate=1e-3", "learning_rate=1e-2")], "Trainer step losses"),
    Variant("max_length 16 instead of 32", [("max_length=32", "max_length=16")], "Trainer step losses"),
    Variant("two steps instead of three", [("max_steps=3", "max_steps=2")], "optimizer[0]"),
    Variant("other prompt template", [('f"Q: {q}\\nA: {a}"', 'f"Question: {q}\\nAnswer: {a}"')],
            "Trainer step losses"),
    Variant("packing", [("max_length=32,", "max_length=32, packing=True,")], "Trainer step losses"),
    Variant("eager (no torch_compile)", [("    torch_compile=True,\n", "")]),
    Variant("more logging", [("trainer.train()", "print('training')\ntrainer.train()")]),
])


def build_tiny_sd(tmp: Path) -> None:
    """``tmp/tiny-sd``: the tiny random Stable Diffusion pipeline of tests/verify_fixtures/make_tiny_sd.py."""
    subprocess.run([sys.executable, str(ROOT / "tests" / "verify_fixtures" / "make_tiny_sd.py"), str(tmp / "tiny-sd")],
                   check=True, capture_output=True, env=env(), timeout=300)


# the export's default auto_cast="matmul" (bf16 matmul operands, emulated on the original side) against
# the migration's float32 (the NM104 marker says so): images within 2e-2
DIFFUSION = Scenario("diffusion", ["tiny-sd"], build=build_tiny_sd, options=["--atol", "2e-2"], variants=[
    Variant("three denoising steps", [("num_inference_steps=2", "num_inference_steps=3")], "images"),
    Variant("guidance scale 5", [("guidance_scale=7.5", "guidance_scale=5.0")], "images"),
    Variant("other seed", [("torch.manual_seed(0)", "torch.manual_seed(1)")], "images"),
    Variant("other prompt", [("a watercolor of a lighthouse", "an oil painting of a lighthouse")], "images[1]"),
    Variant("32x32 images", [("height=64,", "height=32,"), ("width=64,", "width=32,")], "images"),
    Variant("bf16 pipeline", [("from_pretrained(sys.argv[1])", "from_pretrained(sys.argv[1], dtype=torch.bfloat16)")],
            "weights"),
    Variant("eager (denoiser not compiled)",
            [('pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)\n', "")]),
    Variant("more logging", [('    print("image", image.shape)', '    print("prompt", prompt)\n    print("image", image.shape)')]),
])

# the migration of custom_loop_original.py: xm.xla_device() → torch.device("neuron"), the MpDeviceLoader
# removed (each batch moved at the top of the loop), xm.optimizer_step → optimizer.step(), xm.save →
# torch.save on local rank 0
CUSTOM_LOOP = Scenario("custom_loop", [], libraries=("torch",), variants=[
    Variant("optimizer step skipped", [("    optimizer.step()\n", "")], "optimizer"),
    Variant("no zero_grad (gradients accumulate)", [("    optimizer.zero_grad()\n", "")], "backward"),
    Variant("learning rate 0.1 -> 0.05", [("lr=0.1,", "lr=0.05,")], "optimizer"),
    Variant("gradient accumulation 2",
            [("    optimizer.zero_grad()\n", ""),
             ("    optimizer.step()\n", "    if step % 2 == 1:\n        optimizer.step()\n        optimizer.zero_grad()\n")],
            "optimizer"),
    Variant("checkpoint not saved", [('os.environ.get("LOCAL_RANK", 0)) == 0', 'os.environ.get("LOCAL_RANK", 0)) == 1')],
            "ckpt.pt"),
    Variant("checkpoint saved elsewhere", [('"ckpt.pt"', '"model.pt"')], "ckpt.pt"),
    Variant("checkpoint of a fresh model", [("model.state_dict()), ", "Net().state_dict()), ")], "ckpt.pt"),
    Variant("optimizer state saved instead", [("model.state_dict()), ", "optimizer.state_dict()), ")], "ckpt.pt"),
    Variant("five steps instead of six", [("max_steps = 6", "max_steps = 5")], "backward"),
    Variant("batch size 4 -> 2", [("batch_size=4", "batch_size=2")], "backward"),
    Variant("flipped target", [("loss_fn(model(x), y)", "loss_fn(model(x), 2 - y)")], "backward"),
    Variant("printed loss post-processed (x100)",
            [('print(f"final loss: {loss.item():.4f}")', 'print(f"final loss: {100 * loss.item():.4f}")')],
            "printed output"),
    Variant("compiled (torch.compile, backend neuron)",
            [("model = Net().to(device)\n", 'model = Net().to(device)\nmodel = torch.compile(model, backend="neuron")\n')]),
    Variant("more logging (debug print, progress)",
            [('        print(f"step {step}', '        print("batch shape", tuple(x.shape))\n'
              '        print(f"progress {step + 1}/{max_steps}", end="\\r")\n        print(f"step {step}')]),
])


# the migration of data_loading_original.py: the ParallelLoader(...).per_device_loader(device) of the
# loop replaced by the DataLoader, each batch moved at the top of the loop
DATA_LOADING = Scenario("data_loading", [], libraries=("torch",), variants=[
    Variant("shuffled", [("shuffle=False", "shuffle=True")], "backward"),
    Variant("drop_last off (a partial batch more)", [("drop_last=True", "drop_last=False")], "backward"),
    Variant("first batch of each epoch dropped",
            [("    for x, y in loader:\n", "    batches = iter(loader)\n    next(batches)\n    for x, y in batches:\n")],
            "backward"),
    Variant("non-blocking copies",
            [("x, y = x.to(device), y.to(device)", "x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)")]),
])


SCENARIOS = {s.name: s for s in (GENERATION, TRAINER, ENCODER, SFT, DIFFUSION, CUSTOM_LOOP, DATA_LOADING)}


def env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def prepare(scenario: Scenario, tmp: Path) -> Path:
    """``tmp/original/<name>.py`` and its migration ``tmp/migrated/<name>.py`` (the CLI, --write);
    returns the migrated script."""
    for side in ("original", "migrated"):
        (tmp / side).mkdir(parents=True, exist_ok=True)
        shutil.copy(scenario.original, tmp / side / f"{scenario.name}.py")
    if scenario.build is not None:
        scenario.build(tmp)
    proc = subprocess.run([sys.executable, "-m", "migrator", "migrated", "--write", "--no-progress"],
                          capture_output=True, text=True, env=env(), cwd=str(tmp), timeout=300)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"migration failed: {proc.stdout}{proc.stderr}")
    return tmp / "migrated" / f"{scenario.name}.py"


def apply(text: str, variant: Variant) -> str:
    for old, new in variant.edits:
        if text.count(old) != 1:
            raise ValueError(f"variant {variant.name!r}: {old!r} occurs {text.count(old)} times in the migration")
        text = text.replace(old, new)
    return text


def run_variant(scenario: Scenario, variant: Variant, tmp: Path, *, fmt: str = "text") -> subprocess.CompletedProcess:
    """Write the variant of the migration to ``tmp/variants/<slug>/<name>.py`` and verify it against the
    original (observations of the original cached in ``tmp/cache``)."""
    migrated = tmp / "migrated" / f"{scenario.name}.py"
    slug = "".join(c if c.isalnum() else "_" for c in variant.name)
    folder = tmp / "variants" / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / migrated.name).write_text(apply(migrated.read_text(), variant))
    cmd = [sys.executable, "-m", "migrator", "verify", str((folder / migrated.name).relative_to(tmp)),
           "--against", f"original/{migrated.name}", "--original-cache", "cache", "--format", fmt,
           *scenario.options, "--", *scenario.args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=str(tmp), timeout=600)
