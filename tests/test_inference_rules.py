"""NM102 (pipeline), NM103 (traced models), NM104 (diffusion): emitted keywords exist in the
installed targets, and migrated scripts run and give the plain-Transformers results.

The runtime tests build a tiny BERT (hidden size 32, 2 layers, a WordPiece vocabulary written
here) in a temporary directory, migrate a small optimum-neuron script, map the ``neuron`` device
to ``cpu`` in the migrated text and run it in a subprocess with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

FIXTURES = Path(__file__).parent / "fixtures"
WORDS = "the a is great bad cheap inference makes compiling once and serving fast inferentia ! paris france of".split()


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _migrate(source: str, rules: RuleSet, kind: str = "python") -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", kind), rules, source.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes if result.status == "changed" else source.encode()
    return new.decode(), result.findings


# ---------------------------------------------------------------------- emitted keywords
def _calls(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _func_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute):
        inner = f.value
        base = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
        return f"{base}.{f.attr}"
    return getattr(f, "id", "")


def _from_pretrained_keywords() -> set[str]:
    from transformers import PreTrainedModel

    fn = PreTrainedModel.from_pretrained
    names = set(inspect.signature(fn).parameters)
    names |= set(re.findall(r'kwargs\.pop\("(\w+)"', inspect.getsource(fn)))
    return names


def test_nm103_keywords_exist_in_from_pretrained():
    from transformers import BertConfig

    accepted = _from_pretrained_keywords()
    config_attrs = set(BertConfig().to_dict()) | {"output_attentions", "output_hidden_states"}
    seen = set()
    for after in sorted((FIXTURES / "NM103").glob("*.after.py")):
        for call in _calls(after):
            name = _func_name(call)
            if name.endswith(".from_pretrained") and not name.startswith(("AutoTokenizer", "Neuron")):
                for kw in call.keywords:
                    if kw.arg is not None:
                        assert kw.arg in accepted or kw.arg in config_attrs, f"{after.name}: {name}({kw.arg}=)"
                        seen.add(kw.arg)
    assert {"dtype", "device_map"} <= seen


def test_nm103_sentence_transformer_keywords():
    from sentence_transformers import SentenceTransformer

    params = inspect.signature(SentenceTransformer.__init__).parameters
    for call in _calls(FIXTURES / "NM103" / "sentence_transformers.after.py"):
        if _func_name(call) == "SentenceTransformer":
            assert {kw.arg for kw in call.keywords} <= set(params)
            assert {kw.arg for kw in call.keywords} == {"device", "model_kwargs"}


def test_nm103_tokenizer_keywords(tmp_path):
    from transformers import BertTokenizerFast

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(vocab))
    enc = tok("great", return_tensors="pt", padding="max_length", max_length=8, truncation=True)
    assert enc["input_ids"].shape == (1, 8)
    assert hasattr(enc, "to")


def test_nm102_keywords_exist_in_transformers_pipeline():
    import transformers.pipelines as P
    from transformers import GenerationConfig, pipeline

    params = set(inspect.signature(pipeline).parameters)
    assert {"task", "model", "tokenizer", "device", "device_map", "dtype"} <= params
    # text-classification: tokenizer keywords go to **tokenizer_kwargs of _sanitize_parameters
    tc = inspect.signature(P.TextClassificationPipeline._sanitize_parameters).parameters
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in tc.values())
    assert "tokenizer_kwargs" in inspect.signature(P.FillMaskPipeline._sanitize_parameters).parameters
    assert "tokenize_kwargs" in inspect.signature(P.FeatureExtractionPipeline._sanitize_parameters).parameters
    assert "batch_size" in inspect.getsource(P.Pipeline.__init__)
    # text-generation: extra keywords are generate kwargs, applied to the generation config
    tg = inspect.signature(P.TextGenerationPipeline._sanitize_parameters).parameters
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in tg.values())
    g = GenerationConfig()
    assert hasattr(g, "cache_implementation") and hasattr(g, "max_cache_len")
    # the task names the rule maps are real tasks; the removed ones NM621 marks are the installed library's
    from codemods.inference.pipelines import TOKENIZER_KWARGS
    from migrator.selfcheck.targetapi import api

    tasks = set(P.SUPPORTED_TASKS) | set(getattr(P, "TASK_ALIASES", {}))
    assert set(TOKENIZER_KWARGS) <= tasks | {"sentiment-analysis"}
    assert {t: api().removed_task(t) for t in P.REMOVED_TASKS} == dict(P.REMOVED_TASKS)
    assert api().removed_task("translation_en_to_fr") == P.REMOVED_TASKS["translation"]
    assert not set(P.REMOVED_TASKS) & set(P.SUPPORTED_TASKS)
    for after in sorted((FIXTURES / "NM102").glob("*.after.py")):
        for call in _calls(after):
            if _func_name(call).endswith("pipeline"):
                for kw in call.keywords:
                    assert kw.arg is None or kw.arg in params | {
                        "padding", "max_length", "truncation", "batch_size", "tokenizer_kwargs", "tokenize_kwargs",
                        "cache_implementation", "max_cache_len",
                    }, f"{after.name}: pipeline({kw.arg}=)"


# ---------------------------------------------------------------------- the output runs
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    vocab += list("abcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(d / "vocab.txt")).save_pretrained(d)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128, id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1},
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():  # make the two labels clearly different
        model.classifier.weight.normal_(0, 1.0)
    model.save_pretrained(d)
    return d


def _run(script: str, tmp_path: Path, *args: str) -> object:
    path = tmp_path / "migrated.py"
    path.write_text(script)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CLASSIFY = '''
import json
import sys

from transformers import AutoTokenizer

from optimum.neuron import NeuronModelForSequenceClassification


def classify(model_id, text):
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    model = NeuronModelForSequenceClassification.from_pretrained(
        model_id, export=True, batch_size=1, sequence_length=24, auto_cast="matmul", optlevel="3"
    )
    inputs = tokenizer(text, return_tensors="pt")
    logits = model(**inputs).logits
    return logits[0].tolist(), model.config.id2label[logits.argmax(dim=-1).item()]


if __name__ == "__main__":
    print(json.dumps([classify(sys.argv[1], text) for text in sys.argv[2:]]))
'''

TEXTS = ["Inferentia makes inference cheap!", "compiling once is bad", "the serving is fast and great"]


def test_migrated_sequence_classification_runs_like_transformers(tiny_bert, tmp_path, rules):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    migrated, findings = _migrate(textwrap.dedent(CLASSIFY), rules)
    assert "optimum" not in migrated
    assert 'device_map="neuron"' in migrated
    assert 'padding="max_length", max_length=24, truncation=True' in migrated
    assert ".to(model.device)" in migrated
    # auto_cast="matmul" ran only the matmuls in bf16 (auto_cast_type's default): the model stays float32, and the
    # one thing left to do is the autocast that splits precision the same way
    assert "dtype=" not in "\n".join(line for line in migrated.splitlines() if "TODO(" not in line)
    assert [f.message for f in findings if f.fix == "manual"] == [
        'Wrap the model\'s calls in torch.autocast("neuron", dtype=torch.bfloat16): the export cast its matmuls only.']

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    ref_model = AutoModelForSequenceClassification.from_pretrained(tiny_bert).eval()
    results = _run(migrated.replace('"neuron"', '"cpu"'), tmp_path, str(tiny_bert), *TEXTS)
    assert len(results) == len(TEXTS)
    for text, (logits, label) in zip(TEXTS, results):
        with torch.no_grad():
            ref = ref_model(**tok(text, return_tensors="pt")).logits[0]
        assert torch.allclose(torch.tensor(logits), ref, atol=1e-5), (logits, ref.tolist())
        assert label == ref_model.config.id2label[int(ref.argmax())]


PIPELINE = '''
import json
import sys

from optimum.neuron import pipeline

classifier = pipeline(
    "text-classification",
    model=sys.argv[1],
    export=True,
    input_shapes={"batch_size": 1, "sequence_length": 24},
    compiler_args={"auto_cast": "matmul", "auto_cast_type": "bf16"},
)
print(json.dumps(classifier(sys.argv[2:])))
'''


def test_migrated_pipeline_runs_like_transformers(tiny_bert, tmp_path, rules):
    from transformers import pipeline

    migrated, findings = _migrate(textwrap.dedent(PIPELINE), rules)
    assert "optimum" not in migrated
    assert 'device="neuron"' in migrated and "max_length=24" in migrated and "export" not in migrated
    assert not [f for f in findings if f.fix == "manual"]

    out = _run(migrated.replace('"neuron"', '"cpu"'), tmp_path, str(tiny_bert), *TEXTS)
    ref = pipeline("text-classification", model=str(tiny_bert), device="cpu")(TEXTS)
    assert [o["label"] for o in out] == [r["label"] for r in ref]
    assert [o["score"] for o in out] == pytest.approx([r["score"] for r in ref], abs=1e-5)


# ---------------------------------------------------------------------- behaviour details
def test_nm102_positional_arguments_after_model_become_keywords(rules):
    src = 'from optimum.neuron import pipeline\np = pipeline("fill-mask", "bert-base-uncased", tok, export=True)\n'
    new, _ = _migrate(src, rules)
    assert 'pipeline("fill-mask", "bert-base-uncased", tokenizer=tok, device="neuron")' in new


def test_nm102_model_object_gets_no_device(rules):
    # a model the unit loads (placed where it is loaded): no device, no marker; one of unknown origin: a marker
    src = ('from optimum.neuron import pipeline\nfrom transformers import AutoModel\n'
           'model = AutoModel.from_pretrained("m", device_map="neuron")\n'
           'p = pipeline("text-classification", model=model, tokenizer=tok)\n')
    new, findings = _migrate(src, rules)
    assert 'pipeline("text-classification", model=model, tokenizer=tok)' in new
    assert not [f for f in findings if f.fix == "manual"]
    unknown, findings = _migrate(src.replace('model = AutoModel.from_pretrained("m", device_map="neuron")\n', ""), rules)
    assert [f.rule for f in findings if f.fix == "manual"] == ["NM102"]


def test_nm103_ignored_line_is_left_alone(rules):
    src = textwrap.dedent('''
        from optimum.neuron import NeuronModelForMaskedLM
        m = NeuronModelForMaskedLM.from_pretrained("b", export=True, batch_size=1)  # neuron-migrate: ignore[NM103]
    ''')
    new, _ = _migrate(src, rules)
    assert 'from_pretrained("b", export=True, batch_size=1)' in new


def test_nm103_tokenizer_in_other_function_is_not_touched(rules):
    src = textwrap.dedent('''
        from transformers import AutoTokenizer
        from optimum.neuron import NeuronModelForSequenceClassification


        def load():
            return NeuronModelForSequenceClassification.from_pretrained("b", export=True, sequence_length=32)


        def encode(text):
            tok = AutoTokenizer.from_pretrained("b")
            return tok(text, return_tensors="pt")
    ''')
    new, findings = _migrate(src, rules)
    assert 'tok(text, return_tensors="pt")' in new
    assert any("Pad this model's inputs to max_length=32" in f.message for f in findings)


# ---------------------------------------------------------------------- NM104 (diffusion)
def test_nm104_keywords_exist_in_diffusers():
    import diffusers
    from diffusers import DiffusionPipeline

    from codemods.inference.diffusion import SOURCES

    load_keywords = set(inspect.signature(DiffusionPipeline.from_pretrained).parameters)
    load_keywords |= set(re.findall(r'kwargs\.pop\("(\w+)"', inspect.getsource(DiffusionPipeline.from_pretrained)))
    targets = {}
    from codemods.common.renames import load_table

    for qual in SOURCES:
        target = load_table()[qual].target.rsplit(".", 1)[1]
        targets[target] = getattr(diffusers, target)
    assert len(targets) == 15
    from codemods.inference.diffusion import _call_shapes

    for qual, neuron_name in SOURCES.items():
        name = load_table()[qual].target.rsplit(".", 1)[1]
        call = set(inspect.signature(targets[name].__call__).parameters)
        assert set(_call_shapes(neuron_name)) <= call, name
        assert hasattr(targets[name], "to"), name
    seen: dict[str, set[str]] = {}
    for after in sorted((FIXTURES / "NM104").glob("*.after.py")):
        for call in _calls(after):
            fname = _func_name(call)
            if fname.startswith("Neuron"):
                continue  # an old load left as it is (an export-only script: neg_compile_and_save)
            method = fname.rsplit(".", 1)[-1]
            kws = {kw.arg for kw in call.keywords if kw.arg is not None}
            seen.setdefault(method, set()).update(kws)
            if fname == "ControlNetModel.from_pretrained" or fname.endswith("Transformer2DModel.from_pretrained"):
                # models (not pipelines): ModelMixin.from_pretrained reads most keywords from **kwargs
                model_keywords = set(inspect.signature(diffusers.ModelMixin.from_pretrained).parameters)
                model_keywords |= set(re.findall(r'kwargs\.pop\(\s*"(\w+)"',
                                                 inspect.getsource(diffusers.ModelMixin.from_pretrained)))
                assert kws <= model_keywords, (after.name, kws - model_keywords)
                seen.setdefault(fname.split(".")[0], set()).update(kws)
            elif method == "from_pretrained":
                # components (controlnet=) are passed through **kwargs to the pipeline's __init__
                pipe = targets.get(fname.split(".")[0])
                components = set(inspect.signature(pipe.__init__).parameters) if pipe is not None else set()
                assert kws <= load_keywords | components, (after.name, kws - load_keywords - components)
            elif method in ("compile_repeated_blocks", "compile"):
                import torch

                assert kws <= set(inspect.signature(torch.compile).parameters), (after.name, kws)
            elif method in ("load_lora_weights", "fuse_lora", "unload_lora_weights", "set_adapters", "load_ip_adapter",
                            "set_ip_adapter_scale"):
                sd = targets["StableDiffusionPipeline"]
                params = inspect.signature(getattr(sd, method)).parameters
                named = set(params)
                if method == "load_lora_weights":
                    # weight_name is read from **kwargs by lora_state_dict
                    named |= set(inspect.signature(sd.lora_state_dict).parameters)
                    named |= set(re.findall(r'kwargs\.pop\("(\w+)"', inspect.getsource(sd.lora_state_dict)))
                assert kws <= named, (after.name, method, kws - named)
    assert {"torch_dtype"} <= seen["from_pretrained"]
    assert {"weight_name", "adapter_name"} <= seen["load_lora_weights"]
    assert {"lora_scale"} <= seen["fuse_lora"]
    assert {"adapter_weights"} <= seen["set_adapters"]
    assert {"subfolder", "weight_name"} <= seen["load_ip_adapter"]
    assert {"backend", "fullgraph", "dynamic"} <= seen["compile_repeated_blocks"]
    assert "controlnet" in seen["from_pretrained"] and "dtype" in seen["ControlNetModel"]
    assert {"subfolder", "parallel_config"} <= seen["FluxTransformer2DModel"]
    assert "controlnet" in inspect.signature(diffusers.StableDiffusionControlNetPipeline.__init__).parameters
    # the denoiser each family compiles exists and declares repeated blocks (else compile_repeated_blocks raises)
    from codemods.inference.diffusion import COMPILE

    families = {"NeuronFlux": diffusers.FluxPipeline, "NeuronPixArt": diffusers.PixArtAlphaPipeline,
                "Neuron": diffusers.StableDiffusionPipeline}
    for prefix, (denoiser, how) in COMPILE:
        annotation = inspect.signature(families[prefix].__init__).parameters[denoiser].annotation
        model_cls = annotation if isinstance(annotation, type) else None
        assert model_cls is not None and issubclass(model_cls, diffusers.ModelMixin), (prefix, annotation)
        assert hasattr(model_cls, how)
        if how == "compile_repeated_blocks":
            assert model_cls._repeated_blocks, model_cls


def test_nm104_pipeline_call_keeps_explicit_shapes(rules):
    src = textwrap.dedent('''
        from optimum.neuron import NeuronStableDiffusionPipeline

        pipe = NeuronStableDiffusionPipeline.from_pretrained("sd", export=True, height=512, width=512)
        image = pipe("a cat", height=768).images[0]
    ''')
    new, _ = _migrate(src, rules)
    assert 'pipe = StableDiffusionPipeline.from_pretrained("sd").to("neuron")' in new
    assert 'pipe("a cat", height=768, width=512)' in new


@pytest.mark.parametrize("rule_path", ["codemods.inference.pipelines:PipelineStaticShapes",
                                       "codemods.inference.traced_models:TracedModelsOnNeuron",
                                       "codemods.inference.diffusion:DiffusionPipelinesOnNeuron"])
def test_explain_example_is_what_the_rule_does(rule_path, rules):
    import importlib

    module, _, name = rule_path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    doc = cls.doc()
    new, findings = _migrate(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert {f.fix for f in findings if f.rule == cls.id} == {"applied"}


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory) -> Path:
    """A random Stable Diffusion pipeline (UNet/VAE/CLIP with a few channels, a character vocabulary)."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    d = tmp_path_factory.mktemp("tiny-sd")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "!": 2}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))
    (d / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(d / "vocab.json"), str(d / "merges.txt"), model_max_length=16)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(4, 8), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=8, norm_num_groups=2, attention_head_dim=2,
    )
    vae = AutoencoderKL(
        block_out_channels=[4, 8], in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
        up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4, norm_num_groups=2,
    )
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=8, intermediate_size=16, num_attention_heads=2,
        num_hidden_layers=1, vocab_size=len(vocab), max_position_embeddings=16,
    ))
    StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=DDIMScheduler(),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    ).save_pretrained(d / "pipe")
    return d / "pipe"


