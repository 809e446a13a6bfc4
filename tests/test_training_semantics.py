"""The rewrites keep what the old code trained (CPU, the tiny Llama of tests/verify_fixtures, offline):
the migrated fixture code is run and compared with what the old stack computed."""

from __future__ import annotations

import builtins
import contextlib
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).parent / "fixtures"
MODEL = str(Path(__file__).parent / "verify_fixtures" / "tiny-llama")
TEXTS = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "Once upon a time",
         "A static cache keeps the decode step at one shape.", "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12",
         "Packing puts several short examples into one block.", "a b c d e f g h", "The end."] * 2


@contextlib.contextmanager
def _blocked(*names: str):
    """Imports of ``names`` (and their submodules) fail, as on a machine without them."""
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.split(".")[0] in names:
            raise ImportError(f"blocked: {name}")
        return real(name, *args, **kwargs)

    builtins.__import__ = fake
    try:
        yield
    finally:
        builtins.__import__ = real


def test_function_local_import_stays_local_when_a_parameter_has_the_old_name():
    """`def run(NeuronSFTConfig, ...)` is a parameter: it is not renamed to the import of build(), and
    that import is not hoisted to the top of the module, which still imports without trl/torch."""
    src = (FIX / "NM200/local_import_parameter.after.py").read_text()
    assert src.count("from trl import SFTConfig") == 1 and "    from trl import SFTConfig" in src
    with _blocked("trl", "torch", "transformers", "optimum"):
        ns: dict = {}
        exec(compile(src, "local_import_parameter.py", "exec"), ns)  # the module's top level runs

        class Passed:
            def __init__(self, output_dir):
                self.output_dir = output_dir

        assert ns["run"](Passed, "out").output_dir == "out"  # the parameter is the class the caller passed
        with pytest.raises(ImportError):
            ns["build"]("out")  # the import is still made where it was, when build() runs


# ------------------------------------------------------------------ compute_loss and gradient accumulation
torch = pytest.importorskip("torch")
pytest.importorskip("datasets")


