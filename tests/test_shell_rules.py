"""Shell, Slurm, notebook-shell and Dockerfile rules (NM510-NM516, NM520-NM522).

The fixtures (tests/fixtures/NM51x, NM52x) cover whole realistic files; these tests pin the forms one
by one, the safety properties (untouched text stays byte-identical, heredocs are never edited,
`bash -n` still passes on random combinations, rule selection and ignore comments), and the parser.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from codemods.project.dockerfile import DockerUnit
from codemods.project.neuron_cc_flags import cc_flags_plan
from codemods.project.shell import STRIPPED_MARKER, export_comments
from codemods.project.xla_env import BF16_LAUNCH_MARKER
from codemods.project.shell_plans import ShellUnit
from codemods.project.shell_syntax import ShellSyntaxError
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, migrate_text, process

HAS_BASH = shutil.which("bash") is not None
MY_RULES = ("NM510", "NM511", "NM512", "NM513", "NM514", "NM515", "NM516", "NM520", "NM521", "NM522", "NM523")

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


#: the marker a launcher gets where a removed XLA_USE_BF16/XLA_DOWNCAST_BF16 turned bf16 on
#: (codemods/project/xla_env.py bf16_launcher_message; tested in tests/test_xla_environment.py and
#: the NM512/NM521 fixtures). The cases below are about the removal forms, compared without it.
BF16_MARKER = re.compile(r"^[ \t]*(?:\$ )?# TODO\(neuron-migrate NM5(?:12|21)\): " + re.escape(BF16_LAUNCH_MARKER)
                         + r"\r?\n", re.M)


def without_bf16_marker(text: str) -> str:
    return BF16_MARKER.sub("", text)


#: a launcher that names optimum-neuron: its launches with TP/PP sizes run optimum-neuron scripts (NM515 moves the
#: sizes of a script it cannot read only on such evidence)
OPTIMUM = ": optimum-neuron fine-tuning\n"  # (code naming it: a comment is no evidence, NM515)


def check_optimum(text: str, **kw) -> str:
    """check() on a launcher that names optimum-neuron (the comment line is added at the end and removed)."""
    eol = "\r\n" if "\r\n" in text else "\n"
    out = check(text + OPTIMUM.replace("\n", eol), **kw)
    assert out.endswith(OPTIMUM.replace("\n", eol)), out
    return out[: -len(OPTIMUM.replace("\n", eol))]


def check(text: str, kind: str = "shell", **kw) -> str:
    """Migrate, and check the invariants every shell output must have (returned without the bf16
    precision marker, see BF16_MARKER)."""
    out, _ = migrate(text, kind, **kw)
    if kind == "shell":
        ok, err = bash_ok(text)
        if ok:
            ok2, err2 = bash_ok(out)
            assert ok2, f"bash -n rejects the migrated script:\n{out}\n{err2}"
    again, _ = migrate(out, kind, **kw)
    assert again == out, f"not idempotent:\n{out}\n---\n{again}"
    return without_bf16_marker(out)


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
    "cat > env.py <<PY\nimport os\nos.environ['XLA_USE_BF16'] = '1'\nPY\n",  # a heredoc that is not run by Python
    "echo 'export XLA_USE_BF16=1'\n",
    'echo "XLA_USE_BF16=1 neuron_parallel_compile"\n',
    "echo bash -c 'export XLA_USE_BF16=1; python t.py'\n",
    "echo '\n#SBATCH --export=ALL,XLA_USE_BF16=1\n'\n",
    "export XLA_USE_BF16=1 # neuron-migrate: ignore\n",
    "export XLA_USE_BF16=1 # neuron-migrate: ignore[NM512]\n",
    "export XLA_USE_BF16=1 # neuron-migrate: ignore[NM5]\n",
]


#: heredocs that write old-stack settings into a file: their text is not edited, one marker above the command says so
HEREDOCS_WRITTEN = [
    "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nneuron_parallel_compile torchrun t.py\nEOF\n",
    "cat > env.sh << 'EOF'\nexport XLA_USE_BF16=1\nEOF\n",
    "cat <<-END\n\texport XLA_USE_BF16=1\n\tEND\n",
    "X=$(cat <<EOF\nexport XLA_USE_BF16=1\nEOF\n)\n",
    "cat > job.sh <<EOF\n#SBATCH --export=ALL,XLA_USE_BF16=1\nEOF\n",
]
HEREDOC_MARKER = ("# TODO(neuron-migrate NM990): Migrate what this heredoc writes by hand: it holds old-stack code or "
                  "settings, and heredoc text is not rewritten.\n")


@pytest.mark.parametrize("src", HEREDOCS_WRITTEN, ids=range(len(HEREDOCS_WRITTEN)))
def test_written_heredoc_is_kept_and_marked(src: str):
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
    assert result.new_text == HEREDOC_MARKER + src
    assert not [f for f in result.findings if f.fix == "applied"]
    assert [f.rule for f in result.findings] == ["NM990"]


@pytest.mark.parametrize("src", UNTOUCHED, ids=range(len(UNTOUCHED)))
def test_untouched_is_byte_identical(src: str):
    data = src.encode()
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), data)
    assert result.status == "unchanged", result.new_text
    assert not [f for f in result.findings if f.fix == "applied"]


# ---------------------------------------------------------------------------------------------
# Launchers that carry the environment, and scripts inside strings


@pytest.mark.parametrize("src,expected", [
    ("mpirun -np 4 -x XLA_USE_BF16=1 -x FI_PROVIDER python t.py\n", "mpirun -np 4 -x FI_PROVIDER python t.py\n"),
    ("mpiexec -x PJRT_DEVICE -np 2 torchrun t.py -x XLA_USE_BF16\n", "mpiexec -np 2 torchrun t.py -x XLA_USE_BF16\n"),
    ("srun --export=ALL,XLA_USE_BF16=1,A=b python t.py\n", "srun --export=ALL,A=b python t.py\n"),
    ("srun --export ALL,NEURON_FUSE_SOFTMAX=1 python t.py\n", "srun --export ALL python t.py\n"),
    ("srun --export=NONE,XLA_IR_DEBUG=1,PATH python t.py\n", "srun --export=NONE,PATH python t.py\n"),
    ("#!/bin/bash\n#SBATCH --export=ALL,XLA_USE_BF16=1 # env\n#SBATCH -N 2\n",
     "#!/bin/bash\n#SBATCH --export=ALL # env\n#SBATCH -N 2\n"),
    ("bash -c 'export XLA_USE_BF16=1; python t.py'\n", "bash -c 'python t.py'\n"),
    ("srun sh -lc \"XLA_USE_BF16=1 torchrun --nproc_per_node 2 t.py\"\n",
     "srun sh -lc \"torchrun --nproc_per_node 2 t.py\"\n"),
    ("bash -c 'for i in 1 2; do\n  XLA_USE_BF16=1 python t.py\ndone'\n", "bash -c 'for i in 1 2; do\n  python t.py\ndone'\n"),
    ("eval 'export PJRT_DEVICE=NEURON'\necho done\n", "echo done\n"),
    ("if true; then eval 'export PJRT_DEVICE=NEURON'; fi\n", "if true; then :; fi\n"),
])
def test_environment_in_launchers_and_strings(src, expected):
    assert check(src, ignore=("NM516",)) == expected


@pytest.mark.parametrize("src", [
    "srun --export=XLA_USE_BF16=1 python t.py\n",  # nothing left: the list cannot be emptied
    'srun --export="ALL,XLA_USE_BF16=1" python t.py\n',  # quoted: not re-quoted
    "srun --export=ALL,XLA_USE_BF16=$X python t.py\n",  # an expansion
    "#SBATCH --export=XLA_USE_BF16=1\n",
    'bash -c "XLA_USE_BF16=1 python $SCRIPT"\n',  # an expansion inside: not re-lexed
    "bash -c 'XLA_USE_BF16=1 python t.py' # neuron-migrate: ignore\n",
    'eval "export PJRT_DEVICE=$DEV"\n',
    "bash -c 'XLA_USE_BF16=1 python \"t.py'\n",  # the inner script does not lex
])
def test_environment_in_launchers_and_strings_flagged(src):
    out = check(src, ignore=("NM516",))
    assert out.endswith(src)
    if "ignore" in src:
        assert out == src
    else:
        assert out.startswith("# TODO(neuron-migrate NM512): ")


def test_commands_in_strings_are_flagged_by_their_rules():
    out = check('srun bash -c "neuron_parallel_compile torchrun t.py"\nsh -c "optimum-cli export neuron -m m o"\n')
    assert "TODO(neuron-migrate NM511): Delete this command if it only pre-compiled, else remove neuron_parallel_compile" in out
    assert "TODO(neuron-migrate NM510): this command string runs optimum-cli" in out
    flags = check('bash -c "torchrun --nproc_per_node 8 t.py --tensor_parallel_size 8"\n')
    assert "TODO(neuron-migrate NM515): Move --tensor_parallel_size to TP_SIZE/FSDP_SIZE" in flags


def test_sbatch_export_line_and_async_load_export_compose():
    src = "#!/bin/bash\n#SBATCH --export=ALL,XLA_USE_BF16=1\ntorchrun --nproc_per_node 2 t.py\n"
    assert check(src) == (
        "#!/bin/bash\n#SBATCH --export=ALL\nexport HF_DEACTIVATE_ASYNC_LOAD=1\ntorchrun --nproc_per_node 2 t.py\n")


def test_heredoc_body_kept_command_after_it_edited():
    src = "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nEOF\nexport XLA_USE_BF16=1\npython t.py\n"
    assert check(src) == HEREDOC_MARKER + "cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nEOF\npython t.py\n"


def test_heredoc_on_the_edited_command_line():
    # the shell rules edit the command line; the Python the heredoc runs is migrated as Python (its read
    # of the variable the launcher no longer sets gets NM409's marker)
    src = "XLA_USE_BF16=1 python - <<EOF\nimport os\nprint(os.environ.get('XLA_USE_BF16'))\nEOF\n"
    out = check(src)
    assert out.startswith("python - <<EOF\nimport os\n# TODO(neuron-migrate NM409): Replace this code's XLA_USE_BF16/XLA_DOWNCAST_BF16 tests")
    assert out.endswith("\nprint(os.environ.get('XLA_USE_BF16'))\nEOF\n")


@pytest.mark.parametrize("line, marked", [
    ('python -c "import torch_xla.core.xla_model as xm; print(xm.xla_device())"\n', True),
    ("  python3 -u -c 'from optimum.neuron import NeuronModelForCausalLM as M; M.from_pretrained(\"m\")' \\\n"
     "    && echo ok\n", True),
    ('python -c "import torch; print(torch.__version__)"\n', False),  # not the old stack
    ('# python -c "import torch_xla"\n', False),  # a comment
    ('python -c "import torch_neuronx; print(torch_neuronx.__version__)"\n', False),  # the native plugin
])
def test_python_c_strings_that_use_the_old_stack_are_marked(line, marked):
    out, findings = migrate(line, "shell")
    message = "Migrate the Python of this python -c command by hand: code inside shell strings is not rewritten."
    indent = line[: len(line) - len(line.lstrip())]
    assert out == (f"{indent}# TODO(neuron-migrate NM990): {message}\n{line}" if marked else line)
    assert [f.message for f in findings if f.rule == "NM990"] == ([message] if marked else [])
    assert migrate(out, "shell")[0] == out  # one run is enough


@pytest.mark.parametrize("line, module", [
    ("python -c 'import torch_xla' || echo none\n", "torch_xla"),  # an install check: the package is gone now
    ('CHECK="import optimum.neuron; import torch_neuronx"\n', "optimum.neuron"),  # the check held in a variable
    ('python -c "import torch_neuronx"\n', None),  # the TorchNeuron plugin is installed
    ('echo "import this"\n', None),
])
def test_install_checks_of_old_stack_packages_are_marked(line, module):
    out, findings = migrate(line, "shell")
    if module is None:
        assert out == line and not [f for f in findings if f.rule == "NM990"]
        return
    message = f"Check for the native stack here (transformers, torch_neuronx): {module} is no longer installed."
    assert out == f"# TODO(neuron-migrate NM990): {message}\n{line}"
    assert migrate(out, "shell")[0] == out


def test_crlf_endings_kept():
    src = "#!/bin/bash\r\nexport XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2\r\nexport NEURON_FUSE_SOFTMAX=1\r\n" \
          "XLA_USE_BF16=1 torchrun t.py \\\r\n  --bf16\r\necho done\r\n"
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
    assert without_bf16_marker(result.new_bytes.decode()).encode() == (
        b"#!/bin/bash\r\nexport HF_DEACTIVATE_ASYNC_LOAD=1\r\nexport NEURON_RT_NUM_CORES=2\r\n"
        b"torchrun t.py \\\r\n  --bf16\r\necho done\r\n"
    )


def test_untouched_lines_keep_their_bytes():
    src = "echo a   \t\nexport XLA_USE_BF16=1\r\necho 'b'  # c\n"
    out, _ = migrate(src)
    assert without_bf16_marker(out) == "echo a   \t\necho 'b'  # c\n"


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
    assert out.splitlines()[0].startswith("# TODO(neuron-migrate NM510): Delete this step if the migrated training wrote")
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


@pytest.mark.parametrize("src, expected", [
    # the assignments a removed wrapper leaves at the start of the command go in the same run
    ("neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=32 \\\n    train.py \\\n    --bf16\n",
     "torchrun --nproc_per_node=32 \\\n    train.py \\\n    --bf16\n"),
    ("FOO=1 neuron_parallel_compile XLA_USE_BF16=1 PJRT_DEVICE=NEURON BAR=2 python t.py\n", "FOO=1 BAR=2 python t.py\n"),
    ("neuron_parallel_compile NEURON_CC_FLAGS='--distribution-strategy llm-training' torchrun t.py\n", "torchrun t.py\n"),
    # an operand of srun is not an assignment, before or after the wrapper goes
    ("srun neuron_parallel_compile XLA_USE_BF16=1 torchrun t.py\n", "srun XLA_USE_BF16=1 torchrun t.py\n"),
])
def test_assignments_behind_a_removed_wrapper_in_one_run(src: str, expected: str):
    out, _ = migrate(src)
    assert without_bf16_marker(out) == expected
    again, findings = migrate(out)
    assert again == out and not [f for f in findings if f.fix == "applied"]


def test_prerun_of_the_same_command_removed():
    out = check("neuron_parallel_compile torchrun t.py \\\n  --bf16\ntorchrun t.py \\\n  --bf16\n")
    assert out.splitlines()[1:] == ["torchrun t.py \\", "  --bf16"]
    assert out.splitlines()[0].startswith("# neuron-migrate NM511: removed the neuron_parallel_compile pre-run")


def test_prerun_with_other_arguments_kept_and_marked():
    out = check("neuron_parallel_compile torchrun t.py --max_steps 10\ntorchrun t.py --max_steps 1000\n")
    assert out.splitlines()[1:] == ["torchrun t.py --max_steps 10", "torchrun t.py --max_steps 1000"]
    assert out.startswith("# TODO(neuron-migrate NM511): Delete this command unless it should run twice: it was the "
                          "neuron_parallel_compile pre-run.")


@pytest.mark.parametrize("name, script", [
    ("precompile.sh", None),
    ("compile_llama.slurm", None),
    # the launcher's name says nothing, but the script it launches shortened its run for the graph extraction
    ("launch.sh", "import os\nsteps = 10 if os.environ.get('NEURON_EXTRACT_GRAPHS_ONLY') else 1000\n"),
])
def test_compile_only_job_kept_and_marked(tmp_path: Path, name: str, script: str | None):
    src = "set -e\nneuron_parallel_compile torchrun --nproc_per_node=32 train.py --max_steps 10\n"
    if script is not None:
        (tmp_path / "train.py").write_text(script)
    out, findings = migrate_text(src, "shell", ruleset(("NM511",)), tmp_path / name)
    # the job is not turned into a real training run: its command stays as it was, marked for deletion
    assert out == ("set -e\n# TODO(neuron-migrate NM511): Delete this job: it only pre-compiled graphs with "
                   "neuron_parallel_compile (TorchNeuron compiles on first use).\n" + src.split("\n", 1)[1])
    assert [f.fix for f in findings if f.rule == "NM511"] == ["manual"]
    assert migrate_text(out, "shell", ruleset(("NM511",)), tmp_path / name)[0] == out


@pytest.mark.parametrize("name, script", [
    ("train.sh", None),
    ("launch.sh", "import os\nsteps = 1000\n"),
])
def test_real_job_loses_the_prefix(tmp_path: Path, name: str, script: str | None):
    # negative: a launcher that is not a compile job (name, launched script) runs its command for real
    if script is not None:
        (tmp_path / "train.py").write_text(script)
    src = "neuron_parallel_compile torchrun train.py\n"
    out, _ = migrate_text(src, "shell", ruleset(("NM511",)), tmp_path / name)
    assert out == "torchrun train.py\n"


def test_compile_job_with_its_real_run_beside_it_drops_the_prerun(tmp_path: Path):
    # a file named for compiling that also runs the same command for real: the pre-run is the twin case
    src = "neuron_parallel_compile torchrun t.py\ntorchrun t.py\n"
    out, _ = migrate_text(src, "shell", ruleset(("NM511",)), tmp_path / "compile_and_train.sh")
    assert out.splitlines()[1:] == ["torchrun t.py"]


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
        ('"--distribution-strategy llm-training"', ("remove", None)),
        ('"$NEURON_CC_FLAGS --distribution-strategy=llm-training --retry_failed_compilation"', ("remove", None)),
        ('"--distribution-strategy=llm-training -O1"', ("rewrite", '"-O1"')),
        ("'--cache_dir=/c -O1 --enable-saturate-infinity'", ("rewrite", "'-O1 --enable-saturate-infinity'")),
        ("--distribution-strategy=llm-training", ("remove", None)),
        ('"--auto-cast=none"', ("mark", None)),
        ('"-O1"', None),
        ('"$(cat f) --distribution-strategy llm-training"', ("mark", None)),
    ],
)
def test_cc_flags_plan(raw, expected):
    got = cc_flags_plan(raw)
    assert (got[:2] if got else None) == expected


def test_cc_flags_combined_with_other_rules_on_one_line():
    src = 'NEURON_CC_FLAGS="--distribution-strategy llm-training -O1" XLA_USE_BF16=1 neuron_parallel_compile torchrun t.py\n'
    out = check(src)
    assert out.splitlines()[-1] == 'NEURON_CC_FLAGS="-O1" torchrun t.py'
    assert "NM513" not in out  # -O1 is a compiler option: nothing XLA-era is left to check
    src = src.replace("-O1", "--auto-cast none -O1")
    out = check(src)
    assert out.splitlines()[-1] == 'NEURON_CC_FLAGS="--auto-cast none -O1" torchrun t.py'
    assert out.startswith("# TODO(neuron-migrate NM513): Check that TorchNeuron's compiler still needs NEURON_CC_FLAGS "
                          "--auto-cast none")


def test_cc_flags_and_xla_var_in_one_export():
    assert check("export XLA_USE_BF16=1 NEURON_CC_FLAGS=--distribution-strategy=llm-training\npython t.py\n") == "python t.py\n"
    assert check("env XLA_USE_BF16=1 NEURON_CC_FLAGS=--distribution-strategy=llm-training python t.py\n") == "python t.py\n"


# ---------------------------------------------------------------------------------------------
# NEURON_EXTRACT_GRAPHS_ONLY (NM514)


def test_extract_graphs_only_marked_once_per_statement():
    src = 'if [ "$NEURON_EXTRACT_GRAPHS_ONLY" = 1 ] || [ "${NEURON_EXTRACT_GRAPHS_ONLY}" = true ]; then\n  S=5\nfi\n'
    out = check(src)
    assert out.count("TODO(neuron-migrate NM514)") == 1
    assert out.endswith(src)


# ---------------------------------------------------------------------------------------------
# Rule selection and ignore comments on lines several rules edit

COMBINED = 'XLA_USE_BF16=1 NEURON_CC_FLAGS="--distribution-strategy llm-training" neuron_parallel_compile torchrun t.py\n'


@pytest.mark.parametrize(
    "select,expected",
    [
        (("NM511",), 'XLA_USE_BF16=1 NEURON_CC_FLAGS="--distribution-strategy llm-training" torchrun t.py\n'),
        (("NM512",), 'NEURON_CC_FLAGS="--distribution-strategy llm-training" neuron_parallel_compile torchrun t.py\n'),
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
    cells = [without_bf16_marker("".join(c["source"])) for c in json.loads(out)["cells"]]
    # the cell was a pre-compilation step: without the wrapper it trains for real, which the marker says
    assert cells[0] == "%%bash\n# TODO(neuron-migrate NM511): " + STRIPPED_MARKER + "\ntorchrun t.py\n"
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
    assert without_bf16_marker(out) == ("```bash\ntorchrun t.py\n```\n\n```console\n$ python t.py\nok\n```\n"
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
    ('ENV NEURON_CC_FLAGS="--distribution-strategy=llm-training" A=1\n', "ENV A=1\n"),
    ("RUN <<EOF\nexport XLA_USE_BF16=1\nEOF\nENV XLA_USE_BF16=1\n", "RUN <<EOF\nEOF\n"),
    ("COPY <<EOF /x.sh\nexport XLA_USE_BF16=1\nEOF\nENV XLA_USE_BF16=1\n", "COPY <<EOF /x.sh\nexport XLA_USE_BF16=1\nEOF\n"),
    ("RUN bash <<-'SH'\n\tif true; then\n\t  export XLA_USE_BF16=1\n\tfi\n\tSH\n",
     "RUN bash <<-'SH'\n\tif true; then\n\t  :\n\tfi\n\tSH\n"),
    ("RUN <<EOF\nexport XLA_USE_BF16=1 # neuron-migrate: ignore\nEOF\n", None),
    ("RUN <<EOF\necho 'unbalanced\nexport XLA_USE_BF16=1\nEOF\n", None),
    ("RUN apt-get install -y aws-neuronx-runtime-lib aws-neuronx-tools\n", None),
    ("# escape=`\nENV XLA_USE_BF16=1\n", None),
    ("ENV XLA_USE_BF16=1 # neuron-migrate: ignore\n", None),
    ("FROM public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py311-sdk2.33.0-ubuntu24.04\n", None),
    ("FROM python:3.11-slim\n", None),
]


@pytest.mark.parametrize("before,after", DOCKER_CASES, ids=[c[0][:40] for c in DOCKER_CASES])
def test_dockerfile_env(before: str, after: str | None):
    assert check(before, "dockerfile") == (before if after is None else after)


@pytest.mark.parametrize("image,flagged", [
    ("public.ecr.aws/neuron/pytorch-training-neuronx:2.14.0-neuronx-py314-sdk2.33.0-ubuntu26.04", False),
    ("public.ecr.aws/neuron/pytorch-training-neuronx:2.13.0-neuronx-py312-ubuntu26.04", False),  # torch 2.13
    ("public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.32.0-ubuntu24.04", True),
    ("public.ecr.aws/neuron/pytorch-inference-neuronx:2.8.0-neuronx-py311-sdk2.26.1-ubuntu22.04", True),
    ("public.ecr.aws/neuron/pytorch-training-neuronx:latest", True),
    ("public.ecr.aws/neuron/pytorch-training-neuronx@sha256:0123", True),
    ("localhost:5000/pytorch-training-neuronx", True),  # a registry port is not a tag
    ("public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04", False),
])
def test_dockerfile_dlc_tags(image, flagged):
    src = f"FROM {image}\n"
    out = check(src, "dockerfile")
    assert out.endswith(src) and out.startswith("# TODO(neuron-migrate NM520)") == flagged


def test_dockerfile_xla_dlc_marked():
    src = "FROM 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-inference-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04 AS x\n"
    out = check(src, "dockerfile")
    assert out.startswith("# TODO(neuron-migrate NM520): Switch to a TorchNeuron image")
    assert out.endswith(src)


def test_dockerfile_cc_flags_rewrite_marked():
    out = check('ENV NEURON_CC_FLAGS="--distribution-strategy llm-training --auto-cast=none" A=1\n', "dockerfile")
    assert out.splitlines() == [
        "# TODO(neuron-migrate NM513): Check that TorchNeuron's compiler still needs NEURON_CC_FLAGS --auto-cast=none "
        "(set for the XLA stack).",
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
    "NEURON_CC_FLAGS=\"--distribution-strategy llm-training\" neuron_parallel_compile torchrun t.py",
    "export NEURON_CC_FLAGS=\"--distribution-strategy=llm-training -O1\"",
    "optimum-cli export neuron -m gpt2 --batch_size 1 --sequence_length 64 out/",
    "optimum-cli neuron cache synchronize",
    "optimum-cli neuron consolidate a b",
    "export XLA_USE_BF16=1 \\\n    NEURON_FUSE_SOFTMAX=1",
    "XLA_USE_BF16=1 \\\n  torchrun t.py \\\n    --bf16",
    "[ \"$NEURON_EXTRACT_GRAPHS_ONLY\" = 1 ] && S=5",
    "echo \"$XLA_USE_BF16\"",
    "mpirun -np 2 -x XLA_USE_BF16=1 -x FI_PROVIDER python t.py",
    "srun --export=ALL,XLA_USE_BF16=1 python t.py",
    "bash -c 'export XLA_USE_BF16=1; python t.py'",
    "eval 'export PJRT_DEVICE=NEURON'",
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
        kind = "dockerfile" if rule_id in ("NM520", "NM521", "NM522") else "shell"
        out, _ = migrate(doc.before + "\n", kind)
        out = without_bf16_marker(out)  # the examples show their own rule's edits
        assert out == doc.after + "\n", rule_id


# ---------------------------------------------------------------------------------------------
# Script flags of optimum-neuron's training arguments (NM515)

FLAG_CASES = [
    # (before, after) -- units without a shebang: NM516 leaves them alone
    ("torchrun --nproc_per_node=8 t.py --tensor_parallel_size 8\n", "TP_SIZE=8 torchrun --nproc_per_node=8 t.py\n"),
    ("torchrun --nproc_per_node=8 t.py --tensor_parallel_size=8 --bf16\n",
     "TP_SIZE=8 torchrun --nproc_per_node=8 t.py --bf16\n"),
    ("torchrun --nproc_per_node=8 t.py --tensor-parallel-size 8\n", "TP_SIZE=8 torchrun --nproc_per_node=8 t.py\n"),
    ('torchrun --nproc_per_node=8 t.py --tensor_parallel_size "$TP"\n',
     'TP_SIZE="$TP" torchrun --nproc_per_node=8 t.py\n'),
    ("torchrun --nproc_per_node=8 t.py --tensor_parallel_size ${TP:-8}\n",
     "TP_SIZE=${TP:-8} torchrun --nproc_per_node=8 t.py\n"),
    ("torchrun --nproc_per_node=8 t.py --pipeline_parallel_size 1 --tensor_parallel_size 8\n",
     "PP_SIZE=1 TP_SIZE=8 torchrun --nproc_per_node=8 t.py\n"),
    # --zero_1: FSDP_SIZE only when on and ranks are left beside TP
    ("torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --zero_1 true\n",
     "TP_SIZE=8 FSDP_SIZE=4 torchrun --nproc_per_node=32 t.py\n"),
    ("torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --zero_1\n",
     "TP_SIZE=8 FSDP_SIZE=4 torchrun --nproc_per_node=32 t.py\n"),
    ("torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --zero_1=True --bf16\n",
     "TP_SIZE=8 FSDP_SIZE=4 torchrun --nproc_per_node=32 t.py --bf16\n"),
    ("torchrun --nproc_per_node=8 t.py --tensor_parallel_size 8 --zero_1 true\n",
     "TP_SIZE=8 torchrun --nproc_per_node=8 t.py\n"),
    ("torchrun --nproc_per_node=8 --nnodes=2 t.py --tensor_parallel_size 8 --zero_1 1\n",
     "TP_SIZE=8 FSDP_SIZE=2 torchrun --nproc_per_node=8 --nnodes=2 t.py\n"),
    ("torchrun --nproc_per_node=32 --nnodes=$N t.py --tensor_parallel_size 8 --zero_1 true\n",
     "TP_SIZE=8 FSDP_SIZE=$((4 * N)) torchrun --nproc_per_node=32 --nnodes=$N t.py\n"),
    ("NP=32\ntorchrun --nproc_per_node $NP t.py --tensor_parallel_size 8 --zero_1 true\n",
     "NP=32\nTP_SIZE=8 FSDP_SIZE=4 torchrun --nproc_per_node $NP t.py\n"),
    ("FSDP_SIZE=2 torchrun --nproc_per_node=16 t.py --tensor_parallel_size 8 --zero_1 true\n",
     "TP_SIZE=8 FSDP_SIZE=2 torchrun --nproc_per_node=16 t.py\n"),
    # removed flags, with and without values
    ("torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 --disable_sequence_parallel --skip_cache_push true "
     "--async_save=false --use_autocast --bf16\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py --bf16\n"),
    # wrappers
    ("srun neuron_parallel_compile torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2\n",
     "TP_SIZE=2 srun torchrun --nproc_per_node=2 t.py\n"),
    ("XLA_USE_BF16=1 torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py\n"),
    ("MALLOC_ARENA_MAX=64 torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2\n",
     "TP_SIZE=2 MALLOC_ARENA_MAX=64 torchrun --nproc_per_node=2 t.py\n"),
    ("uv run torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 | tee log\n",
     "TP_SIZE=2 uv run torchrun --nproc_per_node=2 t.py | tee log\n"),
    ("python -m torch.distributed.run --nproc_per_node 2 t.py --tensor_parallel_size 2 > log 2>&1\n",
     "TP_SIZE=2 python -m torch.distributed.run --nproc_per_node 2 t.py > log 2>&1\n"),
    ("cd x && torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 && cd ..\n",
     "cd x && TP_SIZE=2 torchrun --nproc_per_node=2 t.py && cd ..\n"),
    ("if true; then\n  torchrun --nproc_per_node=2 t.py \\\n    --tensor_parallel_size 2\nfi\n",
     "if true; then\n  TP_SIZE=2 torchrun --nproc_per_node=2 t.py\nfi\n"),
    ("torchrun --nproc_per_node=2 t.py \\\n    --tensor_parallel_size 2 \\\n    --bf16\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py \\\n    --bf16\n"),
    ("accelerate launch --num_processes 2 t.py --tensor_parallel_size 2\n",
     "TP_SIZE=2 accelerate launch --num_processes 2 t.py\n"),
    # --torch_compile true for Trainer scripts (optimum-neuron training flags on the launch)
    ("torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 --output_dir o\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py --output_dir o --torch_compile true\n"),
    ("torchrun --nproc_per_node=2 t.py \\\n    --output_dir o \\\n    --tensor_parallel_size 2\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py \\\n    --output_dir o \\\n    --torch_compile true\n"),
    ("torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 --output_dir o --torch_compile false\n",
     "TP_SIZE=2 torchrun --nproc_per_node=2 t.py --output_dir o --torch_compile false\n"),
    # --output_dir alone does not make a Trainer script (an argparse loop has one too): no --torch_compile
    ("export XLA_USE_BF16=1\npython t.py --output_dir o 2>&1 | tee log\n",
     "python t.py --output_dir o 2>&1 | tee log\n"),
    # not a launch of a Python script, or not a Neuron script: untouched
    ("torchrun --nproc_per_node=2 t.py --output_dir o\n", None),
    ("echo torchrun t.py --tensor_parallel_size 8\n", None),
    ("OUT=$(torchrun t.py --tensor_parallel_size 8)\n", None),
    ("cat <<EOF\ntorchrun t.py --tensor_parallel_size 8\nEOF\n", None),
    ("# torchrun t.py --tensor_parallel_size 8\n", None),
    ("torchrun t.py --tensor_parallel_size 8  # neuron-migrate: ignore[NM515]\n", None),
    # other tools' own flags
    ("export XLA_USE_BF16=1\nvllm serve m --tensor-parallel-size 8\n", "vllm serve m --tensor-parallel-size 8\n"),
    ("export XLA_USE_BF16=1\npython -m vllm.entrypoints.openai.api_server --tensor-parallel-size 8\n",
     "python -m vllm.entrypoints.openai.api_server --tensor-parallel-size 8\n"),
]


@pytest.mark.parametrize("before,after", FLAG_CASES, ids=[c[0][:50] for c in FLAG_CASES])
def test_launch_flag_forms(before: str, after: str | None):
    out = check_optimum(before, ignore=("NM516",))
    assert "\n".join(x for x in out.splitlines() if "TODO(neuron-migrate" not in x) + "\n" == (
        before if after is None else after)


def _markers(out: str) -> list[str]:
    return [x.strip() for x in out.splitlines() if "TODO(neuron-migrate NM515)" in x]


def test_layout_markers():
    dp = check_optimum("torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8\n")
    assert _markers(dp) == [
        "# TODO(neuron-migrate NM515): Set FSDP_SIZE=4 to shard the optimizer over the 4 data-parallel groups, as "
        "optimum-neuron's default zero_1 did."]
    # zero_1 off: the replicas are what the old run did (no decision left)
    assert not _markers(check_optimum("torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --zero_1 false\n"))
    assert "a multiple of TP_SIZE=8: torchrun starts 12 processes" in check_optimum("torchrun --nproc_per_node=12 t.py --tensor_parallel_size 8\n")
    # FSDP_SIZE x TP_SIZE dividing the process count: replicas of the sharded layout; not dividing it: a marker
    assert not _markers(check_optimum("FSDP_SIZE=2 torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8\n"))
    assert "a multiple of TP_SIZE x FSDP_SIZE = 24: torchrun starts 32 processes" in check_optimum(
        "FSDP_SIZE=3 torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8\n")
    assert "Launch this script with torchrun --nproc_per_node=4" in check_optimum("python t.py --tensor_parallel_size 4\n")
    assert not _markers(check_optimum("torchrun --nproc_per_node=8 t.py --tensor_parallel_size 8\n"))
    assert not _markers(check_optimum("torchrun --nproc_per_node=$N t.py --tensor_parallel_size 8 --zero_1 false\n"))
    zero = check_optimum("torchrun --nproc_per_node=$N t.py --tensor_parallel_size 8 --zero_1 true\n")
    assert "Set FSDP_SIZE=<processes / TP_SIZE>" in zero and "--zero_1" not in zero.splitlines()[-1]
    assert "instead of PP_SIZE: a migrated Trainer script has no pipeline stages" in check_optimum(
        "torchrun --nproc_per_node=8 t.py --pipeline_parallel_size 2\n")


def test_flags_held_in_variables_are_marked():
    # expanded by something that is not a Python launch: the flags cannot be followed
    src = 'ARGS="--tensor_parallel_size 8 --zero_1 true"\nbash run.sh $ARGS\n'
    out = check(src)
    assert out.startswith("# TODO(neuron-migrate NM515): Move --tensor_parallel_size, --zero_1 to TP_SIZE/FSDP_SIZE")
    assert out.endswith(src)
    arr = "ARGS=(--tensor_parallel_size 8)\nbash run.sh --zero_1\n"
    assert check(arr).count("TODO(neuron-migrate NM515)") == 2


@pytest.mark.parametrize("src,expected", [
    # a scalar expanded unquoted into a launch: the flags go, TP_SIZE/FSDP_SIZE go to the launch
    ('ARGS="--tensor_parallel_size 8 --zero_1 true --bf16"\ntorchrun --nproc_per_node 32 t.py $ARGS\n',
     'ARGS="--bf16"\nTP_SIZE=8 FSDP_SIZE=4 torchrun --nproc_per_node 32 t.py $ARGS\n'),
    ("ARGS='--zero_1 false --bf16'\npython t.py ${ARGS}\n", "ARGS='--bf16'\npython t.py ${ARGS}\n"),
    ("A=--async_save\npython t.py $A --bf16\n", "A=\npython t.py $A --bf16\n"),
    # arrays, also on several lines, with quoted elements kept as written
    ('a=(--bf16 --async_save --zero_1)\npython t.py "${a[@]}"\n', 'a=(--bf16)\npython t.py "${a[@]}"\n'),
    ('a=(\n  --tensor_parallel_size "$TP"\n  "--lr" \'1e-4\'\n)\ntorchrun --nproc_per_node 2 t.py ${a[@]}\n',
     'a=(\n  "--lr" \'1e-4\'\n)\nTP_SIZE="$TP" torchrun --nproc_per_node 2 t.py ${a[@]}\n'),
    ('a=(--zero_1)\npython t.py "${a[@]}"\n', 'a=()\npython t.py "${a[@]}"\n'),
    # a continued double-quoted value: the continuation of the last word left goes with the flags
    ('export X="--model m \\\n    --tensor_parallel_size 2"\ntorchrun --nproc_per_node 2 t.py $X\n',
     'export X="--model m"\nTP_SIZE=2 torchrun --nproc_per_node 2 t.py $X\n'),
    # one variable, two launches: edited once, each launch gets its environment
    ('A="--tensor_parallel_size 2"\ntorchrun --nproc_per_node 2 a.py $A\ntorchrun --nproc_per_node 2 b.py $A\n',
     'A=""\nTP_SIZE=2 torchrun --nproc_per_node 2 a.py $A\nTP_SIZE=2 torchrun --nproc_per_node 2 b.py $A\n'),
])
def test_flags_held_in_variables_are_edited(src, expected):
    assert check_optimum(src, ignore=("NM516",)) == expected


@pytest.mark.parametrize("src", [
    'A="--zero_1 true"\nA="$A --bf16"\npython t.py $A\n',  # assigned twice
    'A="--zero_1 true"\npython t.py "$A"\n',  # one quoted word: the script gets "--zero_1 true"
    'A="--zero_1 $(cat f)"\npython t.py $A\n',  # a command substitution
    'A="--zero_1 \\"x y\\""\npython t.py $A\n',  # escaped quotes
    'A=(--zero_1 # on\n)\npython t.py "${A[@]}"\n',  # a comment in the array
    'A="--zero_1 ${B:-a b}"\npython t.py $A\n',  # blanks inside ${...}
    'A=(--zero_1)\npython t.py $A\n',  # an array expanded as a scalar
    'A="--zero_1"\npython t.py $A\nlog "$A"\n',  # read by another command
    'A+=(--zero_1)\npython t.py "${A[@]}"\n',
])
def test_flags_held_in_variables_that_cannot_be_followed_are_marked(src):
    out = check(src, ignore=("NM516",))
    assert out.endswith(src) and "TODO(neuron-migrate NM515)" in out


def test_launcher_held_in_a_variable():
    src = ('L="torchrun --nproc_per_node=32 --nnodes=$NODES"\nNODES=2\n'
           "$L t.py --tensor_parallel_size 8 --zero_1 true\n")
    assert check(src, ignore=("NM516",)).splitlines()[-1] == "TP_SIZE=8 FSDP_SIZE=8 $L t.py"


def test_flags_on_a_notebook_line():
    src = _nb(["!XLA_USE_BF16=1 torchrun --nproc_per_node=2 t.py --tensor_parallel_size 2 --zero_1 false --output_dir o\n"])
    out, findings = migrate(src, "notebook")
    cell = without_bf16_marker("".join(json.loads(out)["cells"][0]["source"]))
    assert cell == ("!TP_SIZE=2 HF_DEACTIVATE_ASYNC_LOAD=1 torchrun --nproc_per_node=2 t.py --output_dir o "
                    "--torch_compile true\n")
    assert {"NM512", "NM515", "NM516"} <= {f.rule for f in findings}
    assert migrate(out, "notebook")[0] == out


# ---------------------------------------------------------------------------------------------
# HF_DEACTIVATE_ASYNC_LOAD (NM516)


def test_async_load_export_after_the_header():
    out = check("#!/bin/bash\n#SBATCH -N 1\n\n# train\nset -e\nexport XLA_USE_BF16=1\npython t.py\n")
    assert out == "#!/bin/bash\n#SBATCH -N 1\n\n# train\nset -e\nexport HF_DEACTIVATE_ASYNC_LOAD=1\npython t.py\n"
    out = check("#!/bin/bash\nset -euo pipefail  # strict\nset -e; pip install optimum-neuron\n"
                "export XLA_USE_BF16=1\npython t.py\n")
    assert out == ("#!/bin/bash\nset -euo pipefail  # strict\nexport HF_DEACTIVATE_ASYNC_LOAD=1\n"
                   'set -e; pip install "transformers>=5.23" "accelerate>=1.15"\npython t.py\n')
    out = check("#!/bin/sh\n# a job\n\nXLA_USE_BF16=1 python t.py\n")
    assert out == "#!/bin/sh\nexport HF_DEACTIVATE_ASYNC_LOAD=1\n# a job\n\npython t.py\n"


@pytest.mark.parametrize("src", [
    "#!/bin/bash\nexport XLA_USE_BF16=1\n",  # launches nothing
    "#!/bin/bash\npython t.py\n",  # nothing else changed
    "#!/bin/bash\nexport HF_DEACTIVATE_ASYNC_LOAD=0\nexport XLA_USE_BF16=1\npython t.py\n",  # set already
    "export XLA_USE_BF16=1\npython t.py\n",  # no shebang: a fragment, a notebook line
    "#!/bin/bash\nexport XLA_USE_BF16=1\ncat <<EOF\npython t.py\nEOF\n",  # only in a heredoc
])
def test_async_load_left_alone(src: str):
    out, findings = migrate(src)
    assert "NM516" not in {f.rule for f in findings}


def test_async_load_prefix_in_fragments():
    """Without a shebang (a notebook line, a Markdown block) only the launches NM515 migrated get it."""
    src = "XLA_USE_BF16=1 python eval.py\ntorchrun --nproc_per_node=8 t.py --tensor_parallel_size 8 | tee log\n"
    assert check_optimum(src) == ("python eval.py\n"
                          "TP_SIZE=8 HF_DEACTIVATE_ASYNC_LOAD=1 torchrun --nproc_per_node=8 t.py | tee log\n")
    assert check_optimum(src, select=("NM516",)) == src


def test_async_load_selection_and_ignore():
    src = "#!/bin/bash\nset -e\nexport XLA_USE_BF16=1\ntorchrun t.py\n"
    assert check(src, select=("NM516",)) == src  # no other rule ran: nothing changed
    assert check(src, ignore=("NM516",)) == "#!/bin/bash\nset -e\ntorchrun t.py\n"


# ---------------------------------------------------------------------------------------------
# RUN pip install in Dockerfiles (NM522)

PIP_CASES = [
    ("RUN pip install optimum-neuron==0.4.5 datasets\n",
     'RUN pip install "transformers>=5.23" "accelerate>=1.15" datasets\n'),
    ("RUN pip install transformers==4.40.0 optimum-neuron\n",
     'RUN pip install "transformers>=5.23" "accelerate>=1.15"\n'),
    ("RUN pip3 install -U 'optimum[neuronx,onnxruntime]' datasets\n",
     "RUN pip3 install -U 'optimum[onnxruntime]' 'torch-neuronx' 'transformers>=5.23' 'accelerate>=1.15' datasets\n"),
    ("RUN python3 -m pip install torch-neuronx==2.1.2.2.3.0 neuronx-cc==2.15.* datasets\n",
     "RUN python3 -m pip install torch-neuronx neuronx-cc datasets\n"),
    ("RUN uv pip install --system torch-xla torch-neuronx datasets\n",
     "RUN uv pip install --system torch-neuronx datasets\n"),
    ("RUN pip install \\\n    torch-xla \\\n    torch-neuronx \\\n    datasets\n",
     "RUN pip install \\\n    torch-neuronx \\\n    datasets\n"),
    ("RUN pip install torch-neuronx \\\n    torch-xla\n", "RUN pip install torch-neuronx\n"),
    ('RUN pip install "optimum-neuron; python_version >= \'3.10\'" torch-neuronx\n',
     'RUN pip install "transformers>=5.23; python_version >= \'3.10\'" "accelerate>=1.15; python_version >= \'3.10\'"'
     " torch-neuronx\n"),
    # the installer held in a variable named for it
    ("RUN ${PIP} install --no-cache-dir torch-xla torch-neuronx datasets\n",
     "RUN ${PIP} install --no-cache-dir torch-neuronx datasets\n"),
    ("RUN $PYTHON -m pip install torch-neuronx torch-xla\n", "RUN $PYTHON -m pip install torch-neuronx\n"),
    ("RUN $CMD install torch-neuronx torch-xla\n", None),  # not named for an installer
    # kept: no old-stack package, variables, files, JSON form, comments inside, other commands
    ("RUN pip install transformers==4.40.0 datasets\n", None),
    ("RUN pip install $PKGS torch-xla\n", None),
    ('RUN ["pip", "install", "optimum-neuron"]\n', 'RUN ["pip", "install", "transformers>=5.23", "accelerate>=1.15"]\n'),
    ('RUN ["pip", "install", "torch-xla"]\n', None),  # torch-xla alone: maybe a TPU image
    ('RUN ["pip", "install", "optimum-neuron", "datasets"]\n',
     'RUN ["pip", "install", "transformers>=5.23", "accelerate>=1.15", "datasets"]\n'),
    ('RUN ["python3", "-m", "pip", "install",\\\n  "datasets",\\\n  "torch-xla", "torch-neuronx==2.1.2.2.3.0"]\n',
     'RUN ["python3", "-m", "pip", "install",\\\n  "datasets",\\\n  "torch-neuronx"]\n'),
    ('RUN --mount=type=cache,target=/c ["pip", "install", "torch-xla", "torch-neuronx", "x"]\n',
     'RUN --mount=type=cache,target=/c ["pip", "install", "torch-neuronx", "x"]\n'),
    ('RUN ["pip", "install", "torch-neuronx", "torch-xla"]\n', 'RUN ["pip", "install", "torch-neuronx"]\n'),
    ('RUN ["sh", "-c", "pip install optimum-neuron"]\n', None),  # a shell string inside: not edited
    ("RUN ['pip', 'install', 'optimum-neuron']\n", None),  # not JSON: a shell-form command
    ("RUN <<EOF\nset -e\npip install optimum-neuron==0.4.5 \\\n    datasets\nEOF\n",
     'RUN <<EOF\nset -e\npip install "transformers>=5.23" "accelerate>=1.15" \\\n    datasets\nEOF\n'),
    ("RUN python3 <<PY\nprint('pip install optimum-neuron')\nPY\n", None),
    ("RUN echo optimum-neuron==0.4.5 > req.txt\n", None),
    ("RUN pip install -r requirements.txt\n", None),
    ("RUN pip install torch-xla==2.1.0  # neuron-migrate: ignore\n", None),
]


@pytest.mark.parametrize("before,after", PIP_CASES, ids=[c[0][:50] for c in PIP_CASES])
def test_dockerfile_pip_install(before: str, after: str | None):
    out = check(before, "dockerfile")
    assert "\n".join(x for x in out.splitlines() if "TODO(neuron-migrate" not in x) + "\n" == (
        before if after is None else after)


def test_dockerfile_pip_install_markers():
    src = "FROM base-neuronx\nRUN pip install --require-hashes torch-xla==2.1.0 --hash=sha256:00\n"
    out = check(src, "dockerfile")
    assert out.splitlines()[1].startswith("# TODO(neuron-migrate NM522): This pip install checks hashes: remove torch-xla")
    assert out.endswith("RUN pip install --require-hashes torch-xla==2.1.0 --hash=sha256:00\n")
    out = check("RUN pip install optimum-neuron==0.4.5 && rm -rf /root/.cache\n", "dockerfile")
    assert 'RUN pip install "transformers>=5.23" "accelerate>=1.15" && rm -rf /root/.cache' in out
    out = check("RUN pip install torch-xla libneuronxla\n", "dockerfile")
    assert out.endswith("\nRUN pip install torch-neuronx\n")
    out = check("RUN pip install torch-neuronx\nRUN pip install torch-xla libneuronxla\n", "dockerfile")
    assert "Replace this pip install of old Neuron stack packages" in out
    assert out.endswith("RUN pip install torch-xla libneuronxla\n")
    assert check("FROM python:3.11\nRUN pip install torch-xla[tpu]\n", "dockerfile") == (
        "FROM python:3.11\nRUN pip install torch-xla[tpu]\n")  # a TPU image
    out = check("RUN pip install optimum-neuron torch==2.1.2\n", "dockerfile")
    assert "Remove this torch pin, or set it to the torch version that your torch-neuronx release pins" in out


# ---------------------------------------------------------------------------------------------
# Random combinations with the launch rules: still valid and idempotent

LAUNCH_TARGETS = [
    "torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --zero_1 true --output_dir o",
    "torchrun --nproc_per_node=8 t.py \\\n    --tensor_parallel_size 8 \\\n    --zero_1 false",
    "python t.py --async_save --output_dir o",
    "XLA_USE_BF16=1 torchrun t.py --tensor_parallel_size=2 --output_dir=o",
    "neuron_parallel_compile torchrun --nproc_per_node 2 t.py --use_autocast true",
    "srun torchrun --nproc_per_node=32 --nnodes=$N t.py --tensor_parallel_size 8 --zero_1",
    'ARGS="--tensor_parallel_size 2 --zero_1 true"\ntorchrun --nproc_per_node 2 t.py $ARGS',
    "A=(\n  --bf16\n  --async_save\n)\npython t.py \"${A[@]}\"",
]


@pytest.mark.skipif(not HAS_BASH, reason="needs bash")
def test_random_launch_combinations_stay_valid():
    rng = random.Random(515)
    checked = 0
    for n in range(200):
        parts = ["#!/bin/bash" if n % 2 else "set -e"]
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.5:
                parts.append(_wrap(rng, rng.choice(LAUNCH_TARGETS)))
            elif r < 0.8:
                parts.append(_wrap(rng, rng.choice(TARGETS)))
            else:
                parts.append(_wrap(rng, rng.choice(PLAIN)))
        src = "\n".join(parts) + "\n"
        if not bash_ok(src)[0]:
            continue
        check(src, select=(None, ("NM515",), ("NM515", "NM516"), ("NM511", "NM515"))[n % 4])
        checked += 1
    assert checked > 150


# ---------------------------------------------------------------------------------------------
# pip install in shell units (NM523)

SHELL_PIP_CASES = [
    ("pip install optimum-neuron\n", 'pip install "transformers>=5.23" "accelerate>=1.15"\n'),
    ("sudo pip3 install -q optimum-neuron==0.4.5 datasets | tail -1\n",
     'sudo pip3 install -q "transformers>=5.23" "accelerate>=1.15" datasets | tail -1\n'),
    ("pip install torch-neuronx==2.1.2.2.3.0 && python t.py\n", "pip install torch-neuronx && python t.py\n"),
    ("pip install torch-neuronx \\\n  torch-xla==2.1.0\n", "pip install torch-neuronx\n"),
    ("pip install torch-xla==2.1.0\n", None),  # no Neuron name: maybe a TPU project
    ('pip install "$PKG" optimum-neuron\n', 'pip install "$PKG" "transformers>=5.23" "accelerate>=1.15"\n'),
    ("echo pip install optimum-neuron\n", None),
    ("OUT=$(pip install optimum-neuron)\n", None),
    ("cat <<EOF\npip install optimum-neuron\nEOF\n", None),
    ("pip install optimum-neuron  # neuron-migrate: ignore[NM523]\n", None),
]


@pytest.mark.parametrize("before,after", SHELL_PIP_CASES, ids=[c[0][:50] for c in SHELL_PIP_CASES])
def test_shell_pip_install(before: str, after: str | None):
    out = check(before)
    assert "\n".join(x for x in out.splitlines() if "TODO(neuron-migrate" not in x) + "\n" == (
        before if after is None else after)


def test_shell_pip_install_left_empty_is_marked():
    out = check("pip install torch-neuronx\npip install neuronx-distributed\n")
    assert "TODO(neuron-migrate NM523): Replace this pip install of old Neuron stack packages" in out
    assert out.endswith("pip install neuronx-distributed\n")


def test_notebook_pip_line():
    src = _nb(["!pip install optimum-neuron\n", "import torch"])
    out, findings = migrate(src, "notebook")
    cell = without_bf16_marker("".join(json.loads(out)["cells"][0]["source"]))
    assert cell == '!pip install "transformers>=5.23" "accelerate>=1.15"\nimport torch'
    assert "NM523" in {f.rule for f in findings}
    assert migrate(out, "notebook")[0] == out


def test_launch_edits_keep_crlf():
    src = ("#!/bin/bash\r\n: optimum-neuron\r\nexport XLA_USE_BF16=1\r\ntorchrun --nproc_per_node=8 t.py \\\r\n"
           "  --tensor_parallel_size 8 \\\r\n  --output_dir o\r\necho done\r\n")
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
    assert without_bf16_marker(result.new_bytes.decode()).encode() == (
        b"#!/bin/bash\r\nexport HF_DEACTIVATE_ASYNC_LOAD=1\r\n: optimum-neuron\r\nTP_SIZE=8 torchrun --nproc_per_node=8 t.py \\\r\n"
        b"  --output_dir o \\\r\n  --torch_compile true\r\necho done\r\n")


def test_markers_of_two_rules_on_one_launch_are_idempotent():
    src = ("neuron_parallel_compile torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --max_steps 10\n"
           "torchrun --nproc_per_node=32 t.py --tensor_parallel_size 8 --max_steps 100\n")
    out = check(src)
    assert out.count("TODO(neuron-migrate NM515)") == 2 and out.count("TODO(neuron-migrate NM511)") == 1


def test_torch_compile_only_in_neuron_scripts():
    assert check("# see optimum-cli docs\ntorchrun t.py --output_dir o\n") == (
        "# see optimum-cli docs\ntorchrun t.py --output_dir o\n")
    assert check("torchrun t.py --skip_cache_push --output_dir o\n", ignore=("NM516",)) == (
        "torchrun t.py --output_dir o --torch_compile true\n")


def test_python_heredocs_are_python():
    """The body of a heredoc fed to a Python interpreter goes to the Python rules (any spelling of the
    interpreter, arguments, <<-); other heredocs, and bodies the shell expands, do not."""
    from migrator.filekinds.shell import _python_heredocs

    lines = [
        "/opt/venv/bin/python3.11 train.py --x 1 <<-'PY'\n", "\timport torch\n", "\tPY\n",
        "cat <<EOF\n", "import torch_xla\n", "EOF\n",
        "python <<EOF\n", "print('$HOME')\n", "EOF\n",
        "python3 - <<PY\n", "print(1)\n", "PY\n",
    ]
    found = [(h.start, h.end, h.expanded) for h in _python_heredocs(lines)]
    assert found == [(1, 2, False), (7, 8, True), (10, 11, False)]
    src = "python3 - <<'PY'\nimport torch_xla.core.xla_model as xm\nprint(xm.xla_device())\nPY\n"
    assert check(src) == "python3 - <<'PY'\nimport torch\nprint(torch.device(\"neuron\"))\nPY\n"


@pytest.mark.parametrize("src", [
    "nohup python -m vllm.entrypoints.openai.api_server --model m --tensor-parallel-size 64 &\n",
    "VLLM_NEURON_FRAMEWORK=x python3 -m vllm.entrypoints.openai.api_server --tensor-parallel-size=2\n",
    "timeout 600 vllm serve m --tensor-parallel-size 8\n",
])
def test_other_tools_behind_wrappers_keep_their_tensor_parallel_flag(src):
    """vLLM & co. have a --tensor-parallel-size of their own: no NM515 marker asks to move it, whatever runs them."""
    out = check("export XLA_USE_BF16=1\n" + src)
    assert "NM515" not in out and src.strip() in out


# ---------------------------------------------------------------------------------------------
# an "xla" device or backend given to the launched script (NM515)


@pytest.mark.parametrize("launch, flag", [
    ("torchrun --nproc_per_node 32 pretrain_gpt.py --distributed-backend xla --tp 8", "--distributed-backend"),
    ("python infer.py --device=xla:0", "--device"),
    ("srun torchrun train.py --accelerator xla", "--accelerator"),
])
def test_xla_value_of_a_device_flag_marked_in_a_neuron_launcher(launch: str, flag: str):
    src = f"# Trainium (Neuron) job\n{launch}\n"
    out = check(src)
    assert out == (f"# Trainium (Neuron) job\n# TODO(neuron-migrate NM515): Pass neuron instead of xla to {flag} if the "
                   f"script takes it: TorchNeuron has no xla device or backend.\n{launch}\n")


@pytest.mark.parametrize("src", [
    "python train.py --device xla\n",  # nothing says Neuron: a TPU launcher's xla is right
    "# Neuron job\npython train.py --run-name xla --device cpu\n",  # not a device's value
    "# Neuron job\necho --device xla\n",  # no launch
])
def test_xla_value_left_alone_where_it_is_no_neuron_device(src: str):
    assert check(src) == src


def test_a_script_the_shell_rules_cannot_parse_says_so():
    """A launcher with an unclosed `if` that names the old stack: none of the shell rules can read it, so a marker
    right after the shebang says so (it was reported "unchanged", with nothing in the file); a second run adds
    none, and a script that does not name the old stack is left alone."""
    src = '#!/bin/bash\nexport XLA_USE_BF16=1\nif [ -n "$X" ]; then\n  echo hi\ntorchrun train.py\n'
    result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
    new = result.new_bytes.decode()
    lines = new.splitlines()
    assert lines[0] == "#!/bin/bash" and "Migrate this script by hand: the shell rules cannot parse it" in lines[1]
    assert lines[2:] == src.splitlines()[1:]
    assert [f.fix for f in result.findings] == ["manual"]
    again = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), new.encode())
    assert again.status == "unchanged"
    plain = '#!/bin/bash\nif [ -n "$X" ]; then\n  echo hi\n'
    assert process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), plain.encode()).status == "unchanged"
    # without a shebang the marker is the first line; a script that does not lex is one the rules cannot read too
    for src in ("echo 'unbalanced\nexport XLA_USE_BF16=1\n", "if true; then\nexport XLA_USE_BF16=1\n"):
        result = process(Candidate(Path("s.sh"), "s.sh", "shell"), ruleset(), src.encode())
        assert result.new_bytes.decode().splitlines()[1:] == src.splitlines()
        assert "the shell rules cannot parse it" in result.new_bytes.decode().splitlines()[0]
