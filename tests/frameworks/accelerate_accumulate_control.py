"""Control: an accelerate loop on two CPU processes (started by torchrun: accelerate then
trains MULTI_CPU, DDP on gloo) with gradient accumulation (`accelerator.accumulate`: step()
and zero_grad() do nothing until the accumulated batches are synced)."""
import torch
from accelerate import Accelerator
from torch import nn


def main():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = accelerator.prepare(model, opt)
    for _ in range(8):
        with accelerator.accumulate(model):
            loss = model(torch.randn(8, 8)).pow(2).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
    accelerator.print("done")


if __name__ == "__main__":
    main()
