"""A latent denoiser fine-tuned in the shape of diffusers' DreamBooth/LoRA scripts: a frozen
autoencoder moved to the device for encoding and offloaded after, latent statistics moved to
the latents' device and dtype each step, masks resized in a comprehension that reuses the
name, a number computed once by a helper before the loop, and the text encoder either given
LoRA adapters or, in an exclusive arm, its token embeddings trained (textual inversion), as
the script's flags choose. A latent input optimised as a new leaf checks the guidance shape:
`torch.autograd.grad(loss.requires_grad_(True), [latents])`."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

parser = argparse.ArgumentParser()
parser.add_argument("--train_text_encoder", action="store_true")
parser.add_argument("--train_text_encoder_ti", action="store_true", default=True)
parser.add_argument("--steps", type=int, default=6)
args = parser.parse_args([])

torch.manual_seed(0)


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids):
        return self.proj(self.token_embedding(ids)).mean(1)


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4 + 1 + 8, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x, cond):
        return self.out(torch.relu(self.inp(torch.cat([x, cond], dim=-1))))


vae = nn.Linear(6, 4)
vae.requires_grad_(False)
text_encoder = TextEncoder()
text_encoder.requires_grad_(False)
denoiser = Denoiser()

if args.train_text_encoder:
    text_encoder = get_peft_model(text_encoder, LoraConfig(r=2, target_modules=["proj"]))

params = list(denoiser.parameters())
if args.train_text_encoder:
    params += [p for p in text_encoder.parameters() if p.requires_grad]
elif args.train_text_encoder_ti:
    for name, param in text_encoder.named_parameters():
        if "token_embedding" in name:
            param.requires_grad = True
            params.append(param)
optimizer = torch.optim.AdamW(params, lr=1e-2)


def longest_prompt(prompts):
    return max(len(p) for p in prompts)


prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
width = longest_prompt(prompts)
latents_mean = torch.zeros(1, 4)
latents_std = torch.ones(1, 4)

for step in range(args.steps):
    pixels = torch.randn(3, 6)
    ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    vae = vae.to("cpu")
    latents = vae(pixels)
    vae = vae.to("cpu")
    latents_mean = latents_mean.to(device=latents.device, dtype=latents.dtype)
    latents_std = latents_std.to(device=latents.device, dtype=latents.dtype)
    latents = (latents - latents_mean) / latents_std
    masks = [torch.ones(1, 2) for _ in range(3)]
    mask = torch.stack([F.interpolate(mask[None], size=1)[0] for mask in masks]).to(dtype=latents.dtype)
    mask = mask.reshape(3, 1)
    noise = torch.randn_like(latents)
    pred = denoiser(latents + noise, torch.cat([mask, text_encoder(ids)], dim=-1))
    loss = F.mse_loss(pred, noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

# Guidance on a latent: the loss differentiated with respect to the latent itself.
latent = torch.randn(1, 4)
for _ in range(2):
    latent = latent.detach().requires_grad_(True)
    with torch.no_grad():
        cond = torch.cat([torch.ones(1, 1), text_encoder(torch.tensor([[1, 2]]))], dim=-1)
    with torch.enable_grad():
        guidance_loss = denoiser(latent, cond).pow(2).sum()
        grad = torch.autograd.grad(guidance_loss.requires_grad_(True), [latent])[0]
    latent = latent - 0.1 * grad
print("final loss", loss.item())
