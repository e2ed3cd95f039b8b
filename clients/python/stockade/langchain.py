"""LangChain: `StockadeExecutionPolicy`, an execution policy for
`ShellToolMiddleware` (langchain 1.x) that starts the persistent shell in
a stockade jail. Needs the `langchain` extra:

    pip install './clients/python[langchain]'

    from langchain.agents.middleware import ShellToolMiddleware
    from stockade.langchain import StockadeExecutionPolicy

    shell = ShellToolMiddleware(
        workspace_root="/srv/agent-work",
        execution_policy=StockadeExecutionPolicy(memory_bytes=512 << 20),
    )

The workspace is bound read-write at its own path (the shell starts
there, and it is $HOME); the rest of the host is what the profile shows
(`shell`: /usr, /bin, /lib* and a few /etc files read-only), no network
but loopback unless `network_enabled`, and the host environment stays
out: the shell sees only the middleware's `env`.
"""

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

try:
    from langchain.agents.middleware import BaseExecutionPolicy
except ImportError:  # langchain 1.x exports it from the shell tool's module
    from langchain.agents.middleware.shell_tool import BaseExecutionPolicy

from . import _options, local

# LangChain's own temporary workspaces (a workspace_root-less middleware).
_LANGCHAIN_TEMP_PREFIX = "langchain-shell-"
NOBODY = 65534


def userns_available(binary):
    """Whether this host lets stockade make user namespaces (`stockade
    check --json`); without them jails run as leased uids (the fallback)."""
    probe = subprocess.run([binary, "check", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        return bool(json.loads(probe.stdout)["layers"]["userns"]["available"])
    except (ValueError, KeyError, TypeError):
        return True


def owner_flags(workspace, binary):
    """Flags that let the jail's user write `workspace`. A root caller's
    jails map to host uid 65534: map them to the workspace's owner
    instead, or hand LangChain's own temporary workspace to 65534 (in the
    fallback, where each jail gets a leased uid, open it to every uid); a
    root-owned workspace of the caller's is refused (the jail would run
    as host root)."""
    if os.geteuid() != 0:
        return []
    st = os.stat(workspace)
    if st.st_uid != 0:
        return ["--host-uid", str(st.st_uid), "--host-gid", str(st.st_gid)]
    if Path(workspace).name.startswith(_LANGCHAIN_TEMP_PREFIX):
        if userns_available(binary):
            os.chown(workspace, NOBODY, NOBODY)
        else:
            os.chmod(workspace, 0o777)
        return []
    raise ValueError(
        "workspace %s is owned by root: a jail never runs as host root; "
        "chown it to the user the jail should write as (e.g. 65534)" % workspace
    )


def _int(name, value):
    """An int field (never a bool, a float or text)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _options.bad_type(name, "an int", value)
    return value


@dataclass
class StockadeExecutionPolicy(BaseExecutionPolicy):
    """Run the persistent shell in a stockade jail (one jail per shell
    session; a restart is a fresh jail on the same workspace).

    `profile`: the jail's base profile (`shell`); `memory_bytes`, `cpus`,
    `pids`: cgroup limits of the whole session; `network_enabled`: share
    the host's network (off: loopback only); `binary`: the stockade
    binary (default $STOCKADE_BIN or PATH); `extra_flags`: more
    `stockade run` flags (e.g. ["--ro-bind", "/data"])."""

    binary: Optional[str] = None
    profile: str = "shell"
    memory_bytes: Optional[int] = None
    cpus: Optional[float] = None
    pids: Optional[int] = None
    network_enabled: bool = False
    extra_flags: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self):
        # LangChain's own fields first (its check reads max_output_lines).
        _options.count("max_output_lines", _int("max_output_lines", self.max_output_lines))
        super().__post_init__()
        self._check()

    def _check(self):
        """Each field as LangChain and `stockade run` read it; refused
        (InvalidOption, a ValueError; InvalidOptionType, a TypeError)
        before any shell starts."""
        for name in ("command_timeout", "startup_timeout", "termination_timeout"):
            _options.seconds(name, getattr(self, name))
        if self.max_output_bytes is not None:
            _options.count("max_output_bytes", _int("max_output_bytes", self.max_output_bytes))
        _options.optional_path("binary", self.binary)
        _options.path("profile", self.profile)
        if self.memory_bytes is not None:
            _options.size("memory_bytes", _int("memory_bytes", self.memory_bytes))
        if self.cpus is not None:
            if isinstance(self.cpus, str):
                raise _options.bad_type("cpus", "a number (int or float)", self.cpus)
            _options.cpus("cpus", self.cpus)
        if self.pids is not None:
            _options.count("pids", _int("pids", self.pids))
        _options.boolean("network_enabled", self.network_enabled)
        self.extra_flags = tuple(_options.flags("extra_flags", self.extra_flags))

    def build_command(self, workspace, env, command):
        """The `stockade run` argv for `command` on `workspace`."""
        self._check()
        ws = os.path.realpath(str(workspace))
        binary = local.find_binary(self.binary)
        argv = [binary, "run", local.flag("--profile", self.profile)]
        argv += [local.flag("--workdir", "%s:%s" % (ws, ws))] + owner_flags(ws, binary)
        argv += [local.flag("--network", "host" if self.network_enabled else "none")]
        argv += local.limit_flags({"memory": self.memory_bytes, "cpus": self.cpus, "pids": self.pids})
        argv += local.env_flags({str(k): str(v) for k, v in dict(env).items()})
        return argv + list(self.extra_flags) + ["--"] + list(command)

    def spawn(self, *, workspace: Path, env: Mapping[str, str], command: Sequence[str]) -> "subprocess.Popen[str]":
        argv = self.build_command(workspace, env, command)
        # stockade gives the jail a fresh environment (only the --setenv
        # above); its own process keeps the caller's.
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(workspace),
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )


__all__ = ["StockadeExecutionPolicy"]
