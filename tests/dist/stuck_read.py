"""One rank stuck in a read whose cleanup takes a while: a stopped rank unwinds through the
cleanup (here a `finally`), where a second SIGTERM can reach it."""

import os
import sys
import time


def fetch(marker):
    try:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)  # the read that never returns
    finally:
        time.sleep(2)  # closing the connection


fetch(sys.argv[1])
