"""stockade.langchain.StockadeExecutionPolicy through LangChain's own
code path: an agent (create_agent) with ShellToolMiddleware, driven by a
fake chat model from langchain_core's testing utilities (no LLM) whose
tool calls run in a real jail. Skipped when langchain is not installed
(the `langchain` extra)."""

import os
import socket
import tempfile
import unittest

BIN = os.environ.get("STOCKADE_BIN")
# tests/python_integrations.rs also runs the suites where user namespaces
# are refused (the fallback: jails as leased uids on the host's tree).
FALLBACK = os.environ.get("STOCKADE_TEST_FALLBACK") == "1"
CANARY = "host-canary-7c2e91"

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import ShellToolMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
except ImportError as e:  # the extra is not installed
    LANGCHAIN = e
else:
    LANGCHAIN = None

    class ToolCallingFakeModel(GenericFakeChatModel):
        """GenericFakeChatModel that accepts the agent's tools (it answers
        with its scripted messages whatever they are)."""

        def bind_tools(self, tools, **kwargs):
            return self


def setUpModule():
    if LANGCHAIN is not None:
        raise unittest.SkipTest("langchain is not installed: %s" % LANGCHAIN)
    if not BIN:
        raise unittest.SkipTest("STOCKADE_BIN is not set: no local stockade binary to test")


def run_shell(commands, **policy):
    """Run `commands` one tool call at a time through an agent; return
    the ToolMessages, in order."""
    from stockade.langchain import StockadeExecutionPolicy

    script = [
        AIMessage(content="", tool_calls=[{"name": "shell", "args": {"command": c}, "id": "call%d" % i}])
        for i, c in enumerate(commands)
    ]
    model = ToolCallingFakeModel(messages=iter(script + [AIMessage(content="done")]))
    middleware = ShellToolMiddleware(
        execution_policy=StockadeExecutionPolicy(termination_timeout=1, **policy),
        env={"GREETING": "hello"},
    )
    agent = create_agent(model=model, tools=[], middleware=[middleware])
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(tools) == len(commands), result["messages"]
    return tools


class ShellThroughLangChain(unittest.TestCase):
    def test_state_persists_and_failures_report(self):
        pwd, mk, cd, after, fail, who = run_shell([
            "pwd",
            "mkdir -p sub && echo data > sub/file",
            "cd sub && export COLOR=blue",
            "pwd; cat file; echo $COLOR $GREETING",
            "ls /nonexistent",
            "id -u",
        ])
        self.assertTrue(pwd.content.strip().startswith(tempfile.gettempdir() + "/langchain-shell-"), pwd.content)
        self.assertEqual(pwd.status, "success")
        lines = after.content.strip().splitlines()
        self.assertEqual(lines[0], pwd.content.strip() + "/sub")
        self.assertEqual(lines[1:], ["data", "blue hello"])
        self.assertEqual(fail.status, "error")
        self.assertIn("No such file or directory", fail.content)
        self.assertEqual(fail.artifact["exit_code"], 2)
        self.assertNotEqual(who.content.strip(), "0")
        if not FALLBACK:
            self.assertEqual(who.content.strip(), "1000", "the shell runs as the jail's user")

    def test_timeout_restarts_a_fresh_jail(self):
        before, slow, after = run_shell(["export MARK=set; echo $MARK", "sleep 600", "echo MARK=${MARK:-unset}"],
                                        command_timeout=2)
        self.assertEqual(before.content.strip(), "set")
        self.assertEqual(slow.status, "error")
        self.assertIn("timed out", slow.content)
        self.assertTrue(slow.artifact["timed_out"])
        self.assertEqual(after.content.strip(), "MARK=unset", "a fresh shell after the timeout")

    def test_hostile_commands_reach_nothing(self):
        host_home = os.path.expanduser("~")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        os.environ["STOCKADE_SHELL_CANARY"] = CANARY
        try:
            shadow, ssh, env, proc, net = run_shell([
                "cat /etc/shadow",
                "cat %s/.ssh/id_rsa; ls -a %s" % (host_home, host_home),
                "env",
                "cat /proc/*/environ | tr '\\0' '\\n'",
                "echo hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED" % port,
            ])
            with self.assertRaises(BlockingIOError):
                listener.accept()
        finally:
            del os.environ["STOCKADE_SHELL_CANARY"]
            listener.close()
        for m in (shadow, ssh, env, proc, net):
            self.assertNotIn(CANARY, m.content)
        self.assertEqual(shadow.status, "error")
        self.assertRegex(shadow.content, "No such file|Permission denied")
        self.assertEqual(ssh.status, "error")
        self.assertNotIn("id_rsa", ssh.content.replace("%s/.ssh/id_rsa" % host_home, ""))
        self.assertIn("GREETING=hello", env.content)
        self.assertNotIn("STOCKADE_SHELL_CANARY", env.content)
        self.assertNotIn("STOCKADE_BIN", env.content)
        self.assertEqual(net.status, "error")
        self.assertNotIn("CONNECTED", net.content)

    def test_memory_limit_reaches_the_jail(self):
        alloc = "python3 -c 'b = bytearray(300 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"ALLOCATED\")'"
        (free,) = run_shell([alloc])
        # A line of its own: a shell's "Killed" notice quotes the command.
        self.assertIn("ALLOCATED", free.content.splitlines(), "without a limit the allocation succeeds")
        (capped,) = run_shell([alloc], memory_bytes=128 << 20)
        self.assertNotIn("ALLOCATED", capped.content.splitlines(), capped.content)

    def test_bad_policy_fields(self):
        from stockade.langchain import StockadeExecutionPolicy

        with self.assertRaises(ValueError):
            StockadeExecutionPolicy(memory_bytes=0)
        with self.assertRaises(ValueError):
            StockadeExecutionPolicy(max_output_lines=0)


if __name__ == "__main__":
    unittest.main()
