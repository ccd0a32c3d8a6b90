"""Bootstrap of `gradsleuth run`: `python -m gradsleuth._run [-- SCRIPT | -m MODULE] ARGS...`.

Runs the user's script as `python SCRIPT ARGS` would (`sys.argv`, `__main__`, `sys.path[0]`),
with the tracer installed first, configured by the file `$GRADSLEUTH_RUN_CONFIG` names (written
by `gradsleuth run`, read as `_core.RunConfig`). The capture goes to its path when observation
ends and again when the script ends (with its exception, if any). The script's traceback is
printed as Python would print it, without gradsleuth's or runpy's frames.

A job another program starts (`gradsleuth run -- accelerate launch ... train.py`) is traced
through `activate`, which the bootstrap folder's `sitecustomize` calls in every interpreter.

Under torch.distributed's launcher every rank runs this: `{rank}` in the capture path is
replaced by the rank, the capture records rank and world size, and it is rewritten at each
phase of the observed steps, so a rank that hangs or is killed still tells where it was.
SIGTERM (the launcher stopping a rank after another failed) is recorded as the rank's error.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
import types

from gradsleuth._sites import OWN_DIR as _OWN_DIR
from gradsleuth._sites import error_site as _error_site
from gradsleuth._sites import record_error


def _ours(frame) -> bool:
    fn = frame.f_code.co_filename
    return fn.startswith(_OWN_DIR) or fn == runpy.__file__ or fn.startswith("<frozen runpy")


def clean_traceback(tb):
    """The traceback without gradsleuth's and runpy's frames (rebuilt, never mutated)."""
    frames = []
    while tb is not None:
        if not _ours(tb.tb_frame):
            frames.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(frames):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _print_exception(e: BaseException):
    e.__traceback__ = clean_traceback(e.__traceback__)
    traceback.print_exception(type(e), e, e.__traceback__)


def _dist_env():
    """(rank, world_size, local_rank) from the launcher's environment, or None."""
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    local = os.environ.get("LOCAL_RANK")
    return rank, world, int(local) if local and local.isdigit() else None


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so the capture is saved."""


# The process that installed the SIGTERM handler, and whether the signal came already.
_handler_pid: list[int] = []
_signalled: list[int] = []


def _install_sigterm():
    _handler_pid[:] = [os.getpid()]
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, _frame):
    if _handler_pid and _handler_pid[0] != os.getpid():
        # A forked child (a DataLoader worker, a multiprocessing pool's) inherited the
        # handler: it ends as it would without gradsleuth.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if _signalled:
        # Once: a timeout signals the whole process tree and a launcher forwards the signal to
        # its ranks too. A second one, raised while the first unwinds (in a `finally`, a
        # context manager's exit), would replace where the script was stuck by where it was
        # cleaning up.
        return
    _signalled.append(signum)
    who = " (the launcher stopped this rank)" if "RANK" in os.environ else ""
    raise _Terminated(f"terminated by signal {signum}{who}")


def _exit_terminated(e, rec, tracer, watch, save):
    """The script was stopped by SIGTERM: recorded and saved at once (the launcher kills what
    is still running a few seconds after its SIGTERM, and on a loaded machine finishing the
    tracer can take longer than that), then saved complete, and the process ends as SIGTERM
    ends one, while the exception still holds the script's frames: no interpreter shutdown, no
    finalizers (a DataLoader's would complain about the workers the signal also ended)."""
    rec.set_error("Terminated", str(e), _error_site(e))
    save()
    _end(rec, tracer, watch, save)
    os._exit(128 + signal.SIGTERM)


def _finish(tracer):
    if tracer is not None and not tracer.done:
        tracer.on_done = None
        tracer.finish()


def main(argv: list[str]) -> int:
    from gradsleuth._core import RUN_CONFIG_ENV, RunConfig

    # Popped: the script's own child interpreters (DataLoader workers) are not traced again.
    config_path = os.environ.pop(RUN_CONFIG_ENV, None)
    try:
        config = RunConfig.load(config_path) if config_path else RunConfig()
    except (OSError, ValueError) as e:
        print(f"gradsleuth: error: {e}", file=sys.stderr)
        return 2
    if _refused(config):
        return 2
    dist_env = _dist_env()
    capture_path = _capture_path(config, dist_env)
    module: str | None = None
    script: str | None
    if argv[:1] == ["-m"] and len(argv) > 1:
        module, args = argv[1], argv[2:]
        script = None
    else:
        if argv[:1] == ["--"]:
            argv = argv[1:]
        if not argv:
            print("gradsleuth: error: nothing to run", file=sys.stderr)
            return 2
        script, args = argv[0], argv[1:]

    rec = _recorder(config, script or f"-m {module}", args, dist_env)
    # SIGTERM (the launcher stopping a rank, `--timeout`, a scheduler) raised in the main
    # thread: the capture is saved with where the script was.
    _install_sigterm()

    save = _saver(rec, capture_path)
    code_obj = None
    if script is not None:
        try:
            with open(script, "rb") as f:
                source = f.read()
            # Python shows the main script by its absolute path (and sets __file__ so).
            code_obj = compile(source, os.path.abspath(script), "exec", dont_inherit=True)
        except SyntaxError as e:
            traceback.print_exception(type(e), e, None)
            rec.set_error(type(e).__name__, str(e.msg), _error_site(e))
            save()
            return 1
        except OSError as e:
            print(f"gradsleuth: error: cannot read {script}: {e}", file=sys.stderr)
            return 2

    tracer, watch = _start(rec, config, dist_env, save)

    code = 0
    try:
        if module is not None:
            sys.argv = [module, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            assert script is not None and code_obj is not None
            sys.argv = [script, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            main_mod = types.ModuleType("__main__")
            main_mod.__file__ = os.path.abspath(script)
            main_mod.__builtins__ = __builtins__  # type: ignore[attr-defined]
            main_mod.__loader__ = None
            main_mod.__spec__ = None
            old_main = sys.modules.get("__main__")
            sys.modules["__main__"] = main_mod
            try:
                exec(code_obj, main_mod.__dict__)
            finally:
                # Keep the user's __main__ importable for pickling until the end.
                if old_main is not None and sys.modules.get("__main__") is not main_mod:
                    sys.modules["__main__"] = main_mod
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as e:
        _print_exception(e)
        rec.set_error("KeyboardInterrupt", "", (None, None, None))
        _finish(tracer)
        code = 130
    except _Terminated as e:
        _exit_terminated(e, rec, tracer, watch, save)
    except BaseException as e:  # noqa: BLE001 - the script's own exception, reported as Python would
        _print_exception(e)
        record_error(rec, e)
        # While the exception (and so the frames holding the model) is alive: a model local
        # to a function the exception left would be gone by the `finally`.
        _finish(tracer)
        code = 1
    finally:
        _end(rec, tracer, watch, save)
        # From here on a SIGTERM only ends the process (as it would without gradsleuth).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return code


def _refused(config, untraced: bool = False) -> bool:
    """True when this interpreter's torch is too old to trace: why is written where `gradsleuth
    run` reads it (it tells the user), or printed when nothing will read it."""
    try:
        import torch
    except ImportError:
        return False
    from gradsleuth._core import torch_refusal

    why = torch_refusal(str(getattr(torch, "__version__", "")))
    if not why:
        return False
    if config.refusal:
        try:
            with open(config.refusal, "w") as f:
                f.write(why)
            return True
        except OSError:
            pass
    said = f"gradsleuth: {why} This process runs untraced." if untraced else f"gradsleuth: error: {why}"
    print(said, file=sys.stderr)
    return True


def _capture_path(config, dist_env) -> str | None:
    path = config.capture
    if path:
        path = path.replace("{rank}", str(dist_env[0] if dist_env else _local_rank()))
        path = path.replace("{pid}", str(os.getpid()))
    return path


def _local_rank() -> int:
    local = os.environ.get("LOCAL_RANK", "")
    return int(local) if local.isdigit() else 0


def _recorder(config, script: str, args: list[str], dist_env):
    """The run's recorder, with the rank's place in the job when it is one."""
    from gradsleuth._core import Recorder

    rec = Recorder("run", config.steps, script, args)
    rec.probe = config.probe
    if dist_env is not None:
        import socket

        rec.set_dist(dist_env[0], dist_env[1], dist_env[2], socket.gethostname())
    return rec


def _saver(rec, capture_path):
    def save():
        if capture_path:
            try:
                rec.save(capture_path)
            except OSError as e:
                print(f"gradsleuth: cannot save the capture: {e}", file=sys.stderr)

    return save


# Called when `--stop-after` ends the process once the observed steps are done (no `finally`
# or `atexit` runs then): repro's fork server tells itself what the candidate imported.
before_stop: list = []


def _start(rec, config, dist_env, save):
    """Starts the tracer (and `watch` when asked) as the configuration says: (tracer, watch),
    None for what could not start."""
    tracer = None
    watch = None
    try:
        import torch  # noqa: F401 - installs the tracer's hooks before the script imports it

        from gradsleuth._tracer import Tracer

        def on_done(_t):
            save()
            if config.stop_after:
                sys.stdout.flush()
                sys.stderr.flush()
                for f in before_stop:
                    try:
                        f()
                    except Exception:  # noqa: BLE001, S110 - the run's result is saved
                        pass
                os._exit(0)

        tracer = Tracer(
            rec,
            config.steps,
            on_done=on_done,
            deep_all=config.deep,
            on_progress=(lambda _t: save()) if dist_env else None,
            # `--watch`'s loss probe and NaN replay need the mode stack between backward and
            # the step: the gradient watch there (GS215) is `run`'s alone.
            watch_gradients=not config.watch,
        )
        if config.watch:
            # Started first: the tracer removes its optimizer hooks from inside one when its
            # observation ends, which is only safe for the last hook of torch's hook dict.
            from gradsleuth._watch import Watch

            def roots(t=tracer):
                return [r() for r in t._roots.values() if r() is not None]

            watch = Watch(roots=roots, log_dir=config.tensorboard)
            watch.tracer = tracer
            tracer.on_root = watch.root_seen
            watch.start()
        tracer.start()
        if config.probe:
            # Probe runs (`gradsleuth bisect`) compare two environments op by op: the same
            # random numbers on both sides unless the script seeds its own.
            import random

            random.seed(0)
            torch.manual_seed(0)
    except ImportError as e:
        rec.note(f"torch could not be imported ({e}); the script ran without the tracer")
    return tracer, watch


def _end(rec, tracer, watch, save):
    _finish(tracer)
    if watch is not None:
        watch.close()
        watch.attach(rec)
    sys.stdout.flush()
    sys.stderr.flush()
    save()


def activate() -> bool:
    """The bootstrap's entry (`_bootstrap/sitecustomize.py`), in every interpreter of a job
    another program starts (`gradsleuth run -- accelerate launch ... train.py`): when this
    interpreter's main script is the job's training script, the tracer starts before the
    script runs, an uncaught exception is recorded as the script's error, and the capture is
    saved when the interpreter exits. True when it started."""
    import atexit

    from gradsleuth._core import RUN_CONFIG_ENV, RunConfig

    path = os.environ.get(RUN_CONFIG_ENV)
    if not path:
        return False
    config = RunConfig.load(path)
    # Whether this interpreter runs the job's training program (decided in Rust).
    main_file = config.traced_main(sys.argv[0] if sys.argv else "", list(getattr(sys, "orig_argv", [])))
    if main_file is None:
        return False
    if _refused(config, untraced=True):
        return False
    dist_env = _dist_env()
    rec = _recorder(config, main_file, sys.argv[1:], dist_env)
    save = _saver(rec, _capture_path(config, dist_env))
    tracer, watch = _start(rec, config, dist_env, save)
    previous = sys.excepthook

    def excepthook(kind, e, tb):
        if isinstance(e, _Terminated):
            _exit_terminated(e, rec, tracer, watch, save)
        try:
            record_error(rec, e)
            # While the traceback (and so the frames holding the model) is alive.
            _finish(tracer)
        except Exception:  # noqa: BLE001 - the user's traceback is printed whatever happens
            pass
        previous(kind, e, tb)

    sys.excepthook = excepthook
    _install_sigterm()
    # Registered first, so it runs after the script's own exit handlers.
    atexit.register(_end, rec, tracer, watch, save)
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
