"""Make the venvs the Python suites run in, or bring them up to date: the
suite's venv (the package with its langchain and deepagents extras, Deep
Agents pinned, and typing_requirements.txt) and, beside it, the upstream
LangChain venv (test_langchain_upstream.prepare). Both downloads run at
once. Kept between runs: a second call only reinstalls the package.

    python3 suite_venv.py VENV [PKG [WHEELHOUSE]]

PKG is the package's directory (default: a copy of this checkout's
clients/python, made in a temporary directory, so a build leaves nothing
in the checkout); WHEELHOUSE is where a package without PyPI is found.
Without PyPI the package alone is installed and the framework suites
skip. tests/python_integrations.rs calls it before its runs, and
`cargo xtask test` calls it at its start, beside the Rust builds (pip
waits on the network while they use the CPUs); exits non-zero only when
the package itself cannot be installed.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Deep Agents pinned: test_deepagents is written against it.
PINS = ["deepagents==0.7.32"]
EXTRAS = "[langchain,deepagents]"


def pip(py, *args):
    argv = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"] + list(args)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode == 0, p.stdout.decode("utf-8", "replace")


def install(py, pkg, wheelhouse):
    """The package (always reinstalled: it is the code under test), then
    its extras and the pins; without PyPI, the package from the
    wheelhouse alone."""
    ok, out = pip(py, "--force-reinstall", "--no-deps", pkg)
    if ok:
        ok, out = pip(py, pkg + EXTRAS, *PINS, "-r", os.path.join(HERE, "typing_requirements.txt"))
    if ok:
        return True
    print("pip install %s%s failed (PyPI out of reach?):\n%s" % (pkg, EXTRAS, out), flush=True)
    if not wheelhouse:
        return False
    ok, out = pip(py, "--no-index", "--find-links", wheelhouse, "--force-reinstall", "--no-deps", pkg)
    if not ok:
        print("pip install %s from %s:\n%s" % (pkg, wheelhouse, out), flush=True)
    return ok


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    venv = os.path.abspath(argv[1])
    if not os.path.exists(os.path.join(venv, "bin/python")):
        os.makedirs(os.path.dirname(venv), exist_ok=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)
    # Readable by uid 65534, which runs the suites too.
    for d in (os.path.dirname(os.path.dirname(venv)), os.path.dirname(venv)):
        os.chmod(d, 0o755)
    py = os.path.join(venv, "bin/python")
    # The upstream venv is made by the suite's Python (it lives beside
    # its venv), from the tests' directory, while the package installs.
    upstream = subprocess.Popen(
        [
            py,
            "-c",
            "import unittest, test_langchain_upstream as t\n"
            "try:\n    t.prepare()\nexcept unittest.SkipTest as e:\n    print('not made:', e)",
        ],
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    tmp = None
    try:
        if len(argv) > 2:
            pkg = argv[2]
        else:
            tmp = tempfile.mkdtemp(prefix="stockade-pkg-")
            pkg = os.path.join(tmp, "python")
            shutil.copytree(
                os.path.dirname(HERE),
                pkg,
                ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
            )
        ok = install(py, pkg, argv[3] if len(argv) > 3 else None)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        out = upstream.communicate()[0].decode("utf-8", "replace")
        print("--- the upstream LangChain venv\n" + out, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
