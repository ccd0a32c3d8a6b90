"""gradsleuth: finds why PyTorch parameters do not learn, and where the computation broke.

Importing this package does not import torch; the API functions do, when called.

    report = gradsleuth.diagnose(model, (x, y), F.cross_entropy, optimizer)
    print(report)

    with gradsleuth.trace(steps=3) as t:
        train_a_few_steps()
    print(t.report())

    gradsleuth.assert_learning(model, (x, y), F.cross_entropy, optimizer)  # in unit tests
"""

from gradsleuth._core import __version__
from gradsleuth.api import Report, assert_learning, diagnose, trace

__all__ = ["Report", "assert_learning", "diagnose", "trace", "__version__"]
