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
(`shell`: /usr, /bin, /lib* and a few /etc files read-only). The network
is stockade's `none` unless `network` says otherwise: a network namespace
of its own with only loopback, and TCP refused even there (`"loopback"`
allows TCP between the jail's processes; `"host"`, or
`network_enabled=True`, shares the host's). The host environment stays
out: the shell sees the middleware's `env`, a PATH of the system's
directories (`/usr/local/bin:/usr/bin:/bin`, never the caller's) unless
that `env` sets one, and $HOME.
"""

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:  # where langchain 1.x defines them
    from langchain.agents.middleware import _execution
    from langchain.agents.middleware._execution import BaseExecutionPolicy
else:
    try:
        from langchain.agents.middleware import BaseExecutionPolicy
    except ImportError:  # langchain 1.x exports it from the shell tool's module
        from langchain.agents.middleware.shell_tool import BaseExecutionPolicy

    try:  # where LangChain's own policies start their process (and its tests patch it)
        from langchain.agents.middleware import _execution
    except ImportError:  # pragma: no cover - a langchain without the module
        _execution = None

from . import _options, local

NOBODY = 65534
# The jail's PATH: stockade's own default, not the caller's (a pyenv shim
# or a virtualenv's bin on the host means nothing inside).
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
# Variables stockade copies from its own environment into the jail's.
_JAIL_INHERITED = ("PATH", "LANG", "LC_ALL", "TERM")
# `stockade run` flags the policy sets itself: (flag, its other spellings).
# The same flag in `extra_flags` replaces the policy's.
_POLICY_FLAGS: Dict[str, Tuple[str, ...]] = {
    "--profile": (),
    "--network": (),
    "--memory": (),
    "--cpus": (),
    "--pids-limit": (),
    "--cpu-time": (),
}
# Who the jail runs as: given in `extra_flags`, the workspace is left as it is.
_OWNER_FLAGS = ("--host-uid", "--host-gid", "--uid-range")
# Flags the policy cannot give up: the workspace is the workdir.
_REFUSED_FLAGS = {"--workdir": "the workspace is the jail's workdir: set ShellToolMiddleware(workspace_root=...)"}


def userns_available(binary: str) -> bool:
    """Whether this host lets stockade make user namespaces (`stockade
    check --json`); without them jails run as leased uids (the fallback)."""
    probe = subprocess.run([binary, "check", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        return bool(json.loads(probe.stdout)["layers"]["userns"]["available"])
    except (ValueError, KeyError, TypeError):
        return True


def owner_flags(workspace: str, binary: str) -> List[str]:
    """Make `workspace` writable by the jail's user; return the flags that
    say who that is. Not root: the jail writes as the caller, nothing to
    do. Root, with user namespaces: the jail maps to the workspace's
    owner (`--host-uid`), and a root-owned workspace (LangChain makes
    `workspace_root` itself, and its temporary one) is first handed to
    uid 65534, stockade's default host uid (a jail never runs as host
    root). Root, where user namespaces are refused: each jail runs as a
    uid leased for it, so the workspace is opened to every uid (mode
    0777, what stockade's README asks of a writable bind there).

    Only an empty directory is handed over or opened (one LangChain has
    just made, or one the caller made for the jail): a root-owned or, in
    the fallback, not yet opened workspace with files in it is refused
    (ValueError), so that a workspace_root of /root or /etc is never
    given away."""
    if os.geteuid() != 0:
        return []
    st = os.stat(workspace)
    fallback = not userns_available(binary)
    if fallback and st.st_mode & 0o777 == 0o777:
        return []
    if (fallback or st.st_uid == 0) and os.listdir(workspace):
        raise ValueError(
            "workspace %s: started by root, the jail (never host root%s) can write only a workspace "
            "handed to it, and this one is %s and not empty; give an empty or new directory "
            "(ShellToolMiddleware makes workspace_root when it is missing)"
            % (workspace, "; here a uid leased per jail" if fallback else "; here uid 65534",
               "not open to every uid" if fallback else "owned by root")
        )
    if fallback:
        os.chmod(workspace, (st.st_mode & 0o7777) | 0o777)
        return []
    if st.st_uid == 0:
        os.chown(workspace, NOBODY, NOBODY)
        return []
    return ["--host-uid", str(st.st_uid), "--host-gid", str(st.st_gid)]


def _int(name: str, value: Any) -> int:
    """An int field (never a bool, a float or text)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _options.bad_type(name, "an int", value)
    return value


def _flag_name(arg: str) -> Optional[str]:
    """The `--name` of a flag argument (`--name` or `--name=value`)."""
    return arg.split("=", 1)[0] if arg.startswith("--") else None


@dataclass
class StockadeExecutionPolicy(BaseExecutionPolicy):
    """Run the persistent shell in a stockade jail (one jail per shell
    session; a restart is a fresh jail on the same workspace).

    `profile`: the jail's base profile (`shell`); `memory_bytes`, `cpus`,
    `pids`: cgroup limits of the whole session; `cpu_time_seconds`: the
    shell's CPU time (`--cpu-time`, RLIMIT_CPU, as LangChain's
    HostExecutionPolicy); `network`: `"none"` (the default: loopback
    only, TCP refused), `"loopback"` (TCP between the jail's processes
    over loopback; needs user namespaces) or `"host"`;
    `network_enabled=True`: `"host"` (LangChain's Docker policy's
    spelling); `binary`: the stockade binary (default $STOCKADE_BIN or
    PATH); `extra_flags`: more `stockade run` flags (e.g. ["--ro-bind",
    "/data"]); one the policy sets itself (`--network`, `--memory`,
    `--profile`, …) replaces the policy's, `--host-uid`/`--host-gid`/
    `--uid-range` leave the workspace's owner to the caller, `--workdir`
    is refused. `overlay`: (host directory, path in the jail) pairs shown
    copy-on-write (`--overlay`): the shell changes an upper layer, the host
    directory is written only by `commit` ("success": after the shell
    exits 0, "always"), or later from `overlay_upper` (`--overlay-upper`,
    for `stockade overlay commit|discard`). `allow_hosts`: the jail's
    egress allowlist (`--allow-host` entries, with the network "none");
    `secrets`: {NAME: host or [hosts]} (`--secret`): the shell's $NAME
    holds a placeholder, and stockade's proxy puts the value (this
    process's environment variable NAME, or the file `secret_files`
    names) into the requests sent to those hosts only."""

    binary: Optional[str] = None
    profile: str = "shell"
    memory_bytes: Optional[int] = None
    cpus: Optional[float] = None
    pids: Optional[int] = None
    cpu_time_seconds: Optional[int] = None
    network: Optional[str] = None
    network_enabled: bool = False
    extra_flags: Sequence[str] = field(default_factory=tuple)
    overlay: Sequence[Tuple[str, str]] = field(default_factory=tuple)
    overlay_upper: Optional[str] = None
    commit: Optional[str] = None
    allow_hosts: Sequence[str] = field(default_factory=tuple)
    secrets: Optional[Mapping[str, Union[str, Sequence[str]]]] = None
    secret_files: Optional[Mapping[str, str]] = None

    def __post_init__(self) -> None:
        # LangChain's own fields first (its check reads max_output_lines).
        _options.count("max_output_lines", _int("max_output_lines", self.max_output_lines))
        super().__post_init__()
        self._check()

    def _check(self) -> None:
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
        if self.cpu_time_seconds is not None:
            _options.duration("cpu_time_seconds", _int("cpu_time_seconds", self.cpu_time_seconds))
        _options.network("network", self.network)
        _options.boolean("network_enabled", self.network_enabled)
        if self.network_enabled and self.network not in (None, "host"):
            raise _options.bad(
                "network", "%r contradicts network_enabled=True (the host's network)" % (self.network,)
            )
        self._overlay_flags()
        local.egress_flags(self.allow_hosts, self.secrets, self.secret_files, self._network())
        self.extra_flags = tuple(_options.flags("extra_flags", self.extra_flags))
        for i, arg in enumerate(self.extra_flags):
            flag_name = _flag_name(arg)
            if flag_name in _REFUSED_FLAGS:
                raise _options.bad("extra_flags[%d]" % i, "%s: %s" % (arg, _REFUSED_FLAGS[flag_name]))

    def _overlay_flags(self) -> List[str]:
        """`--overlay`, `--overlay-upper`, `--commit` (checked: InvalidOption
        naming `overlay[i]`, `overlay_upper` or `commit`)."""
        pairs = _options.overlays("overlay", list(self.overlay) if self.overlay else None)
        when = _options.commit("commit", self.commit)
        upper = _options.optional_path("overlay_upper", self.overlay_upper)
        if not pairs and (upper is not None or when != "never"):
            raise _options.bad("overlay_upper" if upper is not None else "commit", "needs an overlay=")
        out = [local.flag("--overlay", "%s:%s" % p) for p in pairs]
        if upper is not None:
            out += [local.flag("--overlay-upper", upper)]
        if when != "never":
            out += [local.flag("--commit", when)]
        return out

    def _network(self) -> str:
        if self.network_enabled:
            return "host"
        return self.network or "none"

    def build_command(self, workspace: "Union[os.PathLike[str], str]", env: Mapping[str, object], command: Sequence[str]) -> List[str]:
        """The `stockade run` argv for `command` on `workspace`."""
        self._check()
        ws = os.path.realpath(str(workspace))
        binary = local.find_binary(self.binary)
        given = {_flag_name(a) for a in self.extra_flags}
        ours = [local.flag("--profile", self.profile), local.flag("--workdir", "%s:%s" % (ws, ws))]
        if not given & set(_OWNER_FLAGS):
            ours += owner_flags(ws, binary)
        ours += [local.flag("--network", self._network())]
        ours += local.egress_flags(self.allow_hosts, self.secrets, self.secret_files, self._network(), env)
        ours += self._overlay_flags()
        ours += local.limit_flags({"memory": self.memory_bytes, "cpus": self.cpus, "pids": self.pids})
        if self.cpu_time_seconds is not None:
            ours += [local.flag("--cpu-time", "%ds" % self.cpu_time_seconds)]
        # A flag of extra_flags replaces the policy's own (stockade takes
        # each of these once).
        replaced = {name for name, aliases in _POLICY_FLAGS.items() if given & {name, *aliases}}
        ours = [a for a in ours if _flag_name(a) not in replaced]
        argv = [binary, "run"] + ours
        argv += local.env_flags({str(k): str(v) for k, v in dict(env).items()})
        return argv + list(self.extra_flags) + ["--"] + list(command)

    @staticmethod
    def stockade_env() -> Dict[str, str]:
        """The environment of the `stockade` process: the caller's (stockade
        reads its HOME, XDG_RUNTIME_DIR, `--keep-env` names), less what
        stockade would copy into the jail, with PATH the system's."""
        env = {k: v for k, v in os.environ.items() if k not in _JAIL_INHERITED}
        env["PATH"] = CLEAN_PATH
        return env

    def spawn(self, *, workspace: Path, env: Mapping[str, str], command: Sequence[str]) -> "subprocess.Popen[str]":
        argv = self.build_command(workspace, env, command)
        # Started as LangChain's own policies start theirs, through
        # `_execution._launch_subprocess` (looked up at each call, so a
        # patch of it applies); stockade gives the jail a fresh
        # environment (only the --setenv above, PATH and HOME).
        launch: Callable[..., "subprocess.Popen[str]"] = getattr(_execution, "_launch_subprocess", None) or _launch_subprocess
        return launch(
            argv,
            env=self.stockade_env(),
            cwd=Path(workspace),
            preexec_fn=None,
            start_new_session=True,
        )


def _launch_subprocess(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    preexec_fn: Optional[Callable[[], None]],
    start_new_session: bool,
) -> "subprocess.Popen[str]":
    """LangChain's `_launch_subprocess`, for a langchain without it."""
    return subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        text=True,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
        env=env,
        preexec_fn=preexec_fn,
        start_new_session=start_new_session,
    )


__all__ = ["StockadeExecutionPolicy"]
