"""conftest.py for LangChain's own shell-tool middleware tests (the
pinned sdist's tests/unit_tests/agents/middleware/implementations/
test_shell_tool.py), copied next to them by test_langchain_upstream.py:
every HostExecutionPolicy those tests make, and the one
ShellToolMiddleware makes when given none, is a StockadeExecutionPolicy,
so each of their shells starts in a stockade jail. Their test bodies are
not edited. Each argv given to LangChain's `_launch_subprocess` is
appended to $STOCKADE_UPSTREAM_SPAWNS (one JSON line), so the runner can
tell that the shells were `stockade run`s."""

import json
import os
from dataclasses import dataclass

from langchain.agents.middleware import _execution, shell_tool

from stockade.langchain import StockadeExecutionPolicy


@dataclass
class StockadeInPlaceOfHost(StockadeExecutionPolicy):
    """HostExecutionPolicy's fields on StockadeExecutionPolicy: its limits
    become the jail's (`cpu_time_seconds`, `memory_bytes`), and
    `create_process_group` is moot (the jail is its own session)."""

    create_process_group: bool = True


_launch = _execution._launch_subprocess


def _recording_launch(command, **kwargs):
    """LangChain's `_launch_subprocess` (which the policy starts its
    shell through), recording each argv."""
    with open(os.environ["STOCKADE_UPSTREAM_SPAWNS"], "a") as f:
        f.write(json.dumps(list(command)) + "\n")
    return _launch(command, **kwargs)


_execution._launch_subprocess = _recording_launch
shell_tool.HostExecutionPolicy = StockadeInPlaceOfHost
_execution.HostExecutionPolicy = StockadeInPlaceOfHost


def pytest_collection_modifyitems(config, items):
    """Tests that cannot pass here ($STOCKADE_UPSTREAM_KNOWN: {test name:
    why}) are reported skipped, with why."""
    import pytest

    known = json.loads(os.environ.get("STOCKADE_UPSTREAM_KNOWN") or "{}")
    for item in items:
        if item.name in known:
            item.add_marker(pytest.mark.skip(reason=known[item.name]))
