"""The package's keyword options, checked before a jail is started or a
request sent: each accepts exactly what `stockade run` / `stockade session`
/ `stockade serve` accept for it, with the same meaning, and anything else
raises `InvalidOption` (a ValueError) or `InvalidOptionType` (a TypeError)
naming the keyword. Nothing is widened: no value turns into the host's
network, a dropped limit, or a writable bind.

The text grammars are the binary's (src/policy/units.rs): a number is
read as Rust reads it ([0-9] digits, an optional `+`, no `_`), after
Rust's `trim` (Unicode White_Space), with ASCII-only case folding.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union, cast

from .errors import InvalidOption, InvalidOptionType

# `--network`'s values (src/cli/args.rs NetArg), spelt as the CLI spells them.
NETWORKS = ("none", "loopback", "host")
U64_MAX = (1 << 64) - 1
# parse_duration: at most 1e9 seconds.
MAX_SECONDS = 1e9
# parse_cpus: at most 4096.
MAX_CPUS = 4096.0
# A session command's timeout (src/session/proto.rs): at most a day.
MAX_EXEC_TIMEOUT = 86400.0
# `stockade serve`'s bounds (src/serve/request.rs).
MAX_ARGS = 4096
MAX_PATH = 1024
MAX_NAME = 255

# Rust's char::is_whitespace (Unicode White_Space); Python's isspace also
# takes \x1c-\x1f, which Rust does not.
_RUST_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_UINT = re.compile(r"\+?[0-9]+\Z")
# Rust's f64 grammar, finite numbers only (inf and NaN are refused anyway).
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\Z")
# A file's content or stdin: text, or bytes.
Content = Union[str, bytes, bytearray]
# A host path: str, or os.PathLike of str.
StrPath = Union[str, "os.PathLike[str]"]

_SIZE_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def bad(field: str, why: str) -> InvalidOption:
    return InvalidOption("bad_request", "%s: %s" % (field, why), field)


def bad_type(field: str, expected: str, value: object) -> InvalidOptionType:
    return InvalidOptionType(
        "bad_request", "%s: expected %s, got %s %r" % (field, expected, type(value).__name__, value), field
    )


def _lower(text: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def _trim(text: str) -> str:
    return text.strip(_RUST_SPACE)


def _no_nul(field: str, text: str) -> str:
    if "\0" in text:
        raise bad(field, "contains a NUL byte")
    return text


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def text(field: str, value: Any, *, empty: bool = False) -> str:
    """A str without NUL (non-empty unless `empty`)."""
    if not isinstance(value, str):
        raise bad_type(field, "a string", value)
    if not value and not empty:
        raise bad(field, "must not be empty")
    return _no_nul(field, value)


def path(field: str, value: Any) -> str:
    """A host path: str or os.PathLike of str, non-empty, without NUL."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise bad_type(field, "a path (str or os.PathLike)", value)
    return text(field, value)


