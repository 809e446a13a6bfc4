"""Shell, Slurm, notebook-shell and Dockerfile rules (NM510-NM514, NM520-NM521).

The fixtures (tests/fixtures/NM51x, NM52x) cover whole realistic files; these tests pin the forms one
by one, the safety properties (untouched text stays byte-identical, heredocs are never edited,
`bash -n` still passes on random combinations, rule selection and ignore comments), and the parser.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from codemods.dockerfile import DockerUnit
from codemods.shell import ShellSyntaxError, ShellUnit, cc_flags_plan, export_comments
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, migrate_text, process

HAS_BASH = shutil.which("bash") is not None
MY_RULES = ("NM510", "NM511", "NM512", "NM513", "NM514", "NM520", "NM521")

_RULESETS: dict = {}


def ruleset(select: tuple[str, ...] | None = None, ignore: tuple[str, ...] = ()) -> RuleSet:
    key = (select, ignore)
    if key not in _RULESETS:
        _RULESETS[key] = RuleSet.from_selection(RuleSelection(select=select, ignore=ignore))
    return _RULESETS[key]


def migrate(text: str, kind: str = "shell", select=None, ignore=()):
    return migrate_text(text, kind, ruleset(select, ignore))


def bash_ok(text: str) -> tuple[bool, str]:
    if not HAS_BASH:
        return True, ""
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    return proc.returncode == 0, proc.stderr


def check(text: str, kind: str = "shell", **kw) -> str:
    """Migrate, and check the invariants every shell output must have."""
    out, _ = migrate(text, kind, **kw)
    if kind == "shell":
        ok, err = bash_ok(text)
        if ok:
            ok2, err2 = bash_ok(out)
            assert ok2, f"bash -n rejects the migrated script:\n{out}\n{err2}"
    again, _ = migrate(out, kind, **kw)
    assert again == out, f"not idempotent:\n{out}\n---\n{again}"
    return out


# ---------------------------------------------------------------------------------------------
# Environment forms (NM512)

ENV_CASES = [
    ("export XLA_USE_BF16=1\n", ""),
    ("export XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2\n", "export NEURON_RT_NUM_CORES=2\n"),
    ("export NEURON_RT_NUM_CORES=2 XLA_USE_BF16=1\n", "export NEURON_RT_NUM_CORES=2\n"),
    ("XLA_USE_BF16=1 python train.py\n", "python train.py\n"),
    ("XLA_USE_BF16=1 FOO=bar python train.py\n", "FOO=bar python train.py\n"),
    ("FOO=bar XLA_USE_BF16=1 python train.py\n", "FOO=bar python train.py\n"),
    ("XLA_USE_BF16=1\n", ""),
    ("env XLA_USE_BF16=1 python train.py\n", "python train.py\n"),
    ("env XLA_USE_BF16=1 FOO='a b' python train.py\n", "env FOO='a b' python train.py\n"),
    ("env -i PATH=$PATH XLA_USE_BF16=1 python train.py\n", "env -i PATH=$PATH python train.py\n"),
    ("env -u TMPDIR XLA_USE_BF16=1 python t.py\n", "env -u TMPDIR python t.py\n"),
    ('export RUN="a b c" XLA_DOWNCAST_BF16="1" NAME=\'x y\'\n', "export RUN=\"a b c\" NAME='x y'\n"),
    ("unset XLA_USE_BF16 TMPDIR\n", "unset TMPDIR\n"),
    ("unset -v XLA_USE_BF16\n", ""),
    ("export PJRT_DEVICE\n", ""),
    ("export XLA_USE_BF16=1  # bf16 everywhere\npython t.py\n", "python t.py\n"),
    ("python a.py; export XLA_USE_BF16=1  # bf16\n", "python a.py  # bf16\n"),
    ("export XLA_USE_BF16=1; python a.py\n", "python a.py\n"),
    ("export XLA_USE_BF16=1 && python a.py\n", "python a.py\n"),
    ("python a.py && export XLA_USE_BF16=1 && python b.py\n", "python a.py && python b.py\n"),
    ("export XLA_USE_BF16=1 &&\n  python a.py\n", "python a.py\n"),
    ("python a.py &&\n  export XLA_USE_BF16=1\n", "python a.py\n"),
    ("export XLA_USE_BF16=1 || exit 1\n", ": || exit 1\n"),
    ("export XLA_USE_BF16=1 | cat\n", ": | cat\n"),
    ("time XLA_USE_BF16=1 python x.py\n", "time python x.py\n"),
    ("XLA_USE_BF16=1 \\\n  NEURON_FUSE_SOFTMAX=1 \\\n  torchrun train.py \\\n    --bf16\n",
     "torchrun train.py \\\n    --bf16\n"),
    ("  XLA_USE_BF16=1 \\\n      torchrun train.py\n", "  torchrun train.py\n"),
    ("export A=1 \\\n  XLA_USE_BF16=1\necho hi\n", "export A=1\necho hi\n"),
    ("export XLA_USE_BF16=1 \\\n  A=1\n", "export \\\n  A=1\n"),
    ('export XLA_USE_BF16="1\n2" B=2\n', "export B=2\n"),
    ("if [ -n \"$BF16\" ]; then\n    export XLA_USE_BF16=1\nfi\n", "if [ -n \"$BF16\" ]; then\n    :\nfi\n"),
    ("if true; then export XLA_USE_BF16=1; fi\n", "if true; then :; fi\n"),
    ("if true; then\n  export XLA_USE_BF16=1\n  export XLA_DOWNCAST_BF16=1\nfi\n", "if true; then\n  :\nfi\n"),
    ("if true; then\n  export XLA_USE_BF16=1\n  echo on\nfi\n", "if true; then\n  echo on\nfi\n"),
    ("for i in 1 2; do export XLA_USE_BF16=1; done\n", "for i in 1 2; do :; done\n"),
    ("f() {\n  export XLA_USE_BF16=1\n}\n", "f() {\n  :\n}\n"),
    ("( export XLA_USE_BF16=1 )\n", "( : )\n"),
    ("case $1 in\n  bf16) export XLA_USE_BF16=1;;\n  *) echo no;;\nesac\n",
     "case $1 in\n  bf16) ;;\n  *) echo no;;\nesac\n"),
    ("ARGS=(\n  --bf16 # keep\n)\nexport XLA_USE_BF16=1\n", "ARGS=(\n  --bf16 # keep\n)\n"),
    ("export OPTIMUM_NEURON_COMMON_FLAGS_MODEL_TYPE=transformer MALLOC_ARENA_MAX=64\n",
     "export MALLOC_ARENA_MAX=64\n"),
    ("export NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS=3 NEURON_RT_STOCHASTIC_ROUNDING_EN=1\n",
     "export NEURON_RT_STOCHASTIC_ROUNDING_EN=1\n"),
    # kept: runtime, EFA, collectives and anything not XLA-only
    ("export FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 NEURON_RT_ROOT_COMM_ID=$ADDR:46820\n", None),
    ("export NEURON_RT_VISIBLE_CORES=0-1 NEURON_RT_NUM_CORES=2 MALLOC_ARENA_MAX=64\n", None),
    # not edited: forms whose meaning is not a plain environment assignment
    ("export -n XLA_USE_BF16\n", None),
    ("declare -x XLA_USE_BF16=1\n", None),
    ("export 'XLA_USE_BF16=1'\n", None),
    ("OUT=$(XLA_USE_BF16=1 python t.py)\n", None),
    ("echo XLA_USE_BF16=1\n", None),
    ("XLA_USE_BF16[0]=1\n", None),
]


@pytest.mark.parametrize("before,after", ENV_CASES, ids=[c[0][:40] for c in ENV_CASES])
def test_environment_forms(before: str, after: str | None):
    assert check(before) == (before if after is None else after)


def test_reference_to_removed_variable_is_marked():
    out = check('export XLA_USE_BF16=1\necho "bf16=$XLA_USE_BF16"\n')
    assert out == (
        "# TODO(neuron-migrate NM512): XLA_USE_BF16 is no longer set (XLA-only, removed by neuron-migrate): "
        'update this use\necho "bf16=$XLA_USE_BF16"\n'
    )


def test_reference_without_removal_is_left_alone():
    src = 'echo "bf16=${XLA_USE_BF16:-0}"\n'
    assert check(src) == src


# ---------------------------------------------------------------------------------------------
# Heredocs, strings, comments: never edited


UNTOUCHED = [
    "#!/bin/bash\nset -e\ntorchrun --nproc_per_node=2 train.py\n",
    "# export XLA_USE_BF16=1\n# optimum-cli export neuron --model x out/\n",
    "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nneuron_parallel_compile torchrun t.py\nEOF\n",
    "cat > env.sh << 'EOF'\nexport XLA_USE_BF16=1\nEOF\n",
    "cat <<-END\n\texport XLA_USE_BF16=1\n\tEND\n",
    "python - <<PY\nimport os\nos.environ['XLA_USE_BF16'] = '1'\nPY\n",
    "X=$(cat <<EOF\nexport XLA_USE_BF16=1\nEOF\n)\n",
    "echo 'export XLA_USE_BF16=1'\n",
    'echo "XLA_USE_BF16=1 neuron_parallel_compile"\n',
    "bash -c 'export XLA_USE_BF16=1; python t.py'\n",
    "echo 'unbalanced\nexport XLA_USE_BF16=1\n",  # does not lex: left alone
    "if true; then\nexport XLA_USE_BF16=1\n",  # does not parse: left alone
    "export XLA_USE_BF16=1 # neuron-migrate: ignore\n",
    "export XLA_USE_BF16=1 # neuron-migrate: ignore[NM512]\n",
    "export XLA_USE_BF16=1 # neuron-migrate: ignore[NM5]\n",
]


@pytest.mark.parametrize("src", UNTOUCHED, ids=range(len(UNTOUCHED)))
def test_untouched_is_byte_identical(src: str):
    data = src.encode()
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), data)
    assert result.status == "unchanged", result.new_text
    assert not [f for f in result.findings if f.fix == "applied"]


def test_heredoc_body_kept_command_after_it_edited():
    src = "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nEOF\nexport XLA_USE_BF16=1\npython t.py\n"
    assert check(src) == "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nEOF\npython t.py\n"


def test_heredoc_on_the_edited_command_line():
    src = "XLA_USE_BF16=1 python - <<EOF\nimport os\nprint(os.environ.get('XLA_USE_BF16'))\nEOF\n"
    assert check(src) == "python - <<EOF\nimport os\nprint(os.environ.get('XLA_USE_BF16'))\nEOF\n"


def test_crlf_endings_kept():
    src = "#!/bin/bash\r\nexport XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2\r\nexport NEURON_FUSE_SOFTMAX=1\r\n" \
          "XLA_USE_BF16=1 torchrun t.py \\\r\n  --bf16\r\necho done\r\n"
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
    assert result.new_bytes == (
        b"#!/bin/bash\r\nexport NEURON_RT_NUM_CORES=2\r\ntorchrun t.py \\\r\n  --bf16\r\necho done\r\n"
    )


def test_untouched_lines_keep_their_bytes():
    src = "echo a   \t\nexport XLA_USE_BF16=1\r\necho 'b'  # c\n"
    out, _ = migrate(src)
    assert out == "echo a   \t\necho 'b'  # c\n"


# ---------------------------------------------------------------------------------------------
# optimum-cli (NM510)


def test_export_removed_with_comment():
    out = check("optimum-cli export neuron --model gpt2 --batch_size 1 --sequence_length 128 "
                "--num_cores 1 --auto_cast_type fp16 gpt2_neuron/\npython run.py\n")
    lines = out.splitlines()
    assert lines[-1] == "python run.py"
    assert lines[0].startswith("# neuron-migrate NM510: removed `optimum-cli export neuron`")
    assert all(line.startswith("#") for line in lines[:-1])
    assert any('device_map="neuron"' in line for line in lines)
    assert any("dtype=torch.float16" in line for line in lines)
    assert any("max_cache_len=128" in line for line in lines)


def test_export_comment_is_neither_marker_nor_ignore():
    from migrator.model import MARKER_RE, ignored_rules

    out, findings = migrate("optimum-cli export neuron -m gpt2 out/\n")
    for line in out.splitlines():
        assert not MARKER_RE.search(line)
        assert ignored_rules(line) is None
    assert [f.fix for f in findings] == ["applied"]


def test_export_comments_flag_mapping():
    lines = export_comments(["--model", "m", "--tensor_parallel_size", "8", "--torch_dtype", "bfloat16",
                             "--trust-remote-code", "--subfolder", "sub", "-O3", "--instance_type", "trn2",
                             "out/"])
    text = "\n".join(lines)
    assert "DistributedConfig(tp_size=8)" in text and "torchrun --nproc_per_node=8" in text
    assert "dtype=torch.bfloat16" in text
    assert "trust_remote_code=True" in text and "subfolder=sub" in text
    assert "no equivalent, dropped: -O3 --instance_type trn2" in text
    assert "wherever out/ was loaded" in text


def test_export_in_and_chain_and_pipeline():
    assert check("cd models && optimum-cli export neuron -m m out/ && cd ..\n").splitlines()[-1] == "cd models && cd .."
    assert check("optimum-cli export neuron -m m out/ | tee log\n").splitlines()[-1] == ": | tee log"
    assert check("optimum-cli export neuron -m m out/ || exit 1\n").splitlines()[-1] == ": || exit 1"


def test_cache_dropped_consolidate_and_serve_marked():
    out = check("optimum-cli neuron cache synchronize --repo_id me/cache\n"
                "optimum-cli neuron consolidate ckpt out\n"
                "optimum-cli neuron serve -m m\n")
    assert out.splitlines()[0].startswith("# TODO(neuron-migrate NM510): `optimum-cli neuron consolidate`")
    assert out.splitlines()[1] == "optimum-cli neuron consolidate ckpt out"
    assert out.splitlines()[2].startswith("# TODO(neuron-migrate NM510): `optimum-cli neuron serve`")
    assert "cache" not in out.split("\n", 1)[0].split(":")[0]
    assert "synchronize" not in out


def test_export_inside_command_substitution_not_touched():
    src = "OUT=$(optimum-cli export neuron -m m out/)\n"
    assert check(src) == src


# ---------------------------------------------------------------------------------------------
# neuron_parallel_compile (NM511)


def test_prefix_removed():
    assert check("neuron_parallel_compile torchrun --nproc_per_node=32 train.py --max_steps 10\n") == \
        "torchrun --nproc_per_node=32 train.py --max_steps 10\n"
    assert check("srun neuron_parallel_compile torchrun train.py\n") == "srun torchrun train.py\n"
    assert check("neuron_parallel_compile \\\n  torchrun train.py\n") == "torchrun train.py\n"
    assert check("neuron_parallel_compile ./finetune.sh\n") == "./finetune.sh\n"


def test_prerun_of_the_same_command_removed():
    out = check("neuron_parallel_compile torchrun t.py \\\n  --bf16\ntorchrun t.py \\\n  --bf16\n")
    assert out.splitlines()[1:] == ["torchrun t.py \\", "  --bf16"]
    assert out.splitlines()[0].startswith("# neuron-migrate NM511: removed the neuron_parallel_compile pre-run")


def test_prerun_with_other_arguments_kept_and_marked():
    out = check("neuron_parallel_compile torchrun t.py --max_steps 10\ntorchrun t.py --max_steps 1000\n")
    assert out.splitlines()[1:] == ["torchrun t.py --max_steps 10", "torchrun t.py --max_steps 1000"]
    assert out.startswith("# TODO(neuron-migrate NM511): this was the neuron_parallel_compile pre-run")


def test_options_marked():
    out = check("neuron_parallel_compile --command clean\n")
    assert out.startswith("# TODO(neuron-migrate NM511)")
    assert out.endswith("neuron_parallel_compile --command clean\n")


def test_echo_of_the_name_not_touched():
    src = "echo neuron_parallel_compile torchrun\n"
    assert check(src) == src


# ---------------------------------------------------------------------------------------------
# NEURON_CC_FLAGS (NM513)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ('"--model-type transformer"', ("remove", None)),
        ('"$NEURON_CC_FLAGS --model-type=transformer --retry_failed_compilation"', ("remove", None)),
        ('"--model-type=transformer -O1"', ("rewrite", '"-O1"')),
        ("'--cache_dir=/c -O1 --enable-saturate-infinity'", ("rewrite", "'-O1 --enable-saturate-infinity'")),
        ("--model-type=transformer", ("remove", None)),
        ('"--auto-cast=none"', ("mark", None)),
        ('"-O1"', None),
        ('"$(cat f) --model-type transformer"', ("mark", None)),
    ],
)
def test_cc_flags_plan(raw, expected):
    got = cc_flags_plan(raw)
    assert (got[:2] if got else None) == expected


def test_cc_flags_combined_with_other_rules_on_one_line():
    src = 'NEURON_CC_FLAGS="--model-type transformer -O1" XLA_USE_BF16=1 neuron_parallel_compile torchrun t.py\n'
    out = check(src)
    assert out.splitlines()[-1] == 'NEURON_CC_FLAGS="-O1" torchrun t.py'
    assert out.startswith("# TODO(neuron-migrate NM513)")


def test_cc_flags_and_xla_var_in_one_export():
    assert check("export XLA_USE_BF16=1 NEURON_CC_FLAGS=--model-type=transformer\npython t.py\n") == "python t.py\n"
    assert check("env XLA_USE_BF16=1 NEURON_CC_FLAGS=--model-type=transformer python t.py\n") == "python t.py\n"


# ---------------------------------------------------------------------------------------------
# NEURON_EXTRACT_GRAPHS_ONLY (NM514)


def test_extract_graphs_only_marked_once_per_statement():
    src = 'if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = 1 ] || [ "${NEURON_EXTRACT_GRAPHS_ONLY}" = true ]; then\n  S=5\nfi\n'
    out = check(src)
    assert out.count("TODO(neuron-migrate NM514)") == 1
    assert out.endswith(src)


# ---------------------------------------------------------------------------------------------
# Rule selection and ignore comments on lines several rules edit

COMBINED = 'XLA_USE_BF16=1 NEURON_CC_FLAGS="--model-type transformer" neuron_parallel_compile torchrun t.py\n'


@pytest.mark.parametrize(
    "select,expected",
    [
        (("NM511",), 'XLA_USE_BF16=1 NEURON_CC_FLAGS="--model-type transformer" torchrun t.py\n'),
        (("NM512",), 'NEURON_CC_FLAGS="--model-type transformer" neuron_parallel_compile torchrun t.py\n'),
        (("NM513",), "XLA_USE_BF16=1 neuron_parallel_compile torchrun t.py\n"),
        (("NM511", "NM513"), "XLA_USE_BF16=1 torchrun t.py\n"),
        (None, "torchrun t.py\n"),
    ],
)
def test_selection_on_a_shared_line(select, expected):
    assert check(COMBINED, select=select) == expected


def test_ignore_one_rule_on_a_shared_line():
    src = COMBINED.rstrip("\n") + "  # neuron-migrate: ignore[NM512]\n"
    assert check(src) == "XLA_USE_BF16=1 torchrun t.py  # neuron-migrate: ignore[NM512]\n"


def test_ignore_on_a_continued_command():
    src = "XLA_USE_BF16=1 torchrun t.py \\\n  --bf16  # neuron-migrate: ignore[NM512]\n"
    assert check(src) == src


# ---------------------------------------------------------------------------------------------
# Notebooks and Markdown


def _nb(*cells: list[str]) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
                  for c in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }, indent=1) + "\n"


def test_notebook_bash_cell_and_bang_lines():
    src = _nb(
        ["%%bash\n", "export XLA_USE_BF16=1\n", "neuron_parallel_compile torchrun t.py\n"],
        ["!XLA_USE_BF16=1 python t.py\n", "x = 1"],
        ["!optimum-cli export neuron -m gpt2 --batch_size 1 --sequence_length 64 out/"],
    )
    out, findings = migrate(src, "notebook")
    cells = ["".join(c["source"]) for c in json.loads(out)["cells"]]
    assert cells[0] == "%%bash\ntorchrun t.py\n"
    assert cells[1] == "!python t.py\nx = 1"
    assert cells[2].startswith("# neuron-migrate NM510: removed `optimum-cli export neuron`")
    assert "!" not in cells[2]
    assert {f.rule for f in findings} >= {"NM510", "NM511", "NM512"}
    again, _ = migrate(out, "notebook")
    assert again == out


def test_markdown_fences():
    src = ("```bash\nexport XLA_USE_BF16=1\ntorchrun t.py\n```\n\n```console\n$ XLA_USE_BF16=1 python t.py\nok\n```\n"
           "\n```text\nexport XLA_USE_BF16=1\n```\n")
    out, _ = migrate(src, "markdown")
    assert out == ("```bash\ntorchrun t.py\n```\n\n```console\n$ python t.py\nok\n```\n"
                   "\n```text\nexport XLA_USE_BF16=1\n```\n")


# ---------------------------------------------------------------------------------------------
# Dockerfiles (NM520, NM521, and NM513 on ENV)

DOCKER_CASES = [
    ("ENV XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2\n", "ENV NEURON_RT_NUM_CORES=2\n"),
    ("ENV XLA_USE_BF16=1\nENV A=1\n", "ENV A=1\n"),
    ("ENV XLA_USE_BF16 1\n", ""),
    ("ENV NEURON_RT_NUM_CORES 2\n", None),
    ('env PATH="/a:${PATH}" XLA_USE_BF16="1" B="x y"\n', 'env PATH="/a:${PATH}" B="x y"\n'),
    ("ENV A=1 \\\n    XLA_USE_BF16=1 \\\n    B=2\n", "ENV A=1 \\\n    B=2\n"),
    ("ENV A=1 \\\n    XLA_USE_BF16=1\nRUN true\n", "ENV A=1\nRUN true\n"),
    ("ENV XLA_USE_BF16=1 \\\n    PJRT_DEVICE=NEURON\nRUN true\n", "RUN true\n"),
    ('ENV NEURON_CC_FLAGS="--model-type=transformer" A=1\n', "ENV A=1\n"),
    ("RUN <<EOF\nexport XLA_USE_BF16=1\nEOF\nENV XLA_USE_BF16=1\n", "RUN <<EOF\nexport XLA_USE_BF16=1\nEOF\n"),
    ("RUN apt-get install -y aws-neuronx-runtime-lib aws-neuronx-tools\n", None),
    ("# escape=`\nENV XLA_USE_BF16=1\n", None),
    ("ENV XLA_USE_BF16=1 # neuron-migrate: ignore\n", None),
    ("FROM public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py311-sdk2.33.0-ubuntu24.04\n", None),
    ("FROM python:3.11-slim\n", None),
]


@pytest.mark.parametrize("before,after", DOCKER_CASES, ids=[c[0][:40] for c in DOCKER_CASES])
def test_dockerfile_env(before: str, after: str | None):
    assert check(before, "dockerfile") == (before if after is None else after)


def test_dockerfile_xla_dlc_marked():
    src = "FROM 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-inference-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04 AS x\n"
    out = check(src, "dockerfile")
    assert out.startswith("# TODO(neuron-migrate NM520): XLA-era Neuron DLC base image")
    assert out.endswith(src)


def test_dockerfile_cc_flags_rewrite_marked():
    out = check('ENV NEURON_CC_FLAGS="--model-type transformer --auto-cast=none" A=1\n', "dockerfile")
    assert out.splitlines() == [
        "# TODO(neuron-migrate NM513): NEURON_CC_FLAGS was written for the XLA stack: check whether "
        "TorchNeuron's compiler still needs --auto-cast=none, remove them otherwise",
        'ENV NEURON_CC_FLAGS="--auto-cast=none" A=1',
    ]


def test_dockerfile_parser_instructions():
    unit = DockerUnit("FROM a\nRUN x \\\n  # c\n  y\nRUN <<EOF\nENV A=1\nEOF\nENV B=2".split("\n"))
    assert [(i.keyword, i.first, i.last, i.inner_comments) for i in unit.instructions] == [
        ("FROM", 0, 0, False), ("RUN", 1, 3, True), ("RUN", 4, 4, False), ("ENV", 7, 7, False)]


# ---------------------------------------------------------------------------------------------
# Lexer and parser

PARSES = [
    "a=(x 'y z' \"$w\")\nb=(\n  1 # c\n  2\n)\n",
    "x=$(case $1 in a) echo A;; b|c) echo B;; esac)\n",
    "x=$( (echo a) )\ny=$((1 + (2 * 3)))\n",
    "while read -r l; do echo \"$l\"; done < <(ls)\n",
    "[[ $a =~ ^(x|y)$ && -n $b ]] && echo ok\n",
    "(( i < 3 )) && echo ok\nfor ((i=0; i<3; i++)); do echo $i; done\n",
    "function f { echo a; }\ng() ( echo b )\nh()\n{\n  echo c\n}\n",
    "echo ${a:-x y} ${#b} $# $? \"${c//\\//_}\"\n",
    "cat <<A <<'B'\na\nA\nb\nB\n",
    "echo `date` \"`whoami`\" $'a\\'b' $\"c\"\n",
    "if a; then b; elif c; then d; else e; fi > log 2>&1\n",
    "case $x in\n  (a) ;;\n  b) echo b ;&\n  *) echo c ;;&\nesac\n",
    "select x in a b; do break; done\n",
    "! grep -q x f && echo no\ntime -p sleep 1\n",
    "echo a#b # comment\n",
    "cmd 2>&1 >/dev/null | tee -a log |& cat &\nwait\n",
    "for f in *.sh\ndo\n  bash -n \"$f\"\ndone\n",
]


@pytest.mark.parametrize("src", PARSES, ids=range(len(PARSES)))
def test_parser_accepts(src: str):
    assert bash_ok(src)[0]
    ShellUnit(src.splitlines())


@pytest.mark.parametrize("src", [
    "echo 'a\n", "echo \"a\n", "if true; then\n", "echo $(a\n", "cat <<EOF\nbody\n", "fi\n", "a |\n",
])
def test_parser_rejects(src: str):
    with pytest.raises(ShellSyntaxError):
        ShellUnit(src.splitlines())


def test_groups_and_heredoc_spans():
    unit = ShellUnit("a \\\n  b &&\n  c\ncat <<E\nx\nE\nd; e\n".split("\n"))
    assert unit.groups == [(0, 2), (3, 3), (6, 6)]


# ---------------------------------------------------------------------------------------------
# Random combinations: every output passes `bash -n` and is idempotent

TARGETS = [
    "export XLA_USE_BF16=1",
    "export XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2",
    "XLA_DOWNCAST_BF16=1 python t.py --bf16",
    "env NEURON_FUSE_SOFTMAX=1 python t.py",
    "unset PJRT_DEVICE",
    "XLA_USE_BF16=1",
    "neuron_parallel_compile torchrun --nproc_per_node=2 t.py",
    "NEURON_CC_FLAGS=\"--model-type transformer\" neuron_parallel_compile torchrun t.py",
    "export NEURON_CC_FLAGS=\"--model-type=transformer -O1\"",
    "optimum-cli export neuron -m gpt2 --batch_size 1 --sequence_length 64 out/",
    "optimum-cli neuron cache synchronize",
    "optimum-cli neuron consolidate a b",
    "export XLA_USE_BF16=1 \\\n    NEURON_FUSE_SOFTMAX=1",
    "XLA_USE_BF16=1 \\\n  torchrun t.py \\\n    --bf16",
    "[ \"$NEURON_EXTRACT_GRAPHS_ONLY\" = 1 ] && S=5",
    "echo \"$XLA_USE_BF16\"",
]
PLAIN = ["echo hi", "python t.py", "export A=1", "cd /tmp", "torchrun t.py"]
BLOCKS = [
    "cat > f <<EOF\nexport XLA_USE_BF16=1\nEOF",
    "# export XLA_USE_BF16=1",
    "",
]


def _wrap(rng: random.Random, stmt: str) -> str:
    kinds = ["plain", "if", "brace", "and_l", "and_r", "semi_l", "semi_r", "or", "pipe", "for", "func",
             "case", "sub", "comment", "and_nl"]
    k = rng.choice(kinds)
    other = rng.choice(PLAIN)
    return {
        "plain": stmt,
        "if": f"if [ -n \"$X\" ]; then\n  {stmt}\nfi",
        "brace": f"{{ {stmt}; }}",
        "and_l": f"{stmt} && {other}",
        "and_r": f"{other} && {stmt}",
        "semi_l": f"{stmt}; {other}",
        "semi_r": f"{other}; {stmt}",
        "or": f"{stmt} || {other}",
        "pipe": f"{stmt} | cat",
        "for": f"for i in 1 2; do {stmt}; done",
        "func": f"f() {{\n  {stmt}\n}}",
        "case": f"case $1 in\n  a) {stmt} ;;\n  *) {other} ;;\nesac",
        "sub": f"( {stmt} )",
        "comment": f"{stmt}  # trailing comment",
        "and_nl": f"{other} &&\n  {stmt}",
    }[k]


def _random_script(rng: random.Random) -> str:
    parts = ["#!/bin/bash"]
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.65:
            parts.append(_wrap(rng, rng.choice(TARGETS)))
        elif r < 0.85:
            parts.append(_wrap(rng, rng.choice(PLAIN)))
        else:
            parts.append(rng.choice(BLOCKS))
    return "\n".join(parts) + "\n"


@pytest.mark.skipif(not HAS_BASH, reason="needs bash")
def test_random_combinations_stay_valid():
    rng = random.Random(20251020)
    selections = [None, ("NM511",), ("NM512",), ("NM513",), ("NM510", "NM512"), ("NM512", "NM513")]
    checked = 0
    for n in range(300):
        src = _random_script(rng)
        if not bash_ok(src)[0]:
            continue
        out = check(src, select=selections[n % len(selections)])
        checked += 1
        # heredoc bodies and comments survive unchanged
        for block in BLOCKS[:2]:
            if block in src:
                assert block.split("\n", 1)[-1] in out
    assert checked > 250


def test_docs_examples_match():
    """`neuron-migrate explain` shows before/after: they are what the rule really does."""
    from codemods import all_rules

    rules = {r.id: r for r in all_rules()}
    for rule_id in MY_RULES:
        doc = rules[rule_id].doc()
        assert doc.why and doc.before and doc.after and doc.title
        kind = "dockerfile" if rule_id.startswith("NM52") else "shell"
        out, _ = migrate(doc.before + "\n", kind)
        assert out == doc.after + "\n", rule_id
