"""gradsleuth.integrations.LightningCallback(watch=True) (run with plain python): the model
learns in its first steps; a temperature annealed linearly reaches zero at step 10 and the
logits divided by it turn the loss and its gradients NaN, long after the observed steps."""
import lightning as L
import torch
from gradsleuth.integrations import LightningCallback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitRegressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.out = nn.Linear(16, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        tau = 1.0 - self.global_step / 10
        logits = self.out(self.body(x)) / tau
        return nn.functional.cross_entropy(logits, y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,))), batch_size=16)
    trainer = L.Trainer(max_steps=16, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[LightningCallback(steps=3, watch=True)], default_root_dir="lightning_out")
    trainer.fit(LitRegressor(), data)


if __name__ == "__main__":
    main()
