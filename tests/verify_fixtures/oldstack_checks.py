"""Old-stack code in our own words, run under the emulation (tests/test_verify_oldstack.py):
``oldstack_checks.py TINY_LLAMA TINY_CLASSIFIER OUT_DIR [TINY_SD]``. Prints one JSON object of results."""

import json
import os
import sys

import torch

llama, classifier, out_dir = sys.argv[1:4]
results = {}


def error_of(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the tests read the type and the message
        return f"{type(exc).__name__}: {exc}"
    return None


# ---- NotEmulated: an unknown name, an unknown submodule, a known but unmodelled API
results["unknown_name"] = error_of(lambda: __import__("optimum.neuron", fromlist=["NeuronModelForSpeech"])
                                   .NeuronModelForSpeech)
results["unknown_module"] = error_of(lambda: __import__("torch_xla.experimental.pjrt"))
import torch_xla.runtime as xr  # noqa: E402

results["use_spmd"] = error_of(xr.use_spmd)

# ---- the libraries keep their CPU paths: their probes do not see the emulation
from transformers.utils import import_utils  # noqa: E402

results["transformers_sees_xla"] = import_utils.is_torch_xla_available()

# ---- torch_xla device and XLA_USE_BF16
import torch_xla.core.xla_model as xm  # noqa: E402

device = xm.xla_device()
results["device"] = [str(device), device.type]
os.environ["XLA_USE_BF16"] = "1"
moved = torch.ones(3, dtype=torch.float32).to(device)
layer = torch.nn.Linear(2, 2).to(device)
results["bf16_tensor"] = str(moved.dtype)
results["bf16_module"] = str(layer.weight.dtype)
xm.save(layer.state_dict(), os.path.join(out_dir, "ckpt.pt"))
saved = torch.load(os.path.join(out_dir, "ckpt.pt"))
results["saved_dtype"] = str(saved["weight"].dtype)
results["saved_device"] = str(saved["weight"].device)
del os.environ["XLA_USE_BF16"]
results["plain_tensor"] = str(torch.ones(2).to(device).dtype)

# ---- torch_neuronx.trace: fixed shapes, the saved artifact, the compiler's default auto-cast
import torch_neuronx  # noqa: E402

torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
x = torch.randn(2, 8)
traced = torch_neuronx.trace(mlp, x)
fp32 = torch_neuronx.trace(mlp, x, compiler_args=["--auto-cast", "none"])
with torch.no_grad():  # neuronx-cc's default: matmul operands in bf16, accumulated in fp32, bias in fp32
    def _r(t):
        return t.bfloat16().float()

    hidden = torch.relu(torch.nn.functional.linear(_r(x), _r(mlp[0].weight), mlp[0].bias))
    reference_bf16 = torch.nn.functional.linear(_r(hidden), _r(mlp[2].weight), mlp[2].bias)
results["trace_default_matches_bf16_matmul"] = bool(torch.equal(traced(x), reference_bf16))
results["trace_none_matches_fp32"] = bool(torch.allclose(fp32(x), mlp(x), atol=1e-6))
results["trace_other_shape"] = error_of(lambda: traced(torch.randn(3, 8)))
path = os.path.join(out_dir, "model.pt")
torch.jit.save(traced, path)
loaded = torch.jit.load(path)
results["trace_reloaded_same"] = bool(torch.equal(loaded(x), traced(x)))
results["trace_reloaded_other_shape"] = error_of(lambda: loaded(torch.randn(3, 8)))
batched = torch_neuronx.dynamic_batch(traced)
results["dynamic_batch_shape"] = list(batched(torch.randn(5, 8)).shape)

# ---- the causal LM of generation A: static shapes and the export dtype
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification  # noqa: E402

from optimum.neuron import NeuronModelForCausalLM, NeuronModelForSequenceClassification  # noqa: E402

lm = NeuronModelForCausalLM.from_pretrained(llama, export=True, batch_size=1, sequence_length=12,
                                            num_cores=2, auto_cast_type="bf16")
results["lm_dtype"] = str(lm.model.dtype)
prompt = torch.tensor([[1, 17, 33, 250, 7]])
tokens = lm.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False)
results["lm_length_capped"] = tokens.shape[1]
reference = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.bfloat16).eval()
expected = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=7, do_sample=False)
results["lm_same_tokens_as_bf16"] = tokens.tolist() == expected.tolist()
results["lm_batch_too_large"] = error_of(lambda: lm.generate(prompt.repeat(2, 1), max_new_tokens=2))
results["lm_prompt_too_long"] = error_of(lambda: lm.generate(torch.ones(1, 13, dtype=torch.long), max_new_tokens=1))
lm.save_pretrained(os.path.join(out_dir, "compiled_lm"))
reloaded = NeuronModelForCausalLM.from_pretrained(os.path.join(out_dir, "compiled_lm"))
results["lm_reloaded"] = [reloaded.batch_size, reloaded.sequence_length, str(reloaded.model.dtype)]

# generation C: two steps
config = NeuronModelForCausalLM.get_neuron_config(llama, batch_size=1, sequence_length=32)
lm_c = NeuronModelForCausalLM.export(llama, neuron_config=config)
results["lm_c_shapes"] = [lm_c.batch_size, lm_c.sequence_length]

# ---- a traced classifier: inputs padded to the compiled shape
clf = NeuronModelForSequenceClassification.from_pretrained(classifier, export=True, batch_size=2, sequence_length=16)
ids = torch.tensor([[1, 5, 9, 3]])
logits = clf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
plain = AutoModelForSequenceClassification.from_pretrained(classifier).eval()
pad = plain.config.pad_token_id or 0
padded = torch.cat([ids, torch.full((1, 12), pad)], dim=1)
mask = torch.cat([torch.ones(1, 4, dtype=torch.long), torch.zeros(1, 12, dtype=torch.long)], dim=1)
with torch.no_grad():
    expected_logits = plain(input_ids=padded, attention_mask=mask).logits
