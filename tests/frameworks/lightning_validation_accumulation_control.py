"""Control: Lightning with a validation loop (sanity checks included) and gradient accumulation."""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 4), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(4, 8))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        z = self.encoder(x)
        return nn.functional.mse_loss(self.decoder(z), x)

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val", nn.functional.mse_loss(self.decoder(self.encoder(x)), x))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    data = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16)
    trainer = L.Trainer(max_steps=8, val_check_interval=2, accumulate_grad_batches=2, accelerator="cpu", devices=1,
                        logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(LitAutoEncoder(), data, data)


if __name__ == "__main__":
    main()