def _tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _class_source(path: str, name: str) -> str:
    """The source of class ``name`` of a fixture (up to the next top-level class)."""
    text = (FIX / path).read_text()
    start = text.index(f"class {name}(")
    end = text.find("\nclass ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _accumulated_grads(tmp_path, cls_source: str, name: str, accumulation: int):
    """The gradient the Trainer hands its first optimizer step, with ``accumulation`` micro-batches."""
    from datasets import Dataset
    from transformers import (AutoModelForCausalLM, DataCollatorForLanguageModeling, Trainer, TrainerCallback,
                              TrainingArguments)

    ns = {"Trainer": Trainer}
    exec(cls_source, ns)
    tok = _tokenizer()
    ds = Dataset.from_dict(tok(TEXTS[:accumulation], truncation=True, max_length=16))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    grads = {}

    class Grab(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            if not grads:
                grads.update({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})

    args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                             per_device_train_batch_size=1, gradient_accumulation_steps=accumulation,
                             max_grad_norm=0, disable_tqdm=True, dataloader_num_workers=0, learning_rate=1e-9)
    trainer = ns[name](model=model, args=args, train_dataset=ds, callbacks=[Grab()],
                       data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    trainer.train()
    return grads, trainer, ds, tok


def _old_trainer_grads(trainer, ds, tok, accumulation: int):
    """What the transformers 4.x Trainer did with a compute_loss of its own: each micro-batch's loss divided by
    the accumulation steps, the gradients summed (same batches, same order as the run above)."""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    for batch in trainer.get_train_dataloader():
        batch = {k: v.to(model.device) for k, v in batch.items()}
        loss = trainer.compute_loss(model, batch)
        (loss / accumulation).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["WeightedTrainer", "MeanOfAll"])
def test_compute_loss_override_keeps_the_old_accumulation_scaling(tmp_path, name):
    """An override given num_items_in_batch (NM612) returns a per-batch mean; without the class flag the 5.23
    Trainer takes it as already scaled (the tiny Llama accepts loss kwargs) and the gradient comes out
    accumulation x larger; with `loss_is_scaled_for_ga = False` it is what the old Trainer computed."""
    source = _class_source("NM612/overrides.after.py", name)
    assert "loss_is_scaled_for_ga = False" in source
    accumulation = 4
    grads, trainer, ds, tok = _accumulated_grads(tmp_path / "new", source, name, accumulation)
    old = _old_trainer_grads(trainer, ds, tok, accumulation)
    assert trainer.model_accepts_loss_kwargs  # the case where the flag decides
    for n, g in old.items():
        torch.testing.assert_close(grads[n], g, rtol=1e-3, atol=1e-6)
    if name == "WeightedTrainer":
        return  # its training_step drops num_items_in_batch: the Trainer divides either way
    unflagged = source.replace("loss_is_scaled_for_ga = False", "loss_is_scaled_for_ga = None")
    big, *_ = _accumulated_grads(tmp_path / "unflagged", unflagged, name, accumulation)
    key = "lm_head.weight"
    ratio = (big[key].norm() / grads[key].norm()).item()
    assert ratio == pytest.approx(accumulation, rel=1e-3)


# ------------------------------------------------------------------ transformers.AdamW passed as a value
def test_adamw_partial_gets_the_old_transformers_defaults():
    """functools.partial(AdamW, ...) (NM601): the optimizer it builds has transformers 4.x AdamW's eps=1e-6 and
    weight_decay=0.0 (torch's are 1e-8 and 0.01); a keyword given to the partial or to its call still wins."""
    src = (FIX / "NM601/as_value.after.py").read_text()
    ns: dict = {}
    exec(src.split("\noptimizer_cls")[0].split("\n# TODO")[0], ns)
    params = [torch.nn.Parameter(torch.zeros(2))]
    group = ns["make_optimizer"](params).param_groups[0]
    assert (group["eps"], group["weight_decay"], group["lr"]) == (1e-6, 0.0, 2e-5)
    assert ns["decayed"](params).param_groups[0]["weight_decay"] == 0.1
    assert ns["make_optimizer"](params, eps=1e-8).param_groups[0]["eps"] == 1e-8
    plain = torch.optim.AdamW(params).param_groups[0]
    assert (plain["eps"], plain["weight_decay"]) == (1e-8, 0.01)  # what the partial would have had unpinned


def test_adamw_class_and_kwargs_of_a_trainer_get_the_old_defaults(tmp_path):
    """optimizer_cls_and_kwargs=(AdamW, {...}) (NM601): the Trainer builds AdamW(params, **kwargs) from the dict,
    which now carries transformers 4.x AdamW's eps and weight_decay (the Trainer's parameter groups set their
    weight_decay from the arguments either way)."""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    src = (FIX / "NM601/as_value.after.py").read_text()
    ns: dict = {}
    exec(src[src.index("def trainer_with_class"):], {"Trainer": Trainer, "AdamW": torch.optim.AdamW}, ns)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    trainer = ns["trainer_with_class"](AutoModelForCausalLM.from_pretrained(MODEL), args, None)
    group = trainer.create_optimizer().param_groups[0]
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert (group["eps"], group["lr"]) == (1e-6, 1e-5)  # torch's default eps is 1e-8


# ------------------------------------------------------------------ which examples packing builds
def _packed(tmp_path, **strategy):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path), packing=True, max_length=16, report_to=[], use_cpu=True,
                     save_strategy="no", pad_to_multiple_of=None, activation_checkpointing=False, bf16=False,
                     disable_tqdm=True, **strategy)
    trainer = SFTTrainer(model=MODEL, args=args, train_dataset=Dataset.from_dict({"text": TEXTS}),
                         processing_class=_tokenizer())
    return [tuple(x) for x in trainer.train_dataset["input_ids"]]


def _trl_011_blocks(tok, seq_length: int):
    """TRL 0.11's ConstantLengthDataset (optimum-neuron <= 0.4.1): every example tokenized with its special
    tokens and an EOS after it, all concatenated, cut into seq_length blocks; a last partial block dropped
    (its shuffling left out: the Trainer shuffles the blocks anyway)."""
    stream: list[int] = []
    for text in TEXTS:
        stream += tok(text)["input_ids"] + [tok.eos_token_id]
    return [tuple(stream[i:i + seq_length]) for i in range(0, len(stream) - seq_length + 1, seq_length)]


def test_packing_keeps_the_examples_of_the_trl_the_config_was_written_for(tmp_path):
    """max_seq_length (TRL 0.11): NM203 pins "wrapped", whose blocks are TRL 0.11's; max_length (TRL 0.24,
    which packed "bfd" as TRL 1.16 does by default): nothing is pinned, since "wrapped" would train on other
    examples."""
    assert 'packing_strategy="wrapped"' in (FIX / "NM203/sft_config.after.py").read_text()
    assert 'packing_strategy="bfd"' in (FIX / "NM203/packing_trl_024.after.py").read_text()
    wrapped = _packed(tmp_path / "wrapped", packing_strategy="wrapped")
    assert sorted(b for b in wrapped if len(b) == 16) == sorted(_trl_011_blocks(_tokenizer(), 16))
    default = _packed(tmp_path / "default")
    assert sorted(default) != sorted(wrapped)  # another set of training examples: another step-0 loss
    assert all(len(b) <= 16 for b in default) and len(default) < len(wrapped)  # bfd: whole examples per bin


