"""Control: a LightningModule trained by Lightning's Trainer on two CPU processes (`ddp`:
Lightning re-executes this script for rank 1) in `bf16-mixed` precision, accumulating two
batches per optimizer step; training_step calls its layers directly."""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitClassifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 32), nn.GELU())
        self.head = nn.Linear(32, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.encoder(x)), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def main():
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,))), batch_size=16)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=2, strategy="ddp", precision="bf16-mixed",
                        accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir="lightning_out")
    trainer.fit(LitClassifier(), data)


if __name__ == "__main__":
    main()
