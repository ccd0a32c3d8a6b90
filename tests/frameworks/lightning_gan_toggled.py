"""Control: a GAN trained as Lightning's own GAN example does, each optimizer's step between
`toggle_optimizer` (which sets `requires_grad=False` on every parameter the other optimizer
holds) and `untoggle_optimizer` (which restores them). With `--freeze-discriminator`, the script
freezes the discriminator itself (a bug), and Lightning's toggles set the same flags again."""
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitGAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        self.discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        bce = nn.functional.binary_cross_entropy_with_logits
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
        z = torch.randn(real.shape[0], 4)
        self.toggle_optimizer(opt_g)
        g_loss = bce(self.discriminator(self.generator(z)), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.toggle_optimizer(opt_d)
        fake = self.generator(z).detach()
        d_loss = (bce(self.discriminator(real), ones) + bce(self.discriminator(fake), zeros)) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

    def configure_optimizers(self):
        g = torch.optim.Adam(self.generator.parameters(), lr=2e-4)
        d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4)
        return [g, d]


def main():
    model = LitGAN()
    if "--freeze-discriminator" in sys.argv:
        for p in model.discriminator.parameters():
            p.requires_grad = False
    data = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)
    trainer = L.Trainer(max_steps=8, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, data)


if __name__ == "__main__":
    main()
