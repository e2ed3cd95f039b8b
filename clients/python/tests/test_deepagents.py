"""stockade.deepagents.StockadeSandbox: the backend's own methods, and a
Deep Agents agent (create_deep_agent) whose `execute` tool calls — made by
a fake chat model from langchain_core's testing utilities, no LLM — run
in the session's jail. Skipped without deepagents (the `deepagents`
extra) or without `stockade session`."""

import os
import socket
import unittest

from session_support import require_session

CANARY = "host-canary-7c2e91"

try:
    from deepagents import create_deep_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
except ImportError as e:
    DEEPAGENTS = e
else:
    DEEPAGENTS = None

    class ToolCallingFakeModel(GenericFakeChatModel):
        """GenericFakeChatModel that accepts the agent's tools."""

        def bind_tools(self, tools, **kwargs):
            return self


def setUpModule():
    if DEEPAGENTS is not None:
        raise unittest.SkipTest("deepagents is not installed: %s" % DEEPAGENTS)
    require_session()


def sandbox(**kwargs):
    from stockade.deepagents import StockadeSandbox

    return StockadeSandbox(**kwargs)


def run_agent(box, calls):
    """Each (tool, args) as one tool call of the fake model; the
    ToolMessages in order."""
    script = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call%d" % i}])
        for i, (name, args) in enumerate(calls)
    ]
    model = ToolCallingFakeModel(messages=iter(script + [AIMessage(content="done")]))
    agent = create_deep_agent(model=model, backend=box)
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(tools) == len(calls), result["messages"]
    return tools


class Backend(unittest.TestCase):
    def test_execute_upload_download(self):
        with sandbox() as box:
            self.assertTrue(box.id)
            r = box.execute("echo hi; echo oops >&2; exit 4")
            self.assertEqual(r.exit_code, 4)
            self.assertIn("hi\n", r.output)
            self.assertIn("[stderr] oops", r.output)
            w = box.session.workdir
            data = bytes(range(256)) * 10
            up = box.upload_files([(w + "/in/deep/blob.bin", data), ("", b"x"), ("/proc/nope/x", b"x")])
            self.assertEqual([u.error for u in up[:2]], [None, "invalid_path"])
            self.assertIsNotNone(up[2].error)
            down = box.download_files([w + "/in/deep/blob.bin", w + "/missing", w + "/in", "/etc/shadow"])
            self.assertEqual(down[0].content, data)
            self.assertEqual([d.error for d in down[1:3]], ["file_not_found", "is_directory"])
            # not in the jail (the fallback: Landlock refuses it)
            self.assertIn(down[3].error, ("file_not_found", "permission_denied"))
            r = box.execute("sleep 600", timeout=1)
            self.assertEqual(r.exit_code, 124)
            self.assertIn("timed out", r.output)
            self.assertEqual(box.execute("cmp -s in/deep/blob.bin in/deep/blob.bin && echo same").output,
                             "same\n", "the session lives on after a timeout")


class ThroughAnAgent(unittest.TestCase):
    def test_parallel_and_async_tool_calls_share_the_session(self):
        """Two execute calls in one model turn run on the same session
        (one at a time, never `busy`), through ainvoke as well."""
        import asyncio

        with sandbox() as box:
            turn = AIMessage(content="", tool_calls=[
                {"name": "execute", "args": {"command": "echo one > a; cat a"}, "id": "p1"},
                {"name": "execute", "args": {"command": "echo two > b; cat b"}, "id": "p2"},
            ])
            model = ToolCallingFakeModel(messages=iter([turn, AIMessage(content="done")]))
            agent = create_deep_agent(model=model, backend=box)
            result = asyncio.run(agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}))
            outs = sorted(m.content.split("\n")[0] for m in result["messages"] if isinstance(m, ToolMessage))
            self.assertEqual(outs, ["one", "two"], result["messages"])
            self.assertEqual(box.execute("cat a b").output, "one\ntwo\n")

    def test_execute_tool_in_the_jail(self):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        home = os.path.expanduser("~")
        os.environ["STOCKADE_DEEP_CANARY"] = CANARY
        try:
            with sandbox() as box:
                notes = box.session.workdir + "/notes.txt"
                msgs = run_agent(box, [
                    ("execute", {"command": "mkdir -p proj && cd proj && export COLOR=blue"}),
                    ("execute", {"command": "pwd; echo $COLOR"}),
                    ("write_file", {"file_path": notes, "content": "written by the agent\n"}),
                    ("execute", {"command": "cat " + notes}),
                    ("execute", {"command": "ls /nonexistent"}),
                    ("execute", {"command": "sleep 600", "timeout": 1}),
                    ("execute", {"command": "cat /etc/shadow; cat %s/.ssh/id_rsa" % home}),
                    ("execute", {"command": "env; cat /proc/*/environ | tr '\\0' '\\n'"}),
                    ("execute", {"command": "echo hi > /dev/tcp/127.0.0.1/%d && echo CONNECTED" % port}),
                ])
                workdir = box.session.workdir
            with self.assertRaises(BlockingIOError):
                listener.accept()
        finally:
            del os.environ["STOCKADE_DEEP_CANARY"]
            listener.close()
        cd, pwd, write, cat, fail, slow, reads, env, net = [m.content for m in msgs]
        self.assertEqual(pwd.split("\n")[:2], [workdir + "/proj", "blue"])
        self.assertIn("written by the agent", cat)
        self.assertIn("Exit code: 2", fail)
        self.assertIn("timed out", slow)
        self.assertRegex(reads, "No such file|Permission denied")
        for text in (reads, env, net):
            self.assertNotIn(CANARY, text)
        self.assertNotIn("STOCKADE_DEEP_CANARY", env)
        self.assertNotIn("CONNECTED", net)
        self.assertIn("Exit code", net)


if __name__ == "__main__":
    unittest.main()
