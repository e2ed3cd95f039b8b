"""stockade.langchain.StockadeExecutionPolicy through LangChain's own
code path: an agent (create_agent) with ShellToolMiddleware, driven by a
fake chat model from langchain_core's testing utilities (no LLM) whose
tool calls run in a real jail. Skipped when langchain is not installed
(the `langchain` extra)."""

import os
import shutil
import socket
import tempfile
import unittest
from unittest import mock

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


def run_shell(commands, workspace_root=None, env=None, **policy):
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
        env={"GREETING": "hello"} if env is None else env,
        workspace_root=workspace_root,
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

    def test_a_workspace_root_langchain_makes_is_written_by_the_jail(self):
        # LangChain makes workspace_root itself (root-owned when the caller
        # is root, a sidecar's usual user): the jail must still write it.
        parent = tempfile.mkdtemp()
        try:
            os.chmod(parent, 0o755)
            ws = os.path.join(parent, "work")
            (made,) = run_shell(["echo data > made && cat made"], workspace_root=ws)
            self.assertEqual(made.status, "success", made.content)
            self.assertEqual(made.content.strip(), "data")
            with open(os.path.join(ws, "made")) as f:
                self.assertEqual(f.read(), "data\n")
        finally:
            shutil.rmtree(parent)

    def test_a_root_owned_workspace_with_files_is_never_given_away(self):
        from stockade.langchain import StockadeExecutionPolicy

        if os.geteuid() != 0:
            self.skipTest("only a root caller hands workspaces over (here the jail writes as the caller)")
        ws = tempfile.mkdtemp()
        try:
            with open(os.path.join(ws, "root-file"), "w") as f:
                f.write("x")
            before = os.stat(ws)
            with self.assertRaisesRegex(ValueError, "not empty"):
                StockadeExecutionPolicy(binary=BIN).build_command(ws, {}, ["sh"])
            after = os.stat(ws)
            self.assertEqual((after.st_uid, after.st_gid, after.st_mode), (before.st_uid, before.st_gid, before.st_mode))
        finally:
            shutil.rmtree(ws)

    def test_network_loopback_is_a_real_value(self):
        tcp = ("python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
               "socket.create_connection(s.getsockname()); print('TCP-OK')\"")
        (none,) = run_shell([tcp])
        self.assertNotIn("TCP-OK", none.content.splitlines(), "the default, none: TCP refused, even on loopback")
        if FALLBACK:
            self.skipTest("network loopback needs user namespaces (refused in the fallback)")
        (loop,) = run_shell([tcp], network="loopback")
        self.assertIn("TCP-OK", loop.content.splitlines(), loop.content)
        # The same through extra_flags: it replaces the policy's --network.
        (flag,) = run_shell([tcp], extra_flags=["--network", "loopback"])
        self.assertIn("TCP-OK", flag.content.splitlines(), flag.content)

    def test_network_flags_are_never_given_twice(self):
        from stockade.langchain import StockadeExecutionPolicy

        ws = os.path.realpath(tempfile.gettempdir())

        def argv(**kw):
            with mock.patch("stockade.langchain.owner_flags", return_value=[]):
                return StockadeExecutionPolicy(binary=BIN, **kw).build_command(ws, {}, ["sh"])

        def nets(a):
            return [x for x in a[: a.index("--")] if x.split("=")[0] == "--network"]

        self.assertEqual(nets(argv()), ["--network=none"])
        self.assertEqual(nets(argv(network="loopback")), ["--network=loopback"])
        self.assertEqual(nets(argv(network_enabled=True)), ["--network=host"])
        self.assertEqual(nets(argv(extra_flags=["--network", "host"])), ["--network"])
        self.assertEqual(nets(argv(network="host", extra_flags=["--network=loopback"])), ["--network=loopback"])
        mem = argv(memory_bytes=64 << 20, extra_flags=["--memory", "32m"])
        self.assertEqual([x for x in mem if x.startswith("--memory")], ["--memory"])
        for bad in ({"network": "Loopback"}, {"cpu_time_seconds": 0},
                    {"network": "none", "network_enabled": True}, {"network": "loopback", "network_enabled": True},
                    {"extra_flags": ["--workdir", "/srv"]}, {"extra_flags": ["--workdir=/srv"]},
                    {"cpu_time_seconds": True}, {"cpu_time_seconds": 1.5}, {"cpu_time_seconds": -1}):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                StockadeExecutionPolicy(binary=BIN, **bad)

    def test_an_overlay_shows_the_host_directory_copy_on_write(self):
        from stockade.langchain import StockadeExecutionPolicy

        if FALLBACK:
            self.skipTest("an overlay is refused where user namespaces are")

        host = tempfile.mkdtemp(prefix="stockade-lc-overlay-")
        self.addCleanup(shutil.rmtree, host, True)
        with open(os.path.join(host, "a.txt"), "w") as f:
            f.write("host\n")
        if os.geteuid() == 0:
            for n in (host, os.path.join(host, "a.txt")):
                os.chown(n, 65534, 65534)
        before, after = run_shell(
            ["cat /work/p/a.txt", "echo jail > /work/p/a.txt && cat /work/p/a.txt"],
            overlay=[(host, "/work/p")],
        )
        self.assertEqual(before.content.strip(), "host")
        self.assertEqual(after.content.strip(), "jail", after.content)
        with open(os.path.join(host, "a.txt")) as f:
            self.assertEqual(f.read(), "host\n", "the host directory is never written without commit")
        ws = os.path.realpath(tempfile.gettempdir())
        with mock.patch("stockade.langchain.owner_flags", return_value=[]):
            argv = StockadeExecutionPolicy(
                binary=BIN, overlay=[(host, "/work/p")], overlay_upper="/tmp/keep", commit="always"
            ).build_command(ws, {}, ["sh"])
        flags = argv[: argv.index("--")]
        for f in ("--overlay=%s:/work/p" % host, "--overlay-upper=/tmp/keep", "--commit=always"):
            self.assertIn(f, flags)
        for bad in ({"commit": "always"}, {"overlay_upper": "/tmp/k"}, {"overlay": [("/tmp", "rel")]},
                    {"overlay": [(host, "/w")], "commit": "yes"}):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                StockadeExecutionPolicy(binary=BIN, **bad)

    def test_cpu_time_seconds_reaches_the_jail(self):
        (limited,) = run_shell(["ulimit -t"], cpu_time_seconds=7)
        self.assertEqual(limited.content.strip(), "7")
        (free,) = run_shell(["ulimit -t"])
        self.assertEqual(free.content.strip(), "unlimited")

    def test_shell_starts_through_langchains_launch_subprocess(self):
        from langchain.agents.middleware import _execution

        calls = []
        real = _execution._launch_subprocess

        def recording(command, **kwargs):
            calls.append((list(command), kwargs))
            return real(command, **kwargs)

        with mock.patch.object(_execution, "_launch_subprocess", recording):
            (out,) = run_shell(["echo hi"])
        self.assertEqual(out.content.strip(), "hi")
        self.assertEqual(len(calls), 1, calls)
        argv, kwargs = calls[0]
        self.assertEqual(argv[:2], [BIN, "run"])
        self.assertEqual(argv[-1], "/bin/bash")
        self.assertTrue(kwargs["start_new_session"])

    def test_the_callers_path_stays_out(self):
        old = os.environ["PATH"]
        os.environ["PATH"] = "/opt/pyenv-canary/shims:" + old
        try:
            path, which = run_shell(["echo $PATH", "command -v python3"])
            (own,) = run_shell(["echo $PATH"], env={"PATH": "/bin:/usr/bin"})
        finally:
            os.environ["PATH"] = old
        self.assertEqual(path.content.strip(), "/usr/local/bin:/usr/bin:/bin")
        self.assertNotIn("canary", which.content)
        self.assertEqual(own.content.strip(), "/bin:/usr/bin", "the middleware's env sets PATH")

    def test_bad_policy_fields(self):
        from stockade.langchain import StockadeExecutionPolicy

        with self.assertRaises(ValueError):
            StockadeExecutionPolicy(memory_bytes=0)
        with self.assertRaises(ValueError):
            StockadeExecutionPolicy(max_output_lines=0)


if __name__ == "__main__":
    unittest.main()
