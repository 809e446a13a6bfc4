"""Training and parallelism (NM2xx, NM3xx): optimum-neuron's trainers, training arguments,
TRL configs and parallelism moved to Transformers, TRL and accelerate. NM201 training arguments,
NM202 trainer calls, NM203 ``NeuronSFTConfig`` (``arguments.py``, with ``layouts.py``: parallel
sizes moved to the model loads); NM204 optimum-neuron helpers, NM205 ``NeuronAccelerator``, NM304
static dynamo shapes in training scripts (``helpers.py``); NM206 ORPO (``orpo.py``); NM207 training
arguments after they are built (``parsed.py``); NM208 tokenizer padding (``padding.py``); NM301
``lazy_load_for_parallelism`` (``parallel.py``); NM209 optimum-neuron-only members used by a trainer
subclass (``trainer_members.py``); NM210 ``problem_type`` of sequence classifiers trained
compiled (``classifier.py``); NM305 script flags the launches now pass as TP_SIZE / PP_SIZE and
NM306 launch argument lists in Python (``flags.py``); NM302 ``TrainingNeuronConfig`` and NM303 the
training model classes (``models.py``). ``mesh.py`` builds the parallel layouts whose sizes multiply to
the world size; ``lora.py`` says when PEFT adapters rule tensor parallelism out (FSDP instead). ``sources.py`` names the native classes these rules recognise; the renames of the names
themselves are NM200/NM300 in :mod:`codemods.common`."""

from codemods.training import arguments, classifier, flags, helpers, models, orpo, padding, parallel, parsed, trainer_members

RULES = (
    *arguments.RULES,
    *classifier.RULES,
    *flags.RULES,
    *helpers.RULES,
    *models.RULES,
    *orpo.RULES,
    *padding.RULES,
    *parallel.RULES,
    *parsed.RULES,
    *trainer_members.RULES,
)
