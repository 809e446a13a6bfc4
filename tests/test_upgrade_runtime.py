"""What the NM6xx rewrites produce runs on the installed targets (CPU, the tiny Llama of
tests/verify_fixtures, offline): the migrated fixture code is executed, not just parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402

FIX = Path(__file__).parent / "fixtures"
MODEL = str(Path(__file__).parent / "verify_fixtures" / "tiny-llama")
TEXTS = ["Hello, world!", "The quick brown fox jumps over the lazy dog.", "Once upon a time",
         "A static cache keeps the decode step at one shape.", "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12"] * 4


def _tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _sft(tmp_path, **config):
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=2, report_to=[],
                     save_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
                     pad_to_multiple_of=None, **config)
    return SFTTrainer(model=MODEL, args=args, train_dataset=Dataset.from_dict({"text": TEXTS}),
                      processing_class=_tokenizer())


def test_default_packing_is_padding_free_and_wrapped_is_static(tmp_path):
    """What packing_strategy="wrapped" (pinned where the old TRL packed fixed blocks) changes besides the
    examples: TRL 1.16's default packs padding-free (batch length varies), "wrapped" gives every batch the
    same shape."""
    assert _sft(tmp_path / "bfd", packing=True, max_length=32).padding_free is True
    trainer = _sft(tmp_path / "wrapped", packing=True, max_length=32, packing_strategy="wrapped",
                   activation_checkpointing=False)
    assert trainer.padding_free is False and trainer.args.gradient_checkpointing is False
    shapes = set()
    collate = trainer.data_collator

    def spy(features):
        batch = collate(features)
        shapes.add(tuple(batch["input_ids"].shape))
        return batch

    trainer.data_collator = spy
    trainer.train()
    assert shapes == {(2, 32)}


def test_sft_config_defaults_pinned_by_nm613_are_the_old_ones():
    import dataclasses

    from trl import SFTConfig

    from codemods.upgrade.data import data

    old, new, _ = data().default_change("trl.SFTConfig", "gradient_checkpointing")
    assert old is False and new is True
    assert {f.name: f.default for f in dataclasses.fields(SFTConfig)}["gradient_checkpointing"] is True
    pinned = SFTConfig(output_dir="/tmp/nm613", use_cpu=True, activation_checkpointing=False)
    assert pinned.gradient_checkpointing is False and SFTConfig(output_dir="/tmp/nm613", use_cpu=True).gradient_checkpointing


def _migrated(case: str) -> str:
    return (FIX / case).read_text()


def test_batched_formatting_func_wrapped_by_nm613_runs_per_example(tmp_path):
    """TRL 1.16 calls formatting_func per example: the migrated wrapper turns the batched function's
    list into the one string TRL wants, and the trainer builds its dataset from it."""
    src = _migrated("NM613/packing.after.py")
    assert "lambda example: format_batch({key: [value] for key, value in example.items()})[0]" in src
    ns: dict = {}
    exec(src.split("config = SFTConfig")[0], ns)  # the imports and format_batch
    wrapped = eval("lambda example: format_batch({key: [value] for key, value in example.items()})[0]", ns)
    assert wrapped({"question": "q?", "answer": "a."}) == "Q: q?\nA: a."
    from trl import SFTConfig, SFTTrainer

    ds = Dataset.from_dict({"question": ["one?", "two?"], "answer": ["1", "2"]})
    args = SFTConfig(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no",
                     per_device_train_batch_size=2, pad_to_multiple_of=None, disable_tqdm=True)
    trainer = SFTTrainer(model=MODEL, args=args, train_dataset=ds, formatting_func=wrapped,
                         processing_class=_tokenizer())
    first = _tokenizer().decode(trainer.train_dataset[0]["input_ids"])
    assert "Q: one?" in first and "A: 1" in first


def test_compute_loss_override_gets_num_items_in_batch(tmp_path):
    """The 5.23 Trainer passes num_items_in_batch: the old override fails, the migrated one trains."""
    from transformers import AutoModelForCausalLM, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    tok = _tokenizer()
    ds = Dataset.from_dict(tok(TEXTS[:4], truncation=True, max_length=16))
    model = AutoModelForCausalLM.from_pretrained(MODEL)

    def run(source: str) -> None:
        ns = {"Trainer": Trainer}
        exec(source.split("\n\nclass PassThrough")[0].split("from transformers import Trainer\n")[1], ns)
        args = TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True,
                                 save_strategy="no", per_device_train_batch_size=2, disable_tqdm=True)
        trainer = ns["WeightedTrainer"](model=model, args=args, train_dataset=ds,
                                        data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
        trainer.train()

    with pytest.raises(TypeError):
        run((FIX / "NM612/overrides.before.py").read_text())
    run(_migrated("NM612/overrides.after.py"))


def test_tokenizer_call_replaces_encode_plus():
    tok = _tokenizer()
    assert not hasattr(tok, "encode_plus") and not hasattr(tok, "batch_encode_plus")
    src = _migrated("NM609/encode_plus.after.py")
    line = next(x for x in src.splitlines() if x.startswith("one = "))
    one = eval(line.split(" = ", 1)[1], {"tokenizer": tok})
    assert tuple(one["input_ids"].shape) == (1, 16)
    line = next(x for x in src.splitlines() if x.startswith("batch = "))
    batch = eval(line.split(" = ", 1)[1], {"tokenizer": tok})
    assert batch["input_ids"].shape[0] == 2 and isinstance(batch["input_ids"], torch.Tensor)


def test_pad_to_max_length_becomes_padding_that_v5_honours():
    """5.23 ignores pad_to_max_length= (the inputs stay unpadded); the migrated padding="max_length" with
    truncation=True pads a short text to max_length and cuts a long one to it, as 4.x did."""
    tok = _tokenizer()
    assert tuple(tok("hello world", max_length=16, pad_to_max_length=True, return_tensors="pt")["input_ids"].shape) \
        != (1, 16)
    src = _migrated("NM609/pad_to_max_length.after.py")
    line = next(x for x in src.splitlines() if x.startswith("padded = "))
    call = line.split(" = ", 1)[1]
    short = eval(call, {"tokenizer": tok})
    assert tuple(short["input_ids"].shape) == (1, 16)
    long = eval(call.replace('"hello"', '" ".join(["hello world"] * 20)'), {"tokenizer": tok})
    assert tuple(long["input_ids"].shape) == (1, 16)


def test_text_target_replaces_as_target_tokenizer():
    """5.23's tokenizers have no as_target_tokenizer(): the original block raises, the migrated call
    tokenizes the targets as the tokenizer's own call does and returns them as input_ids."""
    tok = _tokenizer()
    examples = {"src": ["hello world", "a b"], "tgt": ["bonjour le monde", "c d e"]}
    before, after = {}, {}
    exec((FIX / "NM619/target_tokenizer.before.py").read_text(), before)
    exec(_migrated("NM619/target_tokenizer.after.py"), after)
    with pytest.raises(AttributeError, match="as_target_tokenizer"):
        before["preprocess"](examples, tok, 8)
    inputs = after["preprocess"](examples, tok, 8)
    assert inputs["labels"] == tok(examples["tgt"], max_length=8, truncation=True)["input_ids"]
    assert inputs["labels"] != inputs["input_ids"]


