"""Which `stockade` binary the package runs: `binary=`, else
$STOCKADE_BIN, else the one installed with this package (the wheel of
`cargo xtask wheel` carries it as a script), else `stockade` on PATH."""

from __future__ import annotations

import functools
import os
import shutil
from importlib import metadata
from typing import Optional

from . import _options

# Where a wheel's scripts land, relative to the environment (RECORD names
# them so): bin/ on POSIX, Scripts/ on Windows.
_SCRIPT_DIRS = ("bin", "Scripts")


def locate(binary: Optional[_options.StrPath] = None) -> Optional[str]:
    """The binary to run, or None when there is none to try."""
    binary = _options.optional_path("binary", binary)
    return binary or os.environ.get("STOCKADE_BIN") or bundled() or shutil.which("stockade")


@functools.lru_cache(maxsize=None)
def bundled() -> Optional[str]:
    """The `stockade` script installed with this very package (by its
    wheel's RECORD), or None: a package imported from a checkout, or
    installed without the binary, has none."""
    try:
        dist = metadata.distribution("stockade")
    except metadata.PackageNotFoundError:
        return None
    files = dist.files or []
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    # The distribution found must be the one this module was loaded from.
    if not any(
        f.parts[-2:] == ("stockade", "__init__.py")
        and os.path.realpath(os.path.dirname(str(f.locate()))) == here
        for f in files
    ):
        return None
    for f in files:
        if f.name == "stockade" and len(f.parts) > 1 and f.parts[-2] in _SCRIPT_DIRS:
            path = os.path.abspath(str(f.locate()))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None