STABLE_DIFFUSION = '''
import json
import sys

import numpy as np
import torch

from optimum.neuron import NeuronStableDiffusionPipeline

pipe = NeuronStableDiffusionPipeline.from_pretrained(
    sys.argv[1], export=True, batch_size=1, height=32, width=32, num_images_per_prompt=1, optlevel="1"
)
images = pipe("a cat", num_inference_steps=2, generator=torch.manual_seed(0), output_type="np").images
np.save(sys.argv[2], images)
print(json.dumps(list(images.shape)))
'''


LORA_EXPORT = '''
from optimum.neuron import NeuronStableDiffusionPipeline

pipe = NeuronStableDiffusionPipeline.from_pretrained(
    "base", export=True, batch_size=1, height=32, width=32, num_images_per_prompt=1,
    lora_model_ids="lora", lora_weight_names="pytorch_lora_weights.safetensors", lora_adapter_names="lcm",
)
pipe.save_pretrained("fused")
image = pipe("a cat", num_inference_steps=2).images[0]
'''


def test_a_fused_lora_saved_by_the_migration_loads_back(tiny_sd, tmp_path, rules):
    """NM104's LoRA steps end with unload_lora_weights(): the fused weights stay (the output differs from the base
    model's) and save_pretrained writes plain keys, so the saved pipeline loads back with the same output. Without
    the unload the PEFT layers are saved too (base_layer / lora_A keys) and the reloaded UNet computes
    something else."""
    import torch
    from diffusers import StableDiffusionPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    migrated, _ = _migrate(textwrap.dedent(LORA_EXPORT), rules)
    steps = re.findall(r"^pipe\.(\w+)\(", migrated, re.M)
    assert steps[:3] == ["load_lora_weights", "fuse_lora", "unload_lora_weights"] and "save_pretrained" in steps
    torch.manual_seed(0)
    base = StableDiffusionPipeline.from_pretrained(tiny_sd)
    base.unet.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=["to_q", "to_k", "to_v"], init_lora_weights=False))
    StableDiffusionPipeline.save_lora_weights(tmp_path / "lora", unet_lora_layers=get_peft_model_state_dict(base.unet),
                                              weight_name="pytorch_lora_weights.safetensors")
    x, t, c = torch.randn(1, 4, 16, 16), torch.tensor(1), torch.randn(1, 4, 8)

    def run(unload: bool, name: str):
        pipe = StableDiffusionPipeline.from_pretrained(tiny_sd)
        pipe.load_lora_weights(str(tmp_path / "lora"), weight_name="pytorch_lora_weights.safetensors",
                               adapter_name="lcm")
        pipe.fuse_lora()
        if unload:
            pipe.unload_lora_weights()
        with torch.no_grad():
            fused = pipe.unet(x, t, c).sample
        pipe.save_pretrained(tmp_path / name)
        with torch.no_grad():
            reloaded = StableDiffusionPipeline.from_pretrained(tmp_path / name).unet(x, t, c).sample
        return fused, reloaded

    with torch.no_grad():
        plain = StableDiffusionPipeline.from_pretrained(tiny_sd).unet(x, t, c).sample
    fused, reloaded = run(True, "fused")
    assert not torch.allclose(fused, plain)  # the adapter is in the weights
    torch.testing.assert_close(reloaded, fused)
    try:
        fused, reloaded = run(False, "with_peft_layers")
    except Exception:
        return  # the saved pipeline does not even load: what the unload prevents
    assert not torch.allclose(reloaded, fused)