def test_argument_list_rewritten_by_nm614_parses_with_the_target_parser():
    """HfArgumentParser 5.23 rejects the old flags; the migrated list parses, with the values kept."""
    import ast as _ast

    from transformers import HfArgumentParser, TrainingArguments

    def script_args(path: Path) -> list[str]:
        tree = _ast.parse(path.read_text())
        cmd = next(n.value for n in tree.body if isinstance(n, _ast.Assign) and n.targets[0].id == "cmd")
        words = [e.value for e in cmd.elts]
        return words[words.index("run_clm.py") + 1:]

    parser = HfArgumentParser(TrainingArguments)
    with pytest.raises((SystemExit, ValueError)):
        parser.parse_args_into_dataclasses(args=script_args(FIX / "NM614/argument_lists.before.py"))
    (args,) = parser.parse_args_into_dataclasses(args=script_args(FIX / "NM614/argument_lists.after.py"))
    assert args.eval_strategy == "steps" and args.use_cpu is False and args.output_dir == "out"


def test_torchscript_is_rejected_and_indexing_outputs_still_works():
    """NM615 drops torchscript=: 5.23 rejects it; without it out[0] is still the logits, while a
    config-wide return_dict=False (the tempting replacement) breaks a causal LM's forward."""
    from transformers import AutoModelForCausalLM

    with pytest.raises(TypeError):
        AutoModelForCausalLM.from_pretrained(MODEL, torchscript=True)
    ids = torch.zeros(1, 4, dtype=torch.long)
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    out = model(ids)
    assert torch.equal(out[0], out.logits) and torch.equal(out.to_tuple()[0], out.logits)
    with pytest.raises(AttributeError):
        AutoModelForCausalLM.from_pretrained(MODEL, return_dict=False)(ids)


