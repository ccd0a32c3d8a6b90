"""CLIP-style contrastive training of two small encoders with a learnable temperature."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Tower(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 64), nn.GELU(), nn.Linear(64, d_out))

    def forward(self, x):
        return F.normalize(self.net(x), dim=-1)


class DualEncoder(nn.Module):
    def __init__(self, d_img=32, d_txt=20, d=16):
        super().__init__()
        self.image = Tower(d_img, d)
        self.text = Tower(d_txt, d)
        self.logit_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)

    def forward(self, img, txt):
        zi, zt = self.image(img), self.text(txt)
        return self.logit_scale.exp() * zi @ zt.t()


def clip_loss(logits):
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


model = DualEncoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)
for step in range(4):
    img, txt = torch.randn(12, 32), torch.randn(12, 20)
    loss = clip_loss(model(img, txt))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