def test_migrated_stable_diffusion_runs_like_diffusers(tiny_sd, tmp_path, rules):
    import numpy as np
    import torch
    from diffusers import StableDiffusionPipeline

    migrated, findings = _migrate(textwrap.dedent(STABLE_DIFFUSION), rules)
    code = "\n".join(ln for ln in migrated.splitlines() if "TODO(neuron-migrate" not in ln)
    assert "optimum" not in code and "export" not in code
    assert '.to("neuron")' in migrated
    assert 'output_type="np", height=32, width=32' in migrated
    assert 'pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)' in migrated
    # the one thing left to a person: the export's default bf16 matmuls (the load now runs in float32,
    # which is what this test compares with)
    manual = [f.message for f in findings if f.fix == "manual"]
    assert len(manual) == 1 and "Pass dtype=torch.bfloat16" in manual[0] and "this load is float32" in manual[0]

    # the compiled UNet blocks run through dynamo's "eager" backend on CPU (the same graphs, no neuronx-cc)
    runnable = migrated.replace('backend="neuron"', 'backend="eager"').replace('"neuron"', '"cpu"')
    shape = _run(runnable, tmp_path, str(tiny_sd), str(tmp_path / "out.npy"))
    assert shape == [1, 32, 32, 3]
    ref = StableDiffusionPipeline.from_pretrained(tiny_sd)(
        "a cat", num_inference_steps=2, height=32, width=32, generator=torch.manual_seed(0), output_type="np"
    ).images
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), ref, atol=1e-5)