def test_return_dict_false_load_fails_and_its_migrated_form_runs(tmp_path):
    """NM615 drops from_pretrained(..., return_dict=False): in 5.23 a CLIP loaded that way fails at its first call
    (the config value reaches its text/vision models); the migrated load runs, and return_dict=False on the call
    (left alone) still gives the tuple the original asked for."""
    from transformers import CLIPConfig, CLIPModel

    cfg = CLIPConfig(text_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                                      vocab_size=99),
                     vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                                        num_attention_heads=2, image_size=30, patch_size=15), projection_dim=16)
    CLIPModel(cfg).save_pretrained(tmp_path)
    inputs = dict(input_ids=torch.randint(0, 99, (1, 5)), pixel_values=torch.randn(1, 3, 30, 30))
    before = (FIX / "NM615" / "return_dict.before.py").read_text()
    after = (FIX / "NM615" / "return_dict.after.py").read_text()
    load = 'CLIPModel.from_pretrained("openai/clip-vit-base-patch32"'
    assert load + ", return_dict=False)" in before and load + ")" in after
    with pytest.raises(AttributeError):
        CLIPModel.from_pretrained(tmp_path, return_dict=False)(**inputs)
    out = CLIPModel.from_pretrained(tmp_path).eval()(**inputs)
    assert torch.equal(out[0], out.logits_per_image)
    legacy = CLIPModel.from_pretrained(tmp_path).eval()(**inputs, return_dict=False)
    assert isinstance(legacy, tuple) and torch.equal(legacy[0], out.logits_per_image)