# ------------------------------------------------------------------ TRL 0.x defaults of a parsed SFTConfig
def _parser_pinned(kind: str):
    """The parser the migrated fixture builds (NM613: set_defaults right after it)."""
    src = (FIX / "NM613/parsed_config.after.py").read_text()
    assert "parser.set_defaults(gradient_checkpointing=False, bf16=False)" in src
    from transformers import HfArgumentParser
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    if kind == "trl":
        parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    else:
        parser = HfArgumentParser((ScriptArguments, SFTConfig))
    parser.set_defaults(gradient_checkpointing=False, bf16=False)
    return parser


def _sft_of(parsed):
    from trl import SFTConfig

    return next(p for p in parsed if isinstance(p, SFTConfig))


@pytest.mark.parametrize("kind", ["trl", "hf"])
def test_parsed_sft_config_keeps_the_trl_0x_defaults_unless_the_command_line_sets_them(tmp_path, kind):
    from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser

    base = ["--output_dir", str(tmp_path), "--use_cpu", "true", "--dataset_name", "d"]

    def parse(parser, extra):
        if isinstance(parser, TrlParser):
            return _sft_of(parser.parse_args_and_config(args=base + extra))
        return _sft_of(parser.parse_args_into_dataclasses(args=base + extra))

    unpinned = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
    flipped = parse(unpinned, [])
    assert flipped.activation_checkpointing is True and flipped.bf16 is True  # what TRL 1.16 does unpinned
    old = parse(_parser_pinned(kind), [])
    assert old.activation_checkpointing is False and old.gradient_checkpointing is False and old.bf16 is False
    given = parse(_parser_pinned(kind), ["--gradient_checkpointing", "true", "--bf16", "true"])
    assert given.activation_checkpointing is True and given.bf16 is True
    assert parse(_parser_pinned(kind), ["--activation_checkpointing", "true"]).activation_checkpointing is True
    if kind == "trl":  # a --config file sets defaults over the pinned ones, as it did over TRL 0.x's
        config = tmp_path / "config.yaml"
        config.write_text("gradient_checkpointing: true\nbf16: true\n")
        from_file = parse(_parser_pinned(kind), ["--config", str(config)])
        assert from_file.activation_checkpointing is True and from_file.bf16 is True


# ------------------------------------------------------------------ save_only_model only where the model is sharded
def test_save_only_model_follows_the_layout_so_unsharded_runs_still_resume(tmp_path, monkeypatch):
    """`tensor_parallel_size=tp` (NM201): save_only_model=tp > 1. With tp=1 from_pretrained builds no mesh, the
    model is not sharded, and the checkpoint keeps the optimizer state: training resumes from it as it did
    before the migration (save_only_model=True, written unconditionally, would have lost that)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, DataCollatorForLanguageModeling, Trainer, TrainingArguments
    from transformers.distributed import DistributedConfig

    src = (FIX / "NM201/save_only_model_sizes.after.py").read_text()
    assert "save_only_model=tp > 1," in src
    body = src.split("def train_zero_1")[0].replace("torch_compile=True", "torch_compile=False")  # CPU: no compile
    ns = {"os": __import__("os"), "AutoModelForCausalLM": AutoModelForCausalLM, "Trainer": Trainer,
          "TrainingArguments": TrainingArguments, "DistributedConfig": DistributedConfig}
    exec(body.split("from transformers.distributed import DistributedConfig\n")[1], ns)
    monkeypatch.chdir(tmp_path)
    tok = _tokenizer()
    ds = Dataset.from_dict(tok(TEXTS[:8], truncation=True, max_length=16))  # one batch of 8 (drop_last)
    trainer = ns["train"](MODEL, ds, 1)
    assert trainer.args.save_only_model is False and not trainer.model.is_distributed_loading_by_transformers
    trainer.data_collator = DataCollatorForLanguageModeling(tok, mlm=False)
    trainer.args.report_to = []
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert (checkpoint / "optimizer.pt").exists()  # resumable
    again = ns["train"](MODEL, ds, 1)
    again.data_collator = trainer.data_collator
    again.args.report_to = []
    again.train(resume_from_checkpoint=str(checkpoint))
    assert again.state.global_step == trainer.state.global_step  # it went on from step 1 to the end
