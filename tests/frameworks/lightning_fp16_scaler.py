"""Lightning, fp16 mixed precision on CPU with a GradScaler whose first scale overflows the
gradients: it skips its first steps (no optimizer hook runs) while it finds its scale, then
trains. With `--overflow` the activations overflow fp16 at any scale: every step is skipped."""
import sys

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

OVERFLOW = "--overflow" in sys.argv


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x).pow(2).mean() * (1000.0 if OVERFLOW else 1.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def main():
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(128, 8) * (100.0 if OVERFLOW else 1.0)), batch_size=16)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**34)
    trainer = L.Trainer(max_steps=40, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    trainer.fit(Lit(), data)


if __name__ == "__main__":
    main()
