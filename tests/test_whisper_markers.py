"""NM103 on Whisper: the compiled sequence_length bounds the decoder (not the audio features), and a
bf16 Whisper does not cast float32 features itself (checked on CPU with a tiny random model)."""

import textwrap

import pytest

from migrator.engine import RuleSelection, RuleSet, migrate_text

SOURCE = textwrap.dedent("""
    from optimum.neuron import NeuronWhisperForConditionalGeneration

    model = NeuronWhisperForConditionalGeneration.from_pretrained(
        "w", export=True, batch_size=1, sequence_length=128, auto_cast="all", auto_cast_type="bf16")
    tokens = model.generate(features)
""")


def test_whisper_markers_name_generate_and_the_features_dtype():
    new, findings = migrate_text(SOURCE, "python", RuleSet.from_selection(RuleSelection()))
    manual = [f.message for f in findings if f.rule == "NM103" and f.fix == "manual"]
    assert "Pass max_length=128 to generate() if needed; do not pad the audio features to it." in manual
    assert "Move the audio features with .to(model.device, model.dtype): generate() does not cast them." in manual
    assert not any("padding=" in m for m in manual)  # never the text-model padding advice
    assert "dtype=torch.bfloat16" in new


def test_a_whisper_cast_as_its_default_stays_float32_with_an_autocast_marker():
    """optimum-neuron's seq2seq export cast only the matmuls (auto_cast="matmul" by default): no bf16 model."""
    source = SOURCE.replace('auto_cast="all", ', "")
    new, findings = migrate_text(source, "python", RuleSet.from_selection(RuleSelection()))
    manual = [f.message for f in findings if f.rule == "NM103" and f.fix == "manual"]
    assert "dtype=" not in "\n".join(line for line in new.splitlines() if "TODO(" not in line)
    assert 'Wrap the model\'s calls in torch.autocast("neuron", dtype=torch.bfloat16): the export cast its matmuls only.' \
        in manual
    assert not any("audio features with .to(" in m for m in manual)


def test_a_bf16_whisper_rejects_float32_features_and_takes_cast_ones():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.WhisperConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                        decoder_ffn_dim=32, num_mel_bins=8, max_source_positions=8,
                                        max_target_positions=16, decoder_start_token_id=1, pad_token_id=0,
                                        eos_token_id=2, bos_token_id=1)
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(config).to(torch.bfloat16).eval()
    features = torch.randn(1, 8, 16)  # float32, as the feature extractor returns them
    with pytest.raises(RuntimeError, match="should be the same|same dtype"):
        model.generate(features, max_length=4)
    out = model.generate(features.to(model.device, model.dtype), max_length=4)
    assert out.shape[0] == 1
