"""conftest.py for LangChain's own shell-tool middleware tests (the
pinned sdist's tests/unit_tests/agents/middleware/implementations/
test_shell_tool.py), copied next to them by test_langchain_upstream.py:
every HostExecutionPolicy those tests make, and the one
ShellToolMiddleware makes when given none, is a StockadeExecutionPolicy,
so each of their shells starts in a stockade jail. Their test bodies are
not edited. Each spawn's argv is appended to $STOCKADE_UPSTREAM_SPAWNS
(one JSON line), so the runner can tell that the jails did start."""

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

    def spawn(self, *, workspace, env, command):
        with open(os.environ["STOCKADE_UPSTREAM_SPAWNS"], "a") as f:
            f.write(json.dumps(self.build_command(workspace, env, command)) + "\n")
        return super().spawn(workspace=workspace, env=env, command=command)


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
