"""Where an exception happened in the user's code. Imports nothing heavy: `run` uses it before
torch is imported (a syntax error in the script) and the API after a failed step."""

from __future__ import annotations

import functools
import os
import re
import sysconfig
import types

from gradsleuth._core import Frames

OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The standard library's directories: its frames (copy, pickle, multiprocessing) are not the user's.
STDLIB_DIRS = sorted({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})
# Which file is the user's is decided in one place (`gradsleuth_capture::site`): gradsleuth's
# own files are skipped, installed packages and the stdlib are libraries.
_FILES = Frames([OWN_DIR], STDLIB_DIRS)


def is_users(filename: str) -> bool:
    """A file of the user's own code: not gradsleuth's, an installed package's or Python's."""
    return _FILES.is_users(filename)


Site = tuple[str | None, int | None, str | None]


def error_site(e: BaseException) -> Site:
    """(file, line, function) of the innermost frame of the user's own code in the exception's
    traceback; for a syntax error, where the script fails to parse."""
    site: Site = (None, None, None)
    tb = e.__traceback__
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if is_users(fn):
            code = tb.tb_frame.f_code
            site = (os.path.abspath(fn), tb.tb_lineno, getattr(code, "co_qualname", code.co_name))
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        site = (os.path.abspath(e.filename), e.lineno, None)
    return site


def error_frames(e: BaseException) -> list[str]:
    """The files of the exception's traceback, outermost first (library ones too)."""
    files = []
    tb = e.__traceback__
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return files


_UNPICKLABLE = re.compile(r"(?:Can't|[Cc]annot) (?:pickle|get local object) (.+)")
_CONTAINERS = {"_modules", "_parameters", "_buffers"}


def pickle_holder(e: BaseException, budget: int = 20000) -> str | None:
    """For an object pickle could not serialise (named in the message: a local function, a
    type, a function's repr): the shortest path to it from a variable of the traceback's
    frames, the user's own frames first: `model.head._forward_hooks[3].__self__._fn`."""
    m = _UNPICKLABLE.search(str(e))
    if m is None:
        return None
    what = m.group(1).strip()
    local = re.match(r"(?:local object )?'([^']+)'(?: object)?", what)
    shown = re.match(r"(<function .+? at 0x[0-9a-f]+>)", what)
    if local is None and shown is None:
        return None
    wanted = local.group(1) if local else None
    is_type = what.endswith(" object")

    def found(obj) -> bool:
        if shown is not None:
            return repr(obj) == shown.group(1) if callable(obj) else False
        if is_type:
            tp = type(obj)
            return wanted in (f"{tp.__module__}.{tp.__qualname__}", tp.__qualname__)
        return callable(obj) and getattr(obj, "__qualname__", None) == wanted

    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    frames.reverse()  # innermost first
    users = [f for f in frames if is_users(f.f_code.co_filename)]
    others = [f for f in frames if f not in users and not f.f_code.co_filename.startswith(OWN_DIR)]
    for group in (users, others):  # a path from the user's own variables first
        roots = [(name, value) for f in group for name, value in list(f.f_locals.items()) if not name.startswith("__")]
        path, budget = _search(roots, found, budget)
        if path is not None:
            return path
    return None


def _search(roots, found, budget):
    """Breadth first from `roots` ((name, object) pairs): the shortest path to an object
    `found` accepts that is held by something (not a root itself), within `budget` objects."""
    seen: set[int] = set()
    queue = list(roots)
    while queue and budget > 0:
        nxt = []
        for path, obj in queue:
            budget -= 1
            if isinstance(obj, (type, types.ModuleType, str, bytes, int, float)):
                continue
            try:
                if found(obj) and ("." in path or "[" in path):
                    return path, budget
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                nxt.extend(_children(path, obj))
            except Exception:  # noqa: BLE001 - a search over the user's objects: never raise
                continue
        queue = nxt
    return None, budget


def _children(path: str, obj):
    if isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            if i >= 200:
                break
            yield f"{path}[{k!r}]", v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            if i >= 200:
                break
            yield f"{path}[{i}]", v
    elif isinstance(obj, types.MethodType):
        yield f"{path}.__self__", obj.__self__
    elif isinstance(obj, types.FunctionType):
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                yield f"{path}.<{name}>", cell.cell_contents
            except ValueError:  # an empty cell
                continue
    elif isinstance(obj, functools.partial):
        yield f"{path}.func", obj.func
        yield f"{path}.args", obj.args
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict) and not isinstance(obj, types.FunctionType):
        for k, v in d.items():
            if k in _CONTAINERS and isinstance(v, dict):
                for name, child in v.items():  # a module's submodules, parameters, buffers
                    yield f"{path}.{name}", child
            else:
                yield f"{path}.{k}", v


def record_error(rec, e: BaseException, kind: str | None = None) -> None:
    """The exception into the recorder: its type, message, the user's site, the traceback's
    files and, for an object pickle could not serialise, who holds it."""
    holder = None
    try:
        holder = pickle_holder(e)
    except Exception:  # noqa: BLE001 - an explanation never breaks the report
        pass
    rec.set_error(kind or type(e).__name__, str(e), error_site(e), error_frames(e), holder)
