"""A two-optimizer GAN in Lightning's manual optimization that scores the fakes once: the
discriminator's step runs before the generator's loss is backpropagated through that score."""
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
        fake = self.generator(torch.randn(real.shape[0], 4))
        d_fake = self.discriminator(fake)
        d_loss = (bce(self.discriminator(real), ones) + bce(d_fake, zeros)) / 2
        opt_d.zero_grad()
        self.manual_backward(d_loss, retain_graph=True)
        opt_d.step()
        g_loss = bce(d_fake, ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()

    def configure_optimizers(self):
        g = torch.optim.Adam(self.generator.parameters(), lr=2e-4)
        d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4)
        return [g, d]


def main():
    data = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)
    trainer = L.Trainer(max_steps=8, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitGAN(), data)


if __name__ == "__main__":
    main()
