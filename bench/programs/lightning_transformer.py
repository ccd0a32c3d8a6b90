"""A small transformer classifier trained by Lightning's `Trainer` (automatic optimization:
forward, zero_grad and backward run inside the closure Lightning passes to `optimizer.step`);
iterations are timed from a Callback (the loop is Lightning's)."""

import lightning as L
import torch
from _timing import iterations
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)


class Classifier(L.LightningModule):
    def __init__(self, vocab=3000, d=128, layers=4, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 512, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, classes)

    def training_step(self, batch, batch_idx):
        ids, labels = batch
        logits = self.head(self.encoder(self.embed(ids)).mean(1))
        return nn.functional.cross_entropy(logits, labels)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=5e-5)


class Timed(L.Callback):
    """Each batch is one timed iteration; the epoch ends when the schedule does."""

    def __init__(self):
        self.it = iterations(30)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        return -1 if next(self.it, None) is None else None


data = TensorDataset(torch.randint(0, 3000, (16 * 400, 64)), torch.randint(0, 3, (16 * 400,)))
trainer = L.Trainer(
    max_epochs=1,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[Timed()],
)
trainer.fit(Classifier(), DataLoader(data, batch_size=16))
