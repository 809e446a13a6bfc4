"""neuron-migrate: move projects off optimum-neuron / torch-xla onto native PyTorch on Trainium."""

__version__ = "0.1.0"
