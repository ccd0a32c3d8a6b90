"""Where an exception happened in the user's code. Imports nothing heavy: `run` uses it before
torch is imported (a syntax error in the script) and the API after a failed step."""

from __future__ import annotations

import os
from typing import Optional

OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

Site = tuple[Optional[str], Optional[int], Optional[str]]


def error_site(e: BaseException) -> Site:
    """(file, line, function) of the innermost frame of the user's own code in the exception's
    traceback; for a syntax error, where the script fails to parse."""
    site: Site = (None, None, None)
    tb = e.__traceback__
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not fn.startswith(OWN_DIR) and "site-packages" not in fn and not fn.startswith("<"):
            code = tb.tb_frame.f_code
            site = (os.path.abspath(fn), tb.tb_lineno, getattr(code, "co_qualname", code.co_name))
        tb = tb.tb_next
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        site = (os.path.abspath(e.filename), e.lineno, None)
    return site
