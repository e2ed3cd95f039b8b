"""Build hooks of the Python package (hatchling's `custom` hooks).

The version is the workspace's: `[package] version` of the Cargo.toml two
directories up (the checkout's), so it is written in one place. A copy of
the package built outside the checkout reads it from its PKG-INFO (an
sdist), else gets "0+unknown".

`cargo xtask wheel` sets STOCKADE_WHEEL_BINARY (the static binary) and
STOCKADE_WHEEL_PLATFORM (its platform tag): the wheel then carries the
binary as the script `stockade` and is tagged py3-none-<platform>. Without
them the wheel is pure Python and finds the binary on PATH.
"""

import os

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface

try:
    import tomllib
except ImportError:  # Python < 3.11: hatchling depends on tomli there.
    import tomli as tomllib

UNKNOWN = "0+unknown"


def workspace_version(root):
    """The version in the checkout's Cargo.toml, or None outside one."""
    cargo = os.path.join(root, "..", "..", "Cargo.toml")
    try:
        with open(cargo, "rb") as f:
            package = tomllib.load(f).get("package", {})
    except FileNotFoundError:
        return None
    if package.get("name") != "stockade":
        return None
    return package["version"]


def sdist_version(root):
    try:
        with open(os.path.join(root, "PKG-INFO"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except FileNotFoundError:
        pass
    return None


class VersionHook(MetadataHookInterface):
    def update(self, metadata):
        metadata["version"] = workspace_version(self.root) or sdist_version(self.root) or UNKNOWN


class BinaryHook(BuildHookInterface):
    def initialize(self, version, build_data):
        binary = os.environ.get("STOCKADE_WHEEL_BINARY")
        if self.target_name != "wheel" or not binary:
            return
        platform = os.environ.get("STOCKADE_WHEEL_PLATFORM")
        if not platform:
            raise RuntimeError("STOCKADE_WHEEL_BINARY is set without STOCKADE_WHEEL_PLATFORM")
        if not os.access(binary, os.X_OK):
            raise RuntimeError("STOCKADE_WHEEL_BINARY: %s is not an executable file" % binary)
        build_data["shared_scripts"][os.path.abspath(binary)] = "stockade"
        build_data["tag"] = "py3-none-" + platform
        build_data["pure_python"] = False