def test_launcher_flags_rewritten_by_nm616_parse_with_the_target_parsers(monkeypatch):
    """The 5.23 HfArgumentParser rejects the old flags of the fixture launch lines; the migrated
    lines parse (shell, Slurm, Dockerfile exec form), and TRL 1.16 takes --max_length where
    --max_seq_length was (an SFT script's launch)."""
    import json as _json
    import shlex

    from transformers import HfArgumentParser, TrainingArguments
    from trl import SFTConfig

    def script_args(path: Path, script: str) -> list[list[str]]:
        text = path.read_text()
        if text.startswith("FROM"):
            line = next(x for x in text.splitlines() if x.startswith("CMD ["))
            cmds = [_json.loads(line[4:])]
        else:
            cmds = [shlex.split(x, comments=True) for x in text.replace("\\\n", " ").splitlines()]
        out = []
        for words in cmds:
            if script in words and not any("$" in w for w in words):
                args = words[words.index(script) + 1:]
                out.append([w for w in args if w not in (">", "2>&1", "log.txt")])
        return out

    parser = HfArgumentParser(TrainingArguments)
    own = {"--model_name_or_path", "gpt2", "--max_seq_length", "128", "--task_name", "mrpc"}  # the scripts' own

    def parse(args):
        args_, rest = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
        return args_, [w for w in rest if w not in own]

    cases = [("NM616/launch", ".sh", "run_clm.py"), ("NM616/launch", ".sh", "run_glue.py"),
             ("NM616/sbatch", ".slurm", "run_clm.py"), ("NM616/image", ".dockerfile", "run_clm.py")]
    for stem, ext, script in cases:
        for before in script_args(FIX / f"{stem}.before{ext}", script):
            try:
                _, rest = parse(before)
            except (SystemExit, ValueError):
                continue
            assert rest, (stem, before)  # rejected
        for after in script_args(FIX / f"{stem}.after{ext}", script):
            args, rest = parse(after)
            assert not rest and args.eval_strategy in ("steps", "epoch", "no"), (stem, after, rest)
    args, _ = parse(script_args(FIX / "NM616/launch.after.sh", "run_clm.py")[0])
    assert args.per_device_train_batch_size == 4 and args.train_sampling_strategy == "group_by_length"
    sft = HfArgumentParser(SFTConfig)
    _, rest = sft.parse_args_into_dataclasses(args=["--output_dir", "o", "--use_cpu", "--max_seq_length", "512"],
                                              return_remaining_strings=True)
    assert rest == ["--max_seq_length", "512"]
    (cfg,) = sft.parse_args_into_dataclasses(args=["--output_dir", "o", "--use_cpu", "--max_length", "512"])
    assert cfg.max_length == 512


