"""Training from a DataLoader with two worker processes and a map-style dataset."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.tensor([i / 64.0])
        return x, x * x


def main():
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(Squares(), batch_size=16, shuffle=True, num_workers=2)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
