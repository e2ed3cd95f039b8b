"""The package's static checks: `mypy --strict` and `ruff check` on
clients/python/stockade, with the configuration of clients/python/
pyproject.toml, pinned in typing_requirements.txt. Without the tools
installed each test skips (`SKIPPED: <test>: <reason>`), never passes."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

# clients/python: its pyproject.toml configures both tools.
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "stockade"


def _pins():
    pins = {}
    with open(Path(__file__).resolve().parent / "typing_requirements.txt") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip()] = version.strip()
    return pins


def _run(test, tool, args):
    """Run `python -m tool args` in clients/python; fail with its output."""
    if importlib.util.find_spec(tool) is None:
        reason = "%s is not installed (pip install -r tests/typing_requirements.txt)" % tool
        print("SKIPPED: %s: %s" % (test.id(), reason))
        test.skipTest(reason)
    proc = subprocess.run(
        [sys.executable, "-m", tool] + args,
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    output = proc.stdout.decode("utf-8", "replace")
    version = subprocess.run(
        [sys.executable, "-m", tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ).stdout.decode("utf-8", "replace").strip()
    test.assertEqual(
        proc.returncode,
        0,
        "%s %s failed (%s; pinned %s==%s):\n%s"
        % (tool, " ".join(args), version, tool, _pins().get(tool, "?"), output),
    )


class StaticChecks(unittest.TestCase):
    def test_mypy_strict(self):
        # Its cache in a directory of its own: the checkout may not be
        # writable (the suite runs as uid 65534 too).
        with tempfile.TemporaryDirectory(prefix="stockade-mypy-") as cache:
            _run(self, "mypy", ["--strict", "--cache-dir", cache, PACKAGE])

    def test_ruff_check(self):
        _run(self, "ruff", ["check", "--no-cache", PACKAGE])


if __name__ == "__main__":
    unittest.main()
