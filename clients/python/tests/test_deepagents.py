"""stockade.deepagents.StockadeSandbox: the backend's own methods, and a
Deep Agents agent (create_deep_agent) whose tool calls — made by a fake
chat model from langchain_core's testing utilities, no LLM — run in the
session's jail: all nine of the agent's default tools (ls, read_file,
write_file, edit_file, delete, glob, grep, execute, task), empty results
included. Written against deepagents 0.7.32 (the suite installs that
version). Skipped without deepagents (the `deepagents` extra) or without
`stockade session`."""

import os
import shutil
import socket
import tempfile
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
        """GenericFakeChatModel that accepts the agent's tools (their
        names in `bound`, shared by the subagents' copies)."""

        bound: list = []

        def bind_tools(self, tools, **kwargs):
            self.bound.append(sorted(getattr(t, "name", None) or t["name"] for t in tools))
            return self

# The version these tests were written against, and the one the suite
# (tests/python_integrations.rs) installs.
DEEPAGENTS_VERSION = "0.7.32"
# create_deep_agent's default tools with a sandbox backend, in 0.7.32.
NINE_TOOLS = ["delete", "edit_file", "execute", "glob", "grep", "ls", "read_file", "task", "write_file"]


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


    def test_empty_output_stays_empty(self):
        """Deep Agents parses execute's output for grep, glob, ls, …:
        a command with no output gives "" (never a placeholder), and
        neither the exit code nor a truncation is written into it."""
        with sandbox(max_output=64) as box:
            w = box.session.workdir
            r = box.execute("true")
            self.assertEqual((r.output, r.exit_code, r.truncated), ("", 0, False))
            r = box.execute("exit 3")
            self.assertEqual((r.output, r.exit_code), ("", 3))
            r = box.execute("printf 'x%.0s' $(seq 200); exit 5")
            self.assertEqual((r.output, r.exit_code, r.truncated), ("x" * 64, 5, True))
            r = box.execute("printf out; echo err >&2")
            self.assertEqual(r.output, "out\n[stderr] err\n")
            self.assertEqual(box.grep("no-such-text", w).error, None)
            self.assertEqual(box.grep("no-such-text", w).matches, [])
            g = box.glob("*.nothing", w)
            self.assertEqual((g.error, g.matches), (None, []))
            self.assertEqual(box.ls(w).entries, [])

    def test_a_command_that_met_the_memory_limit_is_not_the_session_end(self):
        """close() says how the session ended (closed: exited), not that
        an earlier command met the session's memory limit."""
        with sandbox(memory="128m") as box:
            r = box.execute("python3 -c 'b = bytearray(1 << 30); print(len(b))'")
            self.assertNotEqual(r.exit_code, 0, r.output)
            self.assertEqual(box.execute("echo alive").output, "alive\n")
            outcome = box.close()
        self.assertEqual(outcome.status, "exited", outcome.raw)

    def test_a_root_callers_workdir_is_writable_by_the_jail(self):
        """workdir= given by root: the jail (never host root) writes it,
        its existing files included, and the host sees what it wrote.
        As another caller the jail runs as that caller, who owns it."""
        d = tempfile.mkdtemp(prefix="stockade-da-")
        try:
            os.chmod(d, 0o755)  # a directory as people make them: others may read
            with open(os.path.join(d, "seed.txt"), "w") as f:
                f.write("seed\n")
            os.mkdir(os.path.join(d, "sub"))
            with sandbox(workdir=d) as box:
                w = box.session.workdir
                self.assertEqual(box.write(w + "/new.txt", "new\n").error, None)
                self.assertEqual(box.edit(w + "/seed.txt", "seed", "grown").error, None)
                r = box.execute("touch sub/t && echo ok > sub/t && cat sub/t")
                self.assertEqual((r.output, r.exit_code), ("ok\n", 0))
            for name, text in (("new.txt", "new\n"), ("seed.txt", "grown\n"), ("sub/t", "ok\n")):
                with open(os.path.join(d, name)) as f:
                    self.assertEqual(f.read(), text, name)
        finally:
            shutil.rmtree(d)


