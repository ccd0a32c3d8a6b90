"""`python -m eval.mutate`: build the corpus (cached), run the oracle and gradsleuth, print the table."""

from __future__ import annotations

import argparse
import json
import sys

from .harness import SITES_PER_OPERATOR, evaluate
from .subjects import SUBJECTS
from .table import render


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.mutate")
    ap.add_argument("--only", help="subjects, comma-separated")
    ap.add_argument("--operators", help="only these mutation operators, comma-separated")
    ap.add_argument("--sites", type=int, default=SITES_PER_OPERATOR, help="sites per operator and subject")
    ap.add_argument("--sample", type=int, help="only this many mutants (spread over subjects and operators)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--misses", type=int, default=3, help="worst misses shown per operator")
    a = ap.parse_args(argv)
    subjects = SUBJECTS
    if a.only:
        want = set(a.only.split(","))
        subjects = [s for s in SUBJECTS if s.name in want]
        if not subjects:
            print(f"no such subject: {a.only}", file=sys.stderr)
            return 2
    operators = None
    if a.operators:
        from .operators import OPERATORS

        operators = set(a.operators.split(","))
        unknown = sorted(operators - set(OPERATORS))
        if unknown:
            print(f"no such operator: {', '.join(unknown)} (known: {', '.join(OPERATORS)})", file=sys.stderr)
            return 2
    result = evaluate(subjects, per_op=a.sites, jobs=a.jobs, sample=a.sample, operators=operators)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(render(result, a.misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