def test_load_dataset_keywords_rewritten_by_nm617_run(tmp_path):
    """datasets 5.x rejects use_auth_token= / ignore_verifications= (the builder config gets them);
    the migrated call of the fixture loads the same data."""
    import datasets as _ds

    data = tmp_path / "train.jsonl"
    data.write_text('{"text": "a"}\n{"text": "b"}\n')
    common = dict(data_files=str(data), split="train", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(TypeError):
        _ds.load_dataset("json", use_auth_token=None, ignore_verifications=True, **common)
    src = (FIX / "NM617/load_dataset.after.py").read_text()
    line = next(x.strip() for x in src.splitlines() if x.strip().startswith("ds = load_dataset("))
    call = line.split(" = ", 1)[1].replace("name, ", '"json", ').replace('split="train", ', "")
    ds = _ds.load_dataset("json", token=None, verification_mode="no_checks", **common)
    assert "token=HF_TOKEN" in call and 'verification_mode="no_checks"' in call
    assert ds["text"] == ["a", "b"]
    _ds.disable_caching()
    assert not _ds.is_caching_enabled()
    _ds.enable_caching()


def test_hub_keywords_rewritten_by_nm617_are_accepted():
    """Every huggingface_hub call of the NM617 fixture takes the keywords it is left with."""
    import ast as _ast
    import inspect

    import huggingface_hub as hub

    tree = _ast.parse((FIX / "NM617/hub_calls.after.py").read_text())
    checked = 0
    for node in _ast.walk(tree):
        if isinstance(node, _ast.Call) and node.keywords:
            func = node.func
            if isinstance(func, _ast.Attribute) and isinstance(func.value, _ast.Call):
                fn = getattr(hub.HfApi, func.attr)
            elif isinstance(func, _ast.Name):
                fn = getattr(hub, func.id)
            else:
                continue
            params = inspect.signature(fn).parameters
            for kw in node.keywords:
                assert kw.arg in params, (getattr(func, "id", getattr(func, "attr", "")), kw.arg)
            checked += 1
    assert checked >= 5


def test_apply_chat_template_rewrite_gives_generate_the_tensor_it_took_in_v4():
    """NM618: in transformers 5 apply_chat_template(..., return_tensors="pt") returns a BatchEncoding (ids.shape and
    model.generate(ids) fail); the migrated call (return_dict=False) returns the token-id tensor v4 returned."""
    from transformers import AutoModelForCausalLM, BatchEncoding

    from migrator.engine import RuleSelection, RuleSet
    from tests.test_fixtures import migrate

    tok = _tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}")
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    messages = [{"role": "user", "content": "Hello, world!"}]
    before = (FIX / "NM618" / "tensor_reads.before.py").read_text()
    after, _ = migrate(before.encode(), "python", RuleSet.from_selection(RuleSelection()))
    old, new = {}, {}
    exec(compile(before, "before", "exec"), old)
    exec(compile(after.decode(), "after", "exec"), new)
    assert isinstance(tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt"), BatchEncoding)
    with pytest.raises(Exception):
        old["chat"](model, tok, messages)  # the v4 code on v5
    text = new["chat"](model, tok, messages)
    assert isinstance(text, str)
    assert isinstance(new["chat_inline"](model, tok, messages), torch.Tensor)


def test_the_removed_fields_nm602_marks_on_reads_are_gone_from_training_arguments(tmp_path):
    """NM602's read markers say these attributes are gone: a read raises AttributeError in 5.23."""
    transformers = pytest.importorskip("transformers")
    from codemods.upgrade.transformers_v5 import READ_MARKERS

    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    for name in READ_MARKERS:
        with pytest.raises(AttributeError):
            getattr(args, name)
    assert args.eval_strategy is not None  # the field the marker names instead


def test_hf_cli_table_matches_the_pinned_huggingface_hub():
    """NM620's table: the pinned huggingface_hub installs `hf` and no `huggingface-cli`, and each hf command
    the rule writes exists with every option the rule keeps (read from `hf <command> --help`)."""
    import shutil
    import subprocess
    from importlib.metadata import distribution

    from codemods.upgrade.hub_cli import COMMANDS, HF_OPTIONS

    scripts = {e.name for e in distribution("huggingface_hub").entry_points if e.group == "console_scripts"}
    assert "hf" in scripts and "huggingface-cli" not in scripts
    hf = shutil.which("hf")
    assert hf is not None
    for old, new in COMMANDS.items():
        out = subprocess.run([hf, *new.split()[1:], "--help"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (new, out.stderr)
        for option in HF_OPTIONS[old]:
            assert option in out.stdout, (new, option)


def test_sft_dataset_kwargs_other_than_skip_prepare_dataset_are_ignored(tmp_path):
    """What NM613's dataset_kwargs marker says: TRL 1.16 tokenizes the same with add_special_tokens=False
    in dataset_kwargs as without it (TRL 0.x's preparation passed it to the tokenizer)."""
    plain = _sft(tmp_path / "plain", max_length=32).train_dataset["input_ids"]
    asked = _sft(tmp_path / "asked", max_length=32,
                 dataset_kwargs={"add_special_tokens": False}).train_dataset["input_ids"]
    assert asked == plain
    without = [_tokenizer()(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    assert plain != without  # the key would have changed the tokens had it been read


def test_pipeline_tasks_nm621_marks_are_gone_and_the_others_run():
    """Each task NM621 marks in its fixture raises in transformers 5.23's pipeline(); a task it leaves runs."""
    import re

    from transformers import pipeline

    after = (FIX / "NM621" / "removed_tasks.after.py").read_text()
    marked = re.findall(r'NM621\)[^\n]*\n\w+ = pipeline\((?:task=)?"([^"]+)"', after)
    assert marked == ["summarization", "translation_en_to_fr", "question-answering"]
    for task in marked:
        with pytest.raises(KeyError, match="has been removed"):
            pipeline(task, model=MODEL)
    out = pipeline("text-generation", model=MODEL)("Hello", max_new_tokens=2, do_sample=False)
    assert out and "generated_text" in out[0]


def test_the_seq2seq_advice_of_nm621_runs_where_the_text_generation_pipeline_cannot_load_the_model():
    """NM621's advice for the removed seq2seq tasks: the causal LM the text-generation pipeline loads (what
    Transformers suggests) is no T5 at all, and for Marian only its decoder; AutoModelForSeq2SeqLM + generate()
    runs the whole model."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, MarianConfig, T5Config

    after = (FIX / "NM621" / "removed_tasks.after.py").read_text()
    assert after.count("load AutoModelForSeq2SeqLM and call its generate()") == 2
    t5 = T5Config(vocab_size=64, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, decoder_start_token_id=0)
    marian = MarianConfig(vocab_size=64, decoder_vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          decoder_start_token_id=63, pad_token_id=63, eos_token_id=0)
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForCausalLM.from_config(t5)
    decoder_only = AutoModelForCausalLM.from_config(copy.deepcopy(marian))  # (it makes its config a decoder's)
    assert not any(name.startswith("model.encoder") or ".encoder." in name for name, _ in decoder_only.named_parameters())
    for config in (t5, marian):
        torch.manual_seed(0)
        model = AutoModelForSeq2SeqLM.from_config(config).eval()
        assert any(".encoder." in name or name.startswith("encoder.") for name, _ in model.named_parameters())
        out = model.generate(input_ids=torch.tensor([[5, 6, 7, 1]]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                             max_new_tokens=3, do_sample=False)
        assert out.shape[0] == 1 and 2 <= out.shape[1] <= 4


def test_save_function_is_ignored_and_is_main_process_decides_who_writes(tmp_path):
    """NM622: transformers 5.23's save_pretrained never calls save_function (every process wrote the checkpoint);
    is_main_process=False, what the rewrite passes on the other processes, writes nothing."""
    from transformers import AutoModelForCausalLM

    after = (FIX / "NM622" / "save_function.after.py").read_text()
    assert 'save_pretrained("out", is_main_process=accelerator.is_main_process)' in after
    model = AutoModelForCausalLM.from_pretrained(MODEL)
    calls = []
    model.save_pretrained(tmp_path / "a", save_function=lambda *a, **k: calls.append(a))
    assert not calls and (tmp_path / "a" / "model.safetensors").exists()
    model.save_pretrained(tmp_path / "b", is_main_process=False)
    assert not list((tmp_path / "b").iterdir())
    model.save_pretrained(tmp_path / "c", is_main_process=True)
    assert (tmp_path / "c" / "model.safetensors").exists()


def test_a_return_dict_false_load_nm615_keeps_for_torch_jit_trace_traces(tmp_path):
    """NM615 leaves from_pretrained(..., return_dict=False) where the unit still traces with torch.jit.trace: in 5.23
    an encoder loaded that way traces, and without it the tracer stops at the dict output."""
    from transformers import BertConfig, BertModel

    assert (FIX / "NM615" / "neg_jit_traced.after.py").read_text() == (FIX / "NM615" / "neg_jit_traced.before.py").read_text()
    BertModel(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=37)).save_pretrained(tmp_path)
    ids = torch.randint(0, 99, (1, 6))
    traced = torch.jit.trace(BertModel.from_pretrained(tmp_path, return_dict=False).eval(), (ids,))
    assert isinstance(traced(ids), tuple)
    with pytest.raises(Exception, match="(?i)dict"):
        torch.jit.trace(BertModel.from_pretrained(tmp_path).eval(), (ids,))


def test_a_torchscript_config_traces_only_with_return_dict_off():
    """5.23's torchscript=True no longer turns return_dict off (4.x did): the ModelOutput stops torch.jit.trace;
    the migrated configuration (return_dict=False added) traces."""
    from transformers import BertConfig, BertForSequenceClassification

    ids = torch.ones(1, 8, dtype=torch.long)

    def trace(**extra):
        config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, torchscript=True, **extra)
        model = BertForSequenceClassification(config).eval()
        return torch.jit.trace(model, (ids,))

    with pytest.raises(Exception):
        trace()
    assert tuple(trace(return_dict=False)(ids)[0].shape) == (1, 2)
