"""Launcher of distributed runs: `gradsleuth run --nproc-per-node N SCRIPT` and
`gradsleuth run -- torchrun ... SCRIPT`.

Parses the torchrun arguments with torch.distributed.run's own parser, makes every rank run
its script under `gradsleuth._run` (so the tracer is in every rank), and starts the job with
torch.distributed.run itself. Each rank writes its capture to the run configuration's capture
path with `{rank}` replaced; the `gradsleuth` command merges them when the job ends.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args(argv)
    if args.no_python and not args.run_path:
        print(
            "gradsleuth: error: --no-python runs a program that is not Python; gradsleuth traces Python scripts",
            file=sys.stderr,
        )
        return 2
    inner = ["-m", args.training_script] if args.module else ["--", args.training_script]
    args.training_script_args = [*inner, *args.training_script_args]
    args.training_script = "gradsleuth._run"
    args.module = True
    args.run_path = False
    args.no_python = False
    try:
        run(args)
    except ChildFailedError as e:
        failures = ", ".join(f"rank {r} ({f.exitcode})" for r, f in sorted(e.failures.items()))
        print(f"gradsleuth: the distributed job failed: {failures}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
