"""Project files (NM5xx): everything around the Python code. NM501 old-stack packages in
dependency declarations, NM502 hashed requirements, NM503 libraries pinned too low, NM504 torch
pinned too low (``dependencies.py``, requirements files and pyproject.toml); NM505 setup.py
(``setup_py.py``); NM510 ``optimum-cli export neuron`` / cache commands, NM511
``neuron_parallel_compile``, NM512 XLA-only environment variables, NM514
``NEURON_EXTRACT_GRAPHS_ONLY``, NM526 XLA-era container images pulled or run (``shell.py``: launch, Slurm and shell scripts); NM513
``NEURON_CC_FLAGS`` in scripts and Dockerfiles (``neuron_cc_flags.py``); NM515 launch flags of the
training arguments, NM516 ``HF_DEACTIVATE_ASYNC_LOAD``, NM523 ``pip install`` command lines
(``launch_flags.py``); NM520 the XLA-era base image, NM527 a base image whose Python is too old for the
migrated stack, NM521 ``ENV``, NM522 ``RUN pip install`` (``dockerfile.py``); NM517 shell commands that Python code runs, NM525 old launch lines shown in docstrings and --help texts (``commands.py``); NM524 SageMaker
deployment code that picks an XLA-era Neuron container (``deployment.py``). ``shell_syntax.py`` (the bash lexer and parser) and ``shell_plans.py`` (shell
units and the edit plan the shell and Dockerfile rules share) are their common ground;
``xla_env.py`` says which environment variables only the old stack reads."""

from codemods.project import commands, dependencies, deployment, dockerfile, launch_flags, neuron_cc_flags, setup_py, shell

RULES = (
    *commands.RULES,
    *dependencies.RULES,
    *deployment.RULES,
    *dockerfile.RULES,
    *launch_flags.RULES,
    *neuron_cc_flags.RULES,
    *setup_py.RULES,
    *shell.RULES,
)