class OverlayBackend(unittest.TestCase):
    def test_an_agent_on_an_overlay_is_reviewed_then_committed(self):
        if os.environ.get("STOCKADE_TEST_FALLBACK") == "1":
            self.skipTest("an overlay is refused where user namespaces are")
        host = tempfile.mkdtemp(prefix="stockade-da-overlay-")
        self.addCleanup(shutil.rmtree, host, True)
        with open(os.path.join(host, "a.txt"), "w") as f:
            f.write("one\n")
        if os.geteuid() == 0:
            for n in (host, os.path.join(host, "a.txt")):
                os.chown(n, 65534, 65534)
        with sandbox(overlay=[(host, "/work/p")]) as box:
            r = box.execute("echo two > /work/p/a.txt")
            self.assertEqual(r.exit_code, 0, r.output)
            box.checkpoint("two")
            self.assertEqual(box.execute("rm /work/p/a.txt").exit_code, 0)
            self.assertEqual([c["kind"] for c in box.changes()], ["deleted"])
            box.rollback("two")
            self.assertEqual([(c["path"], c["kind"]) for c in box.changes()], [("/work/p/a.txt", "modified")])
            with open(os.path.join(host, "a.txt")) as f:
                self.assertEqual(f.read(), "one\n")
            self.assertEqual(box.commit()["applied"], ["/work/p/a.txt"])
            self.assertEqual(box.execute("cat /work/p/a.txt").output.strip(), "two")
        with open(os.path.join(host, "a.txt")) as f:
            self.assertEqual(f.read(), "two\n")


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

    def test_the_exit_code_is_said_once(self):
        """The execute tool says a command's exit code itself: the
        backend's output does not say it again."""
        with sandbox() as box:
            silent, loud = [m.content for m in run_agent(box, [
                ("execute", {"command": "exit 3"}),
                ("execute", {"command": "echo out; echo err >&2; exit 4"}),
            ])]
        self.assertEqual(silent, "\n[Command failed with exit code 3]")
        self.assertEqual(loud, "out\n[stderr] err\n\n[Command failed with exit code 4]")

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
        self.assertIn("[Command failed with exit code 2]", fail)
        self.assertIn("timed out", slow)
        self.assertRegex(reads, "No such file|Permission denied")
        for text in (reads, env, net):
            self.assertNotIn(CANARY, text)
        self.assertNotIn("STOCKADE_DEEP_CANARY", env)
        self.assertNotIn("CONNECTED", net)
        self.assertIn("[Command failed with exit code", net)

class AllNineTools(unittest.TestCase):
    def test_pinned_version(self):
        from importlib.metadata import version

        self.assertEqual(version("deepagents"), DEEPAGENTS_VERSION)

    def test_every_default_tool_through_an_agent(self):
        """A scripted model calls each of the agent's nine tools (task:
        a subagent whose own execute runs in the same jail), empty
        results included; each answer is what the tool says on success,
        the exit code said once."""
        with sandbox() as box:
            w = box.session.workdir
            app = w + "/src/app.py"
            calls = [
                ("write_file", {"file_path": app, "content": "print('hello')\n"}),
                ("ls", {"path": w + "/src"}),
                ("read_file", {"file_path": app}),
                ("edit_file", {"file_path": app, "old_string": "hello", "new_string": "bye"}),
                ("glob", {"pattern": "**/*.py", "path": w}),
                ("glob", {"pattern": "*.nothing", "path": w}),
                ("grep", {"pattern": "bye", "path": w}),
                ("grep", {"pattern": "no-such-text", "path": w}),
                ("execute", {"command": "python3 src/app.py"}),
                ("execute", {"command": "mkdir empty"}),
                ("ls", {"path": w + "/empty"}),
                ("execute", {"command": "ls /nonexistent"}),
                ("delete", {"file_path": app}),
                ("task", {"description": "write sub.txt", "subagent_type": "general-purpose"}),
            ]
            script = []
            for i, (name, args) in enumerate(calls):
                script.append(AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call%d" % i}]))
                if name == "task":
                    # the subagent's turns, then its answer
                    script.append(AIMessage(content="", tool_calls=[
                        {"name": "execute", "args": {"command": "echo from-sub > sub.txt"}, "id": "sub0"}]))
                    script.append(AIMessage(content="sub done"))
            model = ToolCallingFakeModel(messages=iter(script + [AIMessage(content="done")]))
            agent = create_deep_agent(model=model, backend=box)
            result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
            msgs = [m for m in result["messages"] if isinstance(m, ToolMessage)]
            self.assertEqual([m.name for m in msgs], [c[0] for c in calls], result["messages"])
            self.assertEqual(sorted({n for names in model.bound for n in names}), NINE_TOOLS)
            self.assertEqual(box.execute("cat sub.txt; ls src").output, "from-sub\n")
        text = [m.content if isinstance(m.content, str) else str(m.content) for m in msgs]
        for m, t in zip(msgs, text):
            self.assertNotEqual(m.status, "error", t)
            self.assertNotIn("<no output>", t)
            self.assertNotRegex(t, "(?i)glob helper|unexpected output|Path '")
        write, ls, read, edit, glob, glob0, grep, grep0, run, mkdir, ls0, fail, delete, task = text
        self.assertIn("app.py", ls)
        self.assertIn("hello", read)
        self.assertIn(app, glob)
        self.assertEqual(glob0, "No files found")
        self.assertIn(app, grep)
        self.assertEqual(grep0, "No matches found")
        self.assertEqual(run, "bye\n\n[Command succeeded with exit code 0]")
        self.assertEqual(mkdir, "\n[Command succeeded with exit code 0]")
        self.assertEqual(ls0, "No files found")
        self.assertEqual(fail.lower().count("exit code"), 1, fail)
        self.assertIn("[Command failed with exit code 2]", fail)
        self.assertIn("sub done", task)



if __name__ == "__main__":
    unittest.main()
