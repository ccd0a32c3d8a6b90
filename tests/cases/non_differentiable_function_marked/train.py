"""A quantising autoencoder whose rounding is a custom autograd.Function. Its author marked the
rounded code non-differentiable (`ctx.mark_non_differentiable`, meant for an index output), so
the code it returns needs no gradient: the decoder learns, the encoder never does, and the
Function's own backward never runs."""
import torch
import torch.nn as nn


class RoundCode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, levels):
        code = torch.round(z * levels) / levels
        ctx.mark_non_differentiable(code)
        return code

    @staticmethod
    def backward(ctx, grad):
        return grad, None


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4), nn.Tanh())
decoder = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16))
opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)
for step in range(5):
    x = torch.randn(64, 16)
    code = RoundCode.apply(encoder(x), 8)
    loss = nn.functional.mse_loss(decoder(code), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
