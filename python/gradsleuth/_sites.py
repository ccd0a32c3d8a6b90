"""Where an exception happened in the user's code. Imports nothing heavy: `run` uses it before
torch is imported (a syntax error in the script) and the API after a failed step."""

from __future__ import annotations

import os
import sysconfig

from gradsleuth._core import Frames

OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# The standard library's directories: its frames (copy, pickle, multiprocessing) are not the user's.
STDLIB_DIRS = sorted({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})
# Which file is the user's is decided in one place (`gradsleuth_capture::site`): gradsleuth's
# own files are skipped, installed packages and the stdlib are libraries.
_FILES = Frames([OWN_DIR], STDLIB_DIRS)


Site = tuple[str | None, int | None, str | None]


def error_site(e: BaseException) -> Site:
    """(file, line, function) of the innermost frame of the user's own code in the exception's
    traceback; for a syntax error, where the script fails to parse."""
    return _FILES.error_site(e)


def record_error(rec, e: BaseException, kind: str | None = None) -> None:
    """The exception into the recorder: its type, message, the user's site, the traceback's
    files and, for an object pickle could not serialise, who holds it."""
    holder = None
    try:
        holder = _FILES.pickle_holder(e)
    except Exception:  # noqa: BLE001 - an explanation never breaks the report
        pass
    rec.set_error(kind or type(e).__name__, str(e), error_site(e), _FILES.error_frames(e), holder)
