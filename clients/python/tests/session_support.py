"""Shared by the session suites: skip when the binary has no `stockade
session` (a stockade from before sessions); never a fake server."""

import os
import subprocess
import unittest

BIN = os.environ.get("STOCKADE_BIN")


def require_session():
    if not BIN:
        raise unittest.SkipTest("STOCKADE_BIN is not set: no local stockade binary to test")
    probe = subprocess.run([BIN, "session", "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        raise unittest.SkipTest("this stockade has no `session` subcommand")
