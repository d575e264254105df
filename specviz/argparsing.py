"""The argument parser of specviz's command lines (`python -m specviz`, its bench, the bench scripts)."""

from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake printed as one line on stderr and exit status 2, like every
    other error a user can fix (not argparse's usage block)."""

    def error(self, message):
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)
