"""The old-stack inventory (``oldstack_api.json.gz``, written by ``tools/gen_oldstack_api.py`` from the
released packages and the Neuron SDK documentation): what each kind of entry is and which releases had
it. Rules read it where a whole family of names has one treatment (the torch-xla environment variables)."""

from __future__ import annotations

import fnmatch
import gzip
import json
from functools import lru_cache
from pathlib import Path

_PATH = Path(__file__).with_name("oldstack_api.json.gz")


@lru_cache(maxsize=None)
def entries(kind: str) -> dict[str, str]:
    """The inventory's entries of one kind (``env``, ``module``, ``name``, ``cli``, ``ccflag``): name -> the
    releases that had it."""
    return dict(json.loads(gzip.decompress(_PATH.read_bytes()))["entries"].get(kind, {}))


def env_vars(*patterns: str) -> dict[str, str]:
    """The environment variables of the inventory matching one of the fnmatch ``patterns``."""
    return {name: where for name, where in entries("env").items()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
