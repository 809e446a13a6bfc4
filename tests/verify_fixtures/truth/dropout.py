"""Dropout and SDPA's dropout_p in training mode: the sums show whether anything was dropped."""
import torch
import torch.nn.functional as F

x = torch.ones(1000)
print("dropout kept", int((torch.nn.Dropout(0.5).train()(x) != 0).sum()))
q = torch.ones(1, 1, 4, 8)
out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.9)
print("sdpa mean", round(float(out.mean()), 4))
