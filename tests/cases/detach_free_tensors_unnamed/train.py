"""Linear regression on plain tensors a helper creates and hands straight to the optimizer
(`SGD(make_params())`: no name binds them when the optimizer is built); the loop takes them
back out of the param group and detaches the weight, so only the bias learns."""
import torch


def make_params():
    return [torch.zeros(5, 1, requires_grad=True), torch.zeros(1, requires_grad=True)]


def main():
    torch.manual_seed(0)
    opt = torch.optim.SGD(make_params(), lr=0.1)
    w, b = opt.param_groups[0]["params"]
    for _ in range(5):
        x = torch.randn(8, 5)
        y = x.sum(1, keepdim=True)
        pred = x @ w.detach() + b
        loss = ((pred - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


main()
