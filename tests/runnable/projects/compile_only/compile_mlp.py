"""Old stack: compile a small scoring network ahead of time and store the artifact for the service.
Nothing runs the network here: the compile (and the compile cache) was the point.

    python compile_mlp.py
"""

import torch
import torch_neuronx


class Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


torch.manual_seed(0)
scorer = Scorer().eval()
batch = torch.rand(4, 8)
traced = torch_neuronx.trace(scorer, batch, compiler_args=["--auto-cast", "none"])
traced.save("scorer_neuron.pt")
print("compiled scorer_neuron.pt")
