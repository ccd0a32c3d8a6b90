"""Logistic regression on plain tensors built inside `main()` (no nn.Module, no globals): the
weights are detached in the scoring helper, so only the bias learns."""
import torch


def score(x, w, b):
    return x @ w.detach() + b


def main():
    w = torch.zeros(5, 1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=0.5)
    true_w = torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]])
    for step in range(20):
        x = torch.randn(64, 5)
        y = (x @ true_w > 0).float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(score(x, w, b), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", loss.item())


if __name__ == "__main__":
    main()
