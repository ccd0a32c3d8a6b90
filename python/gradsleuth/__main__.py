"""`python -m gradsleuth ...`: the same command line as the `gradsleuth` script."""

import sys

from gradsleuth._core import cli_main

if __name__ == "__main__":
    sys.exit(cli_main(sys.argv))