results["clf_shape"] = list(logits.shape)
results["clf_matches_padded"] = bool(torch.allclose(logits, expected_logits, atol=1e-6))
results["clf_too_long"] = error_of(lambda: clf(input_ids=torch.ones(1, 17, dtype=torch.long)))

# ---- transformers_neuronx: top_k=1 is greedy
from transformers_neuronx import LlamaForSampling  # noqa: E402

sampler = LlamaForSampling.from_pretrained(llama, batch_size=1, tp_degree=2, amp="f32", n_positions=64)
sampler.to_neuron()
sampled = sampler.sample(prompt, sequence_length=12, top_k=1)
fp32_ref = AutoModelForCausalLM.from_pretrained(llama).eval()
greedy = fp32_ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=7, do_sample=False)
results["sampler_greedy"] = sampled.tolist() == greedy.tolist()

# ---- NeuronTrainingArguments: removed 4.x fields keep their meaning, Neuron fields are accepted
from optimum.neuron import NeuronTrainingArguments  # noqa: E402

args = NeuronTrainingArguments(output_dir=out_dir, evaluation_strategy="steps", eval_steps=5, warmup_ratio=0.1,
                               zero_1=True, logging_dir="logs", overwrite_output_dir=True, bf16=True)
from optimum.neuron import NeuronTrainer  # noqa: E402

bf16_trainer = NeuronTrainer(model=AutoModelForCausalLM.from_pretrained(llama), args=args,
                             eval_dataset=[{"input_ids": torch.tensor([1, 2])}])
results["args"] = [str(args.eval_strategy), args.warmup_steps, args.bf16, str(bf16_trainer.model.dtype) ==
                   "torch.bfloat16", str(bf16_trainer.accelerator.mixed_precision)]
results["args_fp16"] = error_of(lambda: NeuronTrainingArguments(output_dir=out_dir, fp16=True))
# tensor parallelism: one process emulates one tensor-parallel group (unsharded); more processes are not
results["args_tp"] = error_of(lambda: NeuronTrainingArguments(output_dir=out_dir, tensor_parallel_size=8))
os.environ["WORLD_SIZE"] = "2"
results["args_tp_world"] = error_of(lambda: NeuronTrainingArguments(output_dir=out_dir, tensor_parallel_size=2))
del os.environ["WORLD_SIZE"]
results["args_pp"] = error_of(lambda: NeuronTrainingArguments(output_dir=out_dir, pipeline_parallel_size=2))

# ---- the NxD training model (0.3+) at size 1: the transformers model, NKI flash attention -> sdpa
from optimum.neuron.models.training import NeuronModelForCausalLM as TrainingCausalLM  # noqa: E402

trained = TrainingCausalLM.from_pretrained(llama, args.trn_config, torch_dtype=torch.bfloat16,
                                           attn_implementation="flash_attention_2")
results["training_model"] = [type(trained).__name__, str(trained.dtype), trained.config._attn_implementation]
# args.trn_config tells the arguments' tensor-parallel size; the NxD training models refuse it above 1
tp_args = NeuronTrainingArguments(output_dir=out_dir, tensor_parallel_size=2)
results["trn_config_tp"] = [tp_args.trn_config.tensor_parallel_size,
                            error_of(lambda: TrainingCausalLM.from_pretrained(llama, tp_args.trn_config))]

# ---- optimum.neuron.pipeline(): the classifier tokenized to the compiled length
from transformers import AutoTokenizer  # noqa: E402
from transformers import pipeline as hf_pipeline  # noqa: E402

from optimum.neuron import pipeline  # noqa: E402

tokenizer = AutoTokenizer.from_pretrained(classifier)
neuron_pipe = pipeline("text-classification", model=classifier, export=True, input_shapes={"batch_size": 1,
                                                                                           "sequence_length": 16})
plain_pipe = hf_pipeline("text-classification", model=plain, tokenizer=tokenizer)
text = "static shapes are padded"
got = neuron_pipe(text)[0]
want = plain_pipe(text, padding="max_length", max_length=16, truncation=True)[0]
results["pipeline_same_as_padded"] = got["label"] == want["label"] and abs(got["score"] - want["score"]) < 1e-6

# ---- diffusion: the export's shapes and its default bf16 matmuls
if len(sys.argv) > 4:
    from diffusers import StableDiffusionPipeline  # noqa: E402

    from optimum.neuron import NeuronStableDiffusionPipeline  # noqa: E402

    sd = NeuronStableDiffusionPipeline.from_pretrained(sys.argv[4], export=True, batch_size=1, height=64, width=64)
    image = sd("a lighthouse", num_inference_steps=1, output_type="np", generator=torch.manual_seed(0)).images
    reference_pipe = StableDiffusionPipeline.from_pretrained(sys.argv[4])
    fp32_image = reference_pipe("a lighthouse", num_inference_steps=1, output_type="np", height=64,
                                width=64, generator=torch.manual_seed(0)).images
    results["sd_shape"] = list(image.shape)
    results["sd_diff_from_fp32"] = float(abs(image - fp32_image).max())
    results["sd_other_height"] = error_of(lambda: sd("x", num_inference_steps=1, height=32, output_type="np"))
    results["sd_two_prompts"] = error_of(lambda: sd(["x", "y"], num_inference_steps=1, output_type="np"))

print(json.dumps({"oldstack": results}))
