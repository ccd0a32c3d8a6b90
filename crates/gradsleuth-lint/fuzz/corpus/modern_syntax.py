"""Grammar the parser must take: match, walrus, PEP 695 generics, nested f-strings, async."""
import torch
import torch.nn as nn

type Pair[T] = tuple[T, T]


class Gate[T](nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x, mode: str = "soft"):
        match mode:
            case "soft":
                y = torch.sigmoid(self.fc(x))
            case "hard" if (n := x.shape[-1]) > 4:
                y = (self.fc(x) > 0).float() * n
            case {"kind": k, **rest}:
                y = x
            case [first, *others]:
                y = first
            case _:
                y = x
        print(f"{mode!r:>{len(mode) + 2}} {f'{y.shape}'}")
        return y


async def evaluate(model, batches):
    async for x in batches:
        with torch.no_grad():
            yield model(x)


def train[M: nn.Module](model: M, data, *, lr: float = 1e-3, **kw) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for step, (x, y) in enumerate(data):
        loss = lambda: (model(x) - y).pow(2).mean()
        (l := loss()).backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        global LAST
        LAST = l.detach()