def overlays(field: str, value: Any) -> list[tuple[str, str]]:
    """`overlay=`: a list of (host directory, path in the jail) pairs, each
    a copy-on-write view of the host directory (`stockade run --overlay`)."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or (len(value) == 2 and isinstance(value[0], (str, os.PathLike))):
        raise bad_type(field, "a list of (host_dir, inner) pairs", value)
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(value):
        here = "%s[%d]" % (field, i)
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise bad_type(here, "a (host_dir, inner) pair", pair)
        host, inner = path(here, pair[0]), text(here, pair[1])
        if ":" in host:
            raise bad(here, "a host directory with `:` cannot be given to --overlay")
        if not inner.startswith("/"):
            raise bad(here, "inner must be an absolute path in the jail")
        out.append((host, inner))
    return out


COMMITS = ("never", "success", "always")


def commit(field: str, value: Any) -> str:
    """`commit=`: when an overlay's changes are applied to its host
    directory: "never" (the default), "success" (the payload exited 0) or
    "always"."""
    if value is None:
        return "never"
    if not isinstance(value, str) or value not in COMMITS:
        raise bad(field, "must be %s" % ", ".join(repr(c) for c in COMMITS))
    return value


def optional_path(field: str, value: Any) -> Optional[str]:
    return None if value is None else path(field, value)


def strings(field: str, value: Any, item: Callable[[str, Any], str] = text) -> list[str]:
    """A list or tuple of strings (never one string: it would be read
    character by character)."""
    if not isinstance(value, (list, tuple)):
        raise bad_type(field, "a list of strings", value)
    return [item("%s[%d]" % (field, i), v) for i, v in enumerate(value)]


def _parse_size(field: str, raw: str) -> None:
    """parse_size, then above 0 (parse_limit_size)."""
    t = _lower(_trim(raw))
    if t.endswith("ib"):
        t = t[:-2]
    elif t.endswith("b"):
        t = t[:-1]
    mult = 1
    if t and t[-1] in _SIZE_SUFFIX:
        t, mult = t[:-1], _SIZE_SUFFIX[t[-1]]
    t = _trim(t)
    if not _UINT.match(t) or int(t) > U64_MAX:
        raise bad(field, "%r is not a size (examples: 4096, 512k, 64m, 1g)" % raw)
    n = int(t) * mult
    if n > U64_MAX:
        raise bad(field, "%r is too large" % raw)
    if n == 0:
        raise bad(field, "%r: must be greater than 0 (leave the limit out for none)" % raw)


def size(field: str, value: Any) -> str:
    """A size limit: bytes as an int, or text (`64m`); above 0. Returns
    the text for the CLI."""
    if _is_int(value):
        if not 0 < value <= U64_MAX:
            raise bad(field, "%d: must be greater than 0 and at most %d bytes" % (value, U64_MAX))
        return str(value)
    if not isinstance(value, str):
        raise bad_type(field, "a number of bytes (int) or a size string such as '64m'", value)
    _parse_size(field, _no_nul(field, value))
    return value


def count(field: str, value: Any) -> str:
    """A count limit (processes): a whole number above 0, int or text."""
    if _is_int(value):
        if not 0 < value <= U64_MAX:
            raise bad(field, "%d: must be greater than 0 and at most %d" % (value, U64_MAX))
        return str(value)
    if not isinstance(value, str):
        raise bad_type(field, "a whole number (int or str)", value)
    t = _trim(_no_nul(field, value))
    if not _UINT.match(t) or int(t) > U64_MAX:
        raise bad(field, "%r is not a count (a whole number above 0)" % value)
    if int(t) == 0:
        raise bad(field, "%r: must be greater than 0 (leave the limit out for none)" % value)
    return value


def _float_text(field: str, raw: str, why: str) -> float:
    t = _trim(raw)
    if not _FLOAT.match(t):
        raise bad(field, why)
    return float(t)


def cpus(field: str, value: Any) -> str:
    """A CPU quota: a number above 0 and at most 4096, int, float or text."""
    why = "%r is not a number of CPUs above 0 and at most 4096 (examples: 0.5, 1, 2)" % (value,)
    if _is_number(value):
        v = _finite(field, value)
        if not 0 < v <= MAX_CPUS:
            raise bad(field, why)
        return repr(float(value)) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        raise bad_type(field, "a number of CPUs (int, float or str)", value)
    v = _float_text(field, _no_nul(field, value), why)
    if not (math.isfinite(v) and 0 < v <= MAX_CPUS):
        raise bad(field, why)
    return value


def _finite(field: str, value: Union[int, float]) -> float:
    try:
        v = float(value)
    except OverflowError:
        raise bad(field, "%r is too large" % (value,)) from None
    if not math.isfinite(v):
        raise bad(field, "%r: must be a finite number" % (value,))
    return v


_DURATION_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def _duration_seconds(field: str, raw: str) -> float:
    """parse_duration: seconds, or refuse."""
    why = "%r is not a duration (examples: 500ms, 10s, 1.5s, 2m)" % raw
    t = _lower(_trim(raw))
    scale = 1.0
    for suffix, s in _DURATION_UNITS:
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], s
            break
    v = _float_text(field, t, why)
    if not math.isfinite(v) or v < 0 or v * scale > MAX_SECONDS:
        raise bad(field, why)
    return v * scale


def duration(field: str, value: Any, *, zero: bool = False, unit: str = "s") -> str:
    """A duration: seconds as a number, or text (`10s`, `500ms`); above 0
    unless `zero` (then 0 is kept: "never"). Returns the CLI's text (a
    number gets `unit` appended)."""
    if _is_number(value):
        v = _finite(field, value)
        if v < 0 or (v == 0 and not zero) or v > MAX_SECONDS:
            raise bad(field, "%r: must be %s 0 and at most %d seconds" % (value, "at least" if zero else "greater than", MAX_SECONDS))
        if 0 < v < 1e-9:
            raise bad(field, "%r: shorter than a nanosecond" % (value,))
        return (repr(float(value)) if isinstance(value, float) else str(value)) + unit
    if not isinstance(value, str):
        raise bad_type(field, "seconds (int or float) or a duration string such as '10s'", value)
    s = _duration_seconds(field, _no_nul(field, value))
    if s == 0 and not zero:
        raise bad(field, "%r: must be greater than 0 (leave the limit out for none)" % value)
    if 0 < s < 1e-9:
        raise bad(field, "%r: shorter than a nanosecond" % value)
    return value


def seconds(field: str, value: Any, *, most: Optional[float] = None) -> Union[int, float]:
    """A number of seconds (int or float, not bool), finite, above 0 and
    at most `most`: a session command's timeout, a server's idle_timeout."""
    if not _is_number(value):
        raise bad_type(field, "a number of seconds (int or float)", value)
    v = _finite(field, value)
    if v <= 0 or (most is not None and v > most):
        limit = "" if most is None else " and at most %g" % most
        raise bad(field, "%r: must be greater than 0%s" % (value, limit))
    return cast("Union[int, float]", value)


def byte_count(field: str, value: Any) -> int:
    """A whole number of bytes from 0 (a session command's max_output)."""
    if not _is_int(value):
        raise bad_type(field, "a number of bytes (int)", value)
    if not 0 <= value <= U64_MAX:
        raise bad(field, "%d: must be between 0 and %d" % (value, U64_MAX))
    return cast(int, value)


def boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad_type(field, "True or False", value)
    return value


def network(field: str, value: Any) -> Optional[str]:
    """`--network`: "none", "loopback" or "host" exactly, or None (the
    profile's, which is none for the built-in profiles)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        raise bad(
            field,
            "an allow-host list is allow_hosts=[…] (with the network \"none\"); network takes "
            "%s only" % ", ".join(map(repr, NETWORKS)),
        )
    if not isinstance(value, str):
        raise bad_type(field, " or ".join(map(repr, NETWORKS)), value)
    if value not in NETWORKS:
        raise bad(field, "%r: expected one of %s" % (value, ", ".join(map(repr, NETWORKS))))
    return value


def profile(field: str, value: Any, *, local: bool = True) -> Optional[str]:
    """A profile: a built-in name or (locally) a .toml path; None for the
    default."""
    if value is None:
        return None
    return path(field, value) if local else text(field, value)


def env(field: str, value: Any, *, server: bool = False) -> dict[str, str]:
    """{NAME: value}: names non-empty without `=` or NUL, values str
    without NUL (and UTF-8 for a server: the body is JSON)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise bad_type(field, "a mapping {NAME: value}", value)
    if len(value) > MAX_ARGS:
        raise bad(field, "at most %d variables" % MAX_ARGS)
    out = {}
    for name, v in value.items():
        if not isinstance(name, str):
            raise bad_type(field, "str names", name)
        sub = "%s.%s" % (field, name)
        if not name or "=" in name or "\0" in name:
            raise bad(sub, "a name must be non-empty, without `=` or NUL")
        out[name] = text(sub, v, empty=True)
        if server:
            _utf8(sub, name)
            _utf8(sub, v)
    return out


def _utf8(field: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad(field, "not encodable as UTF-8 (a lone surrogate)") from None
    return value


def utf8_text(field: str, value: Any, *, empty: bool = False) -> str:
    return _utf8(field, text(field, value, empty=empty))


def file_path(field: str, value: Any) -> str:
    """A workdir-relative path: plain components only (check_path)."""
    if not isinstance(value, str):
        raise bad_type(field, "a relative path (str)", value)
    if not value:
        raise bad(field, "empty path")
    if "\0" in value:
        raise bad(field, "contains a NUL byte")
    if value.startswith("/"):
        raise bad(field, "absolute path: paths are relative to the workdir")
    raw = _utf8(field, value).encode("utf-8")
    if len(raw) > MAX_PATH:
        raise bad(field, "longer than %d bytes" % MAX_PATH)
    for part in value.split("/"):
        if part in ("", ".", ".."):
            raise bad(field, "plain relative components only (no '', '.', '..')")
        if len(part.encode("utf-8")) > MAX_NAME:
            raise bad(field, "a component is longer than %d bytes" % MAX_NAME)
    return value


def files(field: str, value: Any) -> dict[str, Content]:
    """{relative path: str | bytes}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise bad_type(field, "a mapping {relative path: str | bytes}", value)
    out = {}
    for p, content in value.items():
        sub = "%s[%s]" % (field, _quote(p))
        file_path(sub, p)
        if isinstance(content, str):
            _utf8(sub, content)
        elif not isinstance(content, (bytes, bytearray)):
            raise bad_type(sub, "str or bytes", content)
        out[p] = content
    return out


def _quote(p: object) -> str:
    return json.dumps(p) if isinstance(p, str) else repr(p)


def content(field: str, value: Any) -> Optional[Content]:
    """stdin: str or bytes."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, str):
        return _utf8(field, value)
    raise bad_type(field, "str or bytes", value)


def argv(field: str, value: Any, *, server: bool = False) -> list[str]:
    """A command: a non-empty list of strings (argv[0] non-empty), no NUL."""
    if not isinstance(value, (list, tuple)):
        raise bad_type(field, "a list of strings (not one string)", value)
    if not value:
        raise bad(field, "must not be empty")
    if server and len(value) > MAX_ARGS:
        raise bad(field, "at most %d entries" % MAX_ARGS)
    out = [text("%s[%d]" % (field, i), a, empty=i > 0) for i, a in enumerate(value)]
    if server:
        for i, a in enumerate(out):
            _utf8("%s[%d]" % (field, i), a)
    return out


# `limits`' keys and how each reads.
RUN_LIMITS: dict[str, Callable[[str, Any], str]] = {"memory": size, "cpus": cpus, "pids": count, "timeout": duration, "max_output": size}
SESSION_LIMITS = ("memory", "cpus", "pids")


def limits(field: str, value: Any, keys: tuple[str, ...] = tuple(RUN_LIMITS), *, server: bool = False) -> dict[str, Any]:
    """{memory, cpus, pids, timeout, max_output} (a None value: left
    out). Locally: {key: CLI text}; for a server: the values as given."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise bad_type(field, "a mapping {%s: value}" % ", ".join(keys), value)
    out = {}
    for key, v in value.items():
        sub = "%s.%s" % (field, key)
        if key not in keys:
            raise bad(sub, "unknown limit (%s)" % ", ".join(keys))
        if v is None:
            continue
        checked = RUN_LIMITS[key](sub, v)
        out[key] = v if server else checked
    return out


def flags(field: str, value: Any) -> list[str]:
    """More CLI flags: a list of strings."""
    return strings(field, value)


def server_duration(field: str, value: Any) -> Any:
    """A duration as `serve` reads every number of a request (its
    serve::clamp): seconds (int or float) or text (`10s`), above 0 and at
    most 1e9 seconds; sent as given (the server cuts it to its ceiling)."""
    duration(field, value)
    return value


def server_size(field: str, value: Any) -> Any:
    """A size as `serve` reads it: bytes (int) or text (`64m`), above 0;
    sent as given (the server cuts it to its ceiling)."""
    size(field, value)
    return value


def exec_options(
    command: Any, timeout: Any, max_output: Any, stdin: Any, *, server: bool = False
) -> dict[str, Any]:
    """A session command's request fields (protocol v1): `command` a
    non-empty str without NUL, `stdin` text; locally (the agent's own
    rules) `timeout` seconds above 0 and at most a day, `max_output` bytes
    from 0; through `serve` both as the server reads them
    ([`server_duration`], [`server_size`])."""
    request: dict[str, Any] = {"command": utf8_text("command", command)}
    if timeout is not None:
        request["timeout"] = (
            server_duration("timeout", timeout) if server else seconds("timeout", timeout, most=MAX_EXEC_TIMEOUT)
        )
    if max_output is not None:
        request["max_output"] = (
            server_size("max_output", max_output) if server else byte_count("max_output", max_output)
        )
    if stdin is not None:
        if not isinstance(stdin, str):
            raise bad_type("stdin", "text (str)", stdin)
        request["stdin"] = _utf8("stdin", stdin)
    return request


# A variable name (src/policy/egress.rs is_env_name): a secret's name.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Most secrets one request to a server may name (src/serve/secrets.rs).
MAX_SECRETS = 64


def host_entry(field: str, value: Any) -> str:
    """One egress allowlist entry (`--allow-host`): HOST[:PORT], *.SUFFIX,
    an IP, [IPV6] or a range; a str without `,`, whitespace or NUL (the
    binary reads the rest)."""
    entry = text(field, value)
    if "," in entry or any(c in _RUST_SPACE for c in entry):
        raise bad(field, "%r: one host entry, without `,` or spaces" % entry)
    return entry


def allow_hosts(field: str, value: Any) -> list[str]:
    """`allow_hosts=`: the jail's egress allowlist (`--allow-host`), a list
    of entries; the jail reaches those hosts through stockade's proxy, and
    nothing else."""
    if value is None:
        return []
    return strings(field, value, host_entry)


def secrets(field: str, value: Any) -> dict[str, list[str]]:
    """Local `secrets=`: {NAME: host or [hosts]} (`--secret NAME:HOST,…`):
    the jail's variable NAME holds a placeholder, and stockade's proxy puts
    the value (this process's environment variable NAME, or the file
    `secret_files` names) into the requests sent to those hosts only."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise bad_type(field, "a mapping {NAME: host or [hosts]}", value)
    out: dict[str, list[str]] = {}
    for name, hosts in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise bad(field, "%r is not a variable name (letters, digits and `_`, not first a digit)" % (name,))
        sub = "%s.%s" % (field, name)
        out[name] = [host_entry(sub, hosts)] if isinstance(hosts, str) else strings(sub, hosts, host_entry)
        if not out[name]:
            raise bad(sub, "names no host")
    return out


def secret_files(field: str, value: Any, names: Mapping[str, Any]) -> dict[str, str]:
    """`secret_files=`: {NAME: path} for secrets whose value is read from a
    file (one trailing newline dropped) instead of the environment."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise bad_type(field, "a mapping {NAME: path}", value)
    out = {}
    for name, p in value.items():
        if name not in names:
            raise bad("%s.%s" % (field, name), "not a name of secrets=")
        out[name] = path("%s.%s" % (field, name), p)
    return out


def secret_names(field: str, value: Any) -> list[str]:
    """A server's `secrets`: a list of the names its operator declared
    (`stockade serve --secret`); never a value."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        raise bad_type(field, "a list of secret names (the server holds the values)", value)
    names = strings(field, value)
    if len(names) > MAX_SECRETS:
        raise bad(field, "at most %d names" % MAX_SECRETS)
    for i, name in enumerate(names):
        if not _ENV_NAME.match(name) or len(name) > 128:
            raise bad("%s[%d]" % (field, i), "%r is not a secret name (letters, digits and `_`, not first a digit)" % name)
        if name in names[:i]:
            raise bad("%s[%d]" % (field, i), "%s is named twice" % name)
    return names
