"""Lightning: a model built at module level and handed to a LightningModule (the style of
scripts that wrap an existing model); its classifier is detached from the loss."""
import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.classifier = nn.Linear(16, 3)

    def forward(self, x):
        return self.classifier(self.backbone(x).detach())


class Lit(L.LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=1e-3)


model = Net()
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=16)
trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Lit(model), data)
