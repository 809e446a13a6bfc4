"""Inference (NM1xx): optimum-neuron's exported and traced models, pipelines and their
arguments moved to Transformers/Diffusers on ``device_map="neuron"``. NM101 causal LMs on a static
cache, NM108 image-text-to-text, NM109 embedding models (``causal_lm.py``); NM102 ``pipeline()``
(``pipelines.py``); NM103 traced ``NeuronModelFor*`` classes (``traced_models.py``); NM104
diffusion pipelines (``diffusion.py``); NM105 ``device_map="auto"``, NM106 generation inputs left on
CPU, NM107 Hub calls of the Neuron models (``device_map.py``); NM110 reads of ``neuron_config``
(``neuron_attributes.py``); NM111 user subclasses of classes whose equivalent is an ``Auto*``
factory (``subclasses.py``); NM112 ``optimum-cli export neuron`` run from Python (``export_cli.py``); NM113 Hub downloads of
pre-exported Neuron models (``exported_downloads.py``). ``args.py`` holds the load/shape argument helpers these rules share;
the renames of the inference names themselves are NM100 in :mod:`codemods.common`."""

from codemods.inference import (
    causal_lm,
    device_map,
    diffusion,
    export_cli,
    exported_downloads,
    neuron_attributes,
    pipelines,
    subclasses,
    traced_models,
)

RULES = (
    *causal_lm.RULES,
    *device_map.RULES,
    *diffusion.RULES,
    *export_cli.RULES,
    *exported_downloads.RULES,
    *neuron_attributes.RULES,
    *pipelines.RULES,
    *subclasses.RULES,
    *traced_models.RULES,
)
