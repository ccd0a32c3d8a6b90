"""gradsleuth.integrations.LightningCallback (run with plain python): training_step detaches
the encoder's output."""
import lightning as L
import torch
from gradsleuth.integrations import LightningCallback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(4, 8))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        z = self.encoder(x).detach()
        return nn.functional.mse_loss(self.decoder(z), x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    data = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)
    trainer = L.Trainer(max_steps=5, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[LightningCallback(steps=3)], default_root_dir="lightning_out")
    trainer.fit(LitAutoEncoder(), data)


if __name__ == "__main__":
    main()
