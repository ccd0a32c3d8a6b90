"""gradsleuth: finds why PyTorch parameters do not learn, and where the computation broke.

Importing this package imports neither torch nor the API module; the API functions load on
first use (the `gradsleuth` command starts through this package, so start-up stays short).

    report = gradsleuth.diagnose(model, (x, y), F.cross_entropy, optimizer)
    print(report)

    with gradsleuth.trace(steps=3) as t:
        train_a_few_steps()
    print(t.report())

    gradsleuth.assert_learning(model, (x, y), F.cross_entropy, optimizer)  # in unit tests

    w = gradsleuth.watch(model, optimizer, log_dir="runs/gs")  # a whole run's gradient health
    train()
    print(w.report())
"""

from gradsleuth._core import __version__

__all__ = ["Report", "assert_learning", "diagnose", "trace", "watch", "__version__"]


def __getattr__(name):
    if name in ("Report", "assert_learning", "diagnose", "trace"):
        from gradsleuth import api

        return getattr(api, name)
    if name == "watch":
        from gradsleuth._watch import watch

        return watch
    raise AttributeError(f"module 'gradsleuth' has no attribute {name!r}")
