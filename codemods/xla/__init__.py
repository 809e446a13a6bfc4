"""The torch-xla era (NM4xx): torch-xla, torch_neuronx, transformers-neuronx and
neuronx-distributed code moved to native PyTorch on the ``neuron`` device. NM401 XLA devices, NM402
graph cuts (``mark_step``), NM403 ``optimizer_step``, NM404 ordinal and world-size queries, NM405
master-only printing, saving and rendezvous, NM406 the ``xla`` process-group backend (``core.py``);
NM407 device loaders, NM408 ``xmp.spawn``, NM409 XLA autocast, syncfree optimizers and metrics
(``data.py``); NM410 ``torch_neuronx.trace`` (``torch_neuronx.py``); NM411 transformers-neuronx
sampling models (``transformers_neuronx.py``); NM412 collectives, NM413 XLA FSDP / ZeRO, NM417
collectives whose async handle is dropped (``collectives.py``); NM414 neuronx-distributed (``neuronx_distributed.py``); NM415 the XLA
bf16 switches read in Python, NM416 XLA-era variables written from Python (``environment.py``); NM420 availability gates that test for
the old stack (``gates.py``). ``base.py`` holds
the helpers these rules share."""

from codemods.xla import collectives, core, data, environment, gates, neuronx_distributed, torch_neuronx, transformers_neuronx

RULES = (
    *collectives.RULES,
    *core.RULES,
    *data.RULES,
    *environment.RULES,
    *gates.RULES,
    *neuronx_distributed.RULES,
    *torch_neuronx.RULES,
    *transformers_neuronx.RULES,
)