def test_nm103_output_hidden_states_on_from_pretrained_reaches_every_call(tiny_bert):
    """NM103 keeps output_attentions/output_hidden_states on the load: transformers sets them on the config."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert, output_hidden_states=True,
                                                               output_attentions=True)
    out = model(**AutoTokenizer.from_pretrained(tiny_bert)("great", return_tensors="pt"))
    assert out.hidden_states is not None and len(out.hidden_states) == 3
    assert out.attentions is not None and len(out.attentions) == 2


SERVING_CLASS = '''
import json
import sys

import torch

from optimum.neuron import NeuronStableDiffusionPipeline


class Model:
    def __init__(self, path):
        compiler_args = {"auto_cast": "matmul", "auto_cast_type": "bf16"}
        input_shapes = {"batch_size": 1, "height": 32, "width": 32}
        self.pipe = NeuronStableDiffusionPipeline.from_pretrained(path, export=True, **compiler_args, **input_shapes)

    def predict(self, prompt):
        return self.pipe(prompt, num_inference_steps=2, generator=torch.manual_seed(0), output_type="pt").images


model = Model(sys.argv[1])
images = model.predict("a cat")
print(json.dumps([str(model.pipe.unet.dtype), list(images.shape)]))
'''


def test_migrated_serving_class_runs_in_the_carried_precision_at_the_compiled_size(tiny_sd, tmp_path, rules):
    """`self.pipe` in a serving class: placed, compiled, called at the compiled size from another method,
    and loaded with `dtype=` (the keyword Diffusers 0.42 documents) in the precision the export used."""
    migrated, findings = _migrate(textwrap.dedent(SERVING_CLASS), rules)
    assert "dtype=torch.bfloat16" in migrated and "torch_dtype" not in migrated
    assert 'self.pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)' in migrated
    assert 'output_type="pt", height=32, width=32\n' in migrated
    assert not [f for f in findings if f.fix == "manual"]
    runnable = migrated.replace('backend="neuron"', 'backend="eager"').replace('"neuron"', '"cpu"')
    dtype, shape = _run(runnable, tmp_path, str(tiny_sd))
    assert dtype == "torch.bfloat16"
    assert shape == [1, 3, 32, 32]


def test_nm111_an_auto_class_never_returns_a_subclass(tiny_bert):
    """The fact NM111's marker states: a subclass of a Transformers Auto* class is not what its
    from_pretrained returns, so the subclass's overrides never run."""
    from transformers import AutoModelForSequenceClassification

    class Mine(AutoModelForSequenceClassification):
        def forward(self, *args, **kwargs):  # pragma: no cover - the point is that it never runs
            raise AssertionError("the override ran")

    model = Mine.from_pretrained(tiny_bert)
    assert not isinstance(model, Mine)
    assert type(model).__name__ == "BertForSequenceClassification"
