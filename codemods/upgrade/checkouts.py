"""Checkouts of an old release of the Hugging Face libraries' repositories (NM624).

A notebook or launcher that runs the libraries' example scripts often clones the repository at the tag
of the release it pinned (``git clone https://github.com/huggingface/transformers --branch v4.52.3``,
then ``python transformers/examples/pytorch/.../run_clm.py --overwrite_output_dir ...``). The migration
raises the pin (NM503/NM523) to the release the migrated code needs; the scripts of the old tag pass
arguments that release rejects, and are not migrated (they are not in the project). A marker on the
clone says which tag matches the installed release. The target versions are those of the generated
upgrade data (``codemods.upgrade.data``)."""

from __future__ import annotations

import re

from codemods.project.dependency_policy import MIGRATES_TO_TARGET, migrates_to_target
from codemods.project.shell_plans import ShellPlan, _shell_plan, plan_for
from codemods.upgrade.data import data
from migrator.rules import TextRule

#: the repositories whose tags are the libraries' releases: repository -> library
REPOSITORIES = {"transformers": "transformers", "trl": "trl", "diffusers": "diffusers", "peft": "peft",
                "accelerate": "accelerate"}
_REPOSITORY = re.compile(r"github\.com[/:]huggingface/(" + "|".join(REPOSITORIES) + r")(?:\.git)?/?$")
_TAG = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")

MARKER = "Clone {library} at v{target} (the release installed now): the scripts of {tag} pass arguments it rejects."


def _older(tag: str, target: str) -> bool:
    """Whether release ``tag`` (``v4.52.3``) is older than ``target`` (``5.23.0``) in its major (minor for 0.x)."""
    m, t = _TAG.fullmatch(tag), _TAG.match(target)
    if m is None or t is None:
        return False
    old, new = (int(m.group(1)), int(m.group(2))), (int(t.group(1)), int(t.group(2)))
    return old[0] < new[0] or (old[0] == new[0] == 0 and old[1] < new[1])


def old_checkout(values: list[str | None]) -> tuple[str, str] | None:
    """(library, tag) of a ``git clone <HF repository> --branch <old tag>`` command's words, else None."""
    if len(values) < 3 or values[0] != "git" or "clone" not in values[1:3]:
        return None
    library = next((REPOSITORIES[m.group(1)] for v in values if v and (m := _REPOSITORY.search(v))), None)
    if library is None:
        return None
    tag = None
    for k, v in enumerate(values):
        if v in ("--branch", "-b") and k + 1 < len(values):
            tag = values[k + 1]
        elif v and v.startswith("--branch="):
            tag = v.partition("=")[2]
    target = data().target_versions.get(library)
    if tag is None or target is None or not _older(tag, target):
        return None
    return library, tag


class OldReleaseCheckout(TextRule):
    id = "NM624"
    title = "git clone of a Hugging Face library's repository at a tag older than the release installed now"
    fix = "manual"
    kinds = ("shell",)
    triggers = ("github.com/huggingface/",)
    #: the run migrates old-stack code (so the project's pins are raised to the targets)
    project_probes = MIGRATES_TO_TARGET
    markers = ((MARKER, """The project now installs the release the migrated code needs (its pin was raised:
                NM503/NM523), but this clone checks out an older release's tag, whose example scripts pass
                arguments the installed release rejects (Transformers 5 has no --overwrite_output_dir, for
                instance) and are not migrated, not being part of the project. Clone the tag of the installed
                release, or migrate the copy you run."""),)
    why = """
        Notebooks and launchers that run the libraries' example scripts clone the repository at
        the tag of the release they pinned (`git clone https://github.com/huggingface/transformers
        --branch v4.52.3`). The migration raises that pin to the release the migrated code needs
        (transformers 5.23, trl 1.16, ...); the old tag's scripts pass arguments the new release
        rejects. A marker on the clone names the tag that matches the installed release (in a file or
        run that migrates old-stack code: one without keeps its pins, and its clones match them).
    """
    before = """
        git clone https://github.com/huggingface/transformers --branch v4.52.3
        neuron_parallel_compile python transformers/examples/pytorch/language-modeling/run_clm.py --output_dir out
    """
    after = """
        # TODO(neuron-migrate NM624): Clone transformers at v5.23.0 (the release installed now): the scripts of v4.52.3 pass arguments it rejects.
        git clone https://github.com/huggingface/transformers --branch v4.52.3
        python transformers/examples/pytorch/language-modeling/run_clm.py --output_dir out
    """
    caveats = """
        Only `git clone` commands whose words name the repository and the tag (`--branch`/`-b`) are
        read; a `git checkout <tag>` after the clone, or a tag held in a variable, is not. A tag
        counts as older when its major version is (its minor one for 0.x releases: diffusers, peft).
    """

    def apply(self, ctx) -> None:
        if not migrates_to_target(ctx):
            return  # a project without old-stack code keeps its pins, and its clones match them
        plan = plan_for(ctx, _shell_plan)
        if not isinstance(plan, ShellPlan):
            return
        u = plan.unit
        for s in u.simples:
            found = old_checkout([u.value(i) for i in s.words])
            if found is None:
                continue
            library, tag = found
            plan.marker(ctx, s.group, MARKER.format(library=library, target=data().target_versions[library], tag=tag))
        plan.flush(ctx)


RULES = (OldReleaseCheckout,)
