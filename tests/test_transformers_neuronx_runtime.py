"""Runtime claims of NM411 (codemods/xla/transformers_neuronx.py), run on CPU: a transformers-neuronx
serving script of an architecture Transformers cannot shard (GPT-2), with its split-checkpoint save,
the per-request ``reset()`` and ``sample``, migrated and executed with the device ``"neuron"`` mapped
to ``"cpu"`` (nothing else of the migrated text changes)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from migrator.engine import RuleSelection, RuleSet  # noqa: E402
from tests.test_fixtures import migrate  # noqa: E402

SOURCE = '''
from transformers import AutoModelForCausalLM
from transformers_neuronx.gpt2.model import GPT2ForSampling
from transformers_neuronx.module import save_pretrained_split

checkpoint = AutoModelForCausalLM.from_pretrained(CHECKPOINT)
save_pretrained_split(checkpoint, SPLIT)
model = GPT2ForSampling.from_pretrained(SPLIT, batch_size=1, tp_degree=2, n_positions=32, amp="f32")
model.to_neuron()


def answer(ids):
    model.reset()
    return model.sample(ids, sequence_length=12, top_k=1)
'''


def test_gpt2_sampling_server_runs_on_one_device(tmp_path: Path):
    out, findings = migrate(textwrap.dedent(SOURCE).encode(), "python", RuleSet.from_selection(RuleSelection()))
    text = out.decode()
    assert "DistributedConfig" not in text  # GPT-2 has no tensor-parallel plan: the load would raise
    assert ".save_pretrained(SPLIT)" in text and ".reset()" not in text
    assert any(f.rule == "NM411" and f.fix == "manual" and "tensor-parallel plan" in f.message for f in findings)

    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=64)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "ckpt")
    scope = {"CHECKPOINT": str(tmp_path / "ckpt"), "SPLIT": str(tmp_path / "split")}
    exec(compile(text.replace('"neuron"', '"cpu"'), "migrated.py", "exec"), scope)
    ids = torch.tensor([[1, 2, 3]])
    first, second = scope["answer"](ids), scope["answer"](ids)  # two requests: no reset needed between them
    assert first.shape == (1, 12) and torch.equal(first, second)
    assert torch.equal(first[:, :3], ids)


def _simple_sample(model, input_ids, sequence_length, eos_token_id, top_k):
    """transformers-neuronx's sampling.simple_sample/sample_loop (GPT-2, GPT-J, GPT-NeoX, OPT, BLOOM), on a
    Transformers model: the EOS score is -inf before every draw, and the loop runs to sequence_length."""
    tokens, ids = [input_ids], input_ids
    for _ in range(input_ids.shape[1], sequence_length):
        scores = model(ids).logits[:, -1, :].clone()
        scores[:, eos_token_id] = -float("inf")
        values, indices = torch.topk(scores, top_k)
        pick = torch.gather(indices, 1, torch.multinomial(torch.softmax(values, dim=-1), 1, replacement=True))
        tokens.append(pick)
        ids = torch.cat(tokens, dim=-1)
    return ids


def test_sample_of_a_never_eos_model_keeps_its_length_after_the_migration(tmp_path: Path):
    """A GPT-2 whose EOS is its likeliest token: the old .sample returned sequence_length tokens and no EOS;
    the migrated generate() (min_length=max_length) does too, where without min_length it stops at EOS."""
    out, _ = migrate(textwrap.dedent(SOURCE).encode(), "python", RuleSet.from_selection(RuleSelection()))
    text = out.decode()
    assert "min_length=12" in text and ".to(model.device)" not in text
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=64,
                                     eos_token_id=7, bos_token_id=7)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    bias = torch.zeros(32)
    bias[7] = 50.0  # added to the logits (a forward hook): EOS is drawn at once whenever it may be
    model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    model.save_pretrained(tmp_path / "ckpt")
    ids = torch.tensor([[1, 2, 3]])
    torch.manual_seed(0)
    old = _simple_sample(model, ids, 12, eos_token_id=7, top_k=4)
    assert old.shape == (1, 12) and not (old[:, 3:] == 7).any()

    scope = {"CHECKPOINT": str(tmp_path / "ckpt"), "SPLIT": str(tmp_path / "split")}
    exec(compile(text.replace('"neuron"', '"cpu"'), "migrated.py", "exec"), scope)
    scope["model"].lm_head.register_forward_hook(lambda m, i, o: o + bias)
    new = scope["answer"](ids)
    assert new.shape == (1, 12) and not (new[:, 3:] == 7).any()
    without = scope["model"].generate(ids, max_length=12, do_sample=True, top_k=1)  # the form before the fix
    assert without.shape[1] < 12


def test_tp_degrees_nm411_keeps_divide_the_key_value_heads_it_assumes():
    """NM411 turns tp_degree into DistributedConfig(tp_size=N) only for powers of two up to 8 (MAX_KV_HEADS): Llama's
    tensor-parallel plan shards k_proj across ranks, so a Llama 2 70B (8 key/value heads) loads at tp_size 8 and
    cannot at 32, the tp_degree transformers-neuronx reached by replicating them (the fixture marks that one)."""
    from transformers import LlamaConfig
    from transformers.distributed.tensor_parallel import get_kv_heads_per_rank

    from codemods.xla.transformers_neuronx import MAX_KV_HEADS

    plan = LlamaConfig().base_model_tp_plan
    assert get_kv_heads_per_rank(plan, MAX_KV_HEADS, 8) == 1
    assert get_kv_heads_per_rank(plan, MAX_KV_HEADS, 32) is None
    after = (Path(__file__).parent / "fixtures" / "NM411" / "tp_sizes.after.py").read_text()
    assert "DistributedConfig(tp_size=8)" in after and "tp_size=32" not in after.replace("tp_degree=32", "")


def test_assisted_generation_rejects_the_static_cache_nm411_leaves_out_of_speculative_scopes():
    """The speculative fixture's loads get no static cache: generate(assistant_model=) raises with one, and runs
    with the dynamic cache (tiny Llama target and draft on CPU)."""
    text = (Path(__file__).parent / "fixtures" / "NM411" / "speculative.after.py").read_text()
    assert "cache_implementation" not in text
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    target, draft = transformers.LlamaForCausalLM(config).eval(), transformers.LlamaForCausalLM(config).eval()
    ids = torch.tensor([[1, 2, 3]])
    out = target.generate(ids, assistant_model=draft, max_length=12, do_sample=False)
    assert out.shape[1] == 12
    target.generation_config.cache_implementation = "static"
    target.generation_config.max_cache_len = 64
    with pytest.raises(ValueError, match="[Ss]tatic"):
        target.generate(ids, assistant_model=draft, max_length=12, do_sample=False)
