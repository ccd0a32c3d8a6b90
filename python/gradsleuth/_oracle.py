"""`python -m gradsleuth._oracle`: runs candidate scripts for `gradsleuth repro` without paying
torch's import for each. torch and the tracer are imported once; each request (a JSON line on
standard input: script, args, run configuration path, log path, timeout) forks a child that runs
the candidate exactly as `gradsleuth run` does (`_run.main`) and writes its capture; the answer
is a JSON line with the child's exit status. The parent computes nothing with torch, so the
fork copies no thread pool."""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _child(req: dict) -> int:
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # The requests arrive on standard input: the candidate reads nothing from it.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's whole life
    os.environ["GRADSLEUTH_RUN_CONFIG"] = req["config"]
    from gradsleuth import _run

    return _run.main(["--", req["script"], *req.get("args", [])])


def main() -> int:
    import torch  # noqa: F401 - imported once, before any fork

    from gradsleuth import _run, _tracer  # noqa: F401 - the same

    out = sys.stdout
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req) or 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + float(req.get("timeout", 60))
        status: int | str | None = None
        while status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = "timeout"
            else:
                time.sleep(0.005)
        out.write(json.dumps({"status": status}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
