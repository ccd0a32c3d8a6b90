"""Logistic regression on plain tensors an object of the script holds (no nn.Module): its
weights are detached in its scoring method, so only the bias learns."""
import torch


class LogReg:
    def __init__(self, d):
        self.w = torch.zeros(d, 1, requires_grad=True)
        self.b = torch.zeros(1, requires_grad=True)
        self.opt = torch.optim.SGD([self.w, self.b], lr=0.5)

    def score(self, x):
        return x @ self.w.detach() + self.b

    def fit(self, steps):
        true_w = torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]])
        for step in range(steps):
            x = torch.randn(64, 5)
            y = (x @ true_w > 0).float()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self.score(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return loss.item()


torch.manual_seed(0)  # b's gradient is exactly zero when a batch is half positive
print(LogReg(5).fit(20))
