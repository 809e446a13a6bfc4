"""Fault catalogue, scenario "custom_loop": an ORIGINAL torch-xla training loop (old stack): a small
classifier built in the script, a DataLoader wrapped in ``pl.MpDeviceLoader``, six steps with
``xm.optimizer_step``, the weights saved with ``xm.save`` and the final loss printed."""

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.relu(self.hidden(x)))


device = xm.xla_device()
torch.manual_seed(0)
features = torch.randn(48, 8)
targets = (features[:, 0] > 0).long() + (features[:, 1] > 0).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(features, targets), batch_size=4)
train_loader = pl.MpDeviceLoader(loader, device)

model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
max_steps = 6
model.train()
for step, (x, y) in enumerate(train_loader):
    if step == max_steps:
        break
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    xm.optimizer_step(optimizer)
    if step % 2 == 0:
        print(f"step {step}: loss {loss.item():.4f}")

xm.save(model.state_dict(), "ckpt.pt")
print(f"final loss: {loss.item():.4f}")
