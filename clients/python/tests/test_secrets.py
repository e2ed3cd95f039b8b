"""Secrets the jail never holds, from Python: `stockade.run(secrets=…)`,
`stockade.Session(secrets=…)`, the LangChain policy and the Deep Agents
backend, against a TLS server of the test's own on 127.0.0.2 whose
certificate comes from a test authority (made with the openssl CLI; given
to stockade with `--egress-ca`). The jail sees a placeholder; the host
gets the value; the value is in no outcome or output. Where user
namespaces are refused (the fallback) a secret is refused: these tests
expect that refusal."""

import base64
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import unittest

import stockade
from stockade import InvalidOption, InvalidOptionType

FALLBACK = os.environ.get("STOCKADE_TEST_FALLBACK") == "1"
BIN = os.environ.get("STOCKADE_BIN")

# What the jail runs: its variable, then a request to the bound host with
# the placeholder in two headers (the proxy and the trust file come from
# the jail's environment).
PROBE = """
import os, sys, urllib.request
key = os.environ[sys.argv[1]]
print("placeholder", key)
req = urllib.request.Request(sys.argv[2], headers={"Authorization": "Bearer " + key, "x-api-key": key})
with urllib.request.urlopen(req, timeout=60) as r:
    print("bound", r.status, r.read().decode().strip())
"""


def probe_command(name, url):
    """A shell command running PROBE (no quoting to get wrong)."""
    code = base64.b64encode(PROBE.encode()).decode()
    return "echo %s | base64 -d > /tmp/probe.py && python3 /tmp/probe.py %s %s" % (code, name, url)


def make_pki(d):
    """A test authority and a certificate for 127.0.0.2 signed by it:
    (ca.pem, host.pem, host.key) under `d`."""
    def openssl(*args):
        subprocess.run(("openssl",) + args, cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=stockade test authority",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "host.key", "-out", "host.csr", "-subj", "/CN=127.0.0.2")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.2\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "2",
            "-out", "host.pem", "-days", "2", "-extfile", "ext.cnf")
    for name in ("ca.pem", "host.pem"):
        os.chmod(os.path.join(d, name), 0o644)
    return [os.path.join(d, n) for n in ("ca.pem", "host.pem", "host.key")]


class TLSHost:
    """A TLS server on 127.0.0.2 that answers `200 ok` and keeps each
    request head it was sent."""

    def __init__(self, cert, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.heads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as s:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = s.recv(4096)
                    if not chunk:
                        return
                    head += chunk
                self.heads.append(head.decode("latin-1"))
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
        except (OSError, ssl.SSLError):
            pass

    def saw(self, path, value):
        """Whether a request for `path` carried `value` in both headers."""
        return any(
            h.startswith("GET %s " % path)
            and ("Authorization: Bearer %s\r\n" % value) in h
            and ("x-api-key: %s\r\n" % value) in h.lower()
            for h in self.heads
        )

    def close(self):
        self.sock.close()


def setUpModule():
    global DIR, CA, HOST
    if not BIN:
        raise unittest.SkipTest("STOCKADE_BIN is not set: no local stockade binary to test")
    if not shutil.which("openssl"):
        raise unittest.SkipTest("no openssl CLI to make the test authority with")
    DIR = tempfile.mkdtemp(prefix="stockade-secrets-")
    os.chmod(DIR, 0o755)
    CA, cert, key = make_pki(DIR)
    HOST = TLSHost(cert, key)


def tearDownModule():
    HOST.close()
    shutil.rmtree(DIR, ignore_errors=True)


def new_value():
    return "sk-test-" + os.urandom(24).hex()


class Local(unittest.TestCase):
    def setUp(self):
        self.value = new_value()
        os.environ["API_KEY"] = self.value
        self.host = "127.0.0.2:%d" % HOST.port
        self.url = "https://%s" % self.host

    def tearDown(self):
        os.environ.pop("API_KEY", None)

    def assertNowhere(self, *texts):
        for t in texts:
            self.assertNotIn(self.value, t)

    def test_run_binds_a_secret_from_the_environment(self):
        kw = dict(
            argv=["sh", "-c", probe_command("API_KEY", self.url + "/run")],
            profile="python",
            allow_hosts=[self.host],
            secrets={"API_KEY": self.host},
            flags=["--egress-ca", CA],
        )
        if FALLBACK:
            with self.assertRaises(stockade.SetupError) as e:
                stockade.run(**kw)
            self.assertNowhere(str(e.exception))
            return
        out = stockade.run(**kw)
        self.assertEqual((out.status, out.exit_code), ("exited", 0), out.raw)
        self.assertNowhere(json.dumps(out.raw), out.stdout_text, out.stderr_text)
        self.assertIn("bound 200 ok", out.stdout_text)
        placeholder = out.stdout_text.split("placeholder ", 1)[1].split()[0]
        self.assertTrue(placeholder.startswith("sk-test-") and len(placeholder) == len(self.value), placeholder)
        self.assertTrue(HOST.saw("/run", self.value), HOST.heads)

    def test_session_binds_a_secret_from_a_file(self):
        path = os.path.join(DIR, "token-%d" % os.getpid())
        with open(path, "w") as f:
            f.write(self.value + "\n")
        os.environ.pop("API_KEY")
        kw = dict(
            profile="python",
            allow_hosts=[self.host],
            secrets={"TOKEN": [self.host]},
            secret_files={"TOKEN": path},
            flags=["--egress-ca", CA],
        )
        if FALLBACK:
            with self.assertRaises(stockade.SetupError) as e:
                stockade.Session(**kw)
            self.assertNowhere(str(e.exception))
            return
        with stockade.Session(**kw) as s:
            placeholder = s.exec('echo "$TOKEN"').stdout_text.strip()
            self.assertTrue(placeholder.startswith("sk-test-"), placeholder)
            r = s.exec(probe_command("TOKEN", self.url + "/session"))
            self.assertTrue(r.ok, r.raw)
            env = s.exec("tr '\\0' '\\n' < /proc/self/environ")
            self.assertNowhere(r.stdout_text, r.stderr_text, env.stdout_text, json.dumps(r.raw))
            self.assertIn("TOKEN=%s" % placeholder, env.stdout_text)
        self.assertNowhere(json.dumps(s.outcome.raw if s.outcome else {}))
        self.assertTrue(HOST.saw("/session", self.value), HOST.heads)

    def test_langchain_policy_binds_a_secret(self):
        if importlib.util.find_spec("langchain") is None:
            self.skipTest("langchain is not installed (the `langchain` extra)")
        from stockade.langchain import StockadeExecutionPolicy

        policy = StockadeExecutionPolicy(
            binary=BIN, allow_hosts=[self.host], secrets={"API_KEY": self.host}, extra_flags=["--egress-ca", CA]
        )
        ws = tempfile.mkdtemp(prefix="stockade-secrets-ws-")
        try:
            argv = policy.build_command(ws, {}, ["/bin/sh"])
            self.assertIn("--secret=API_KEY:%s" % self.host, argv)
            self.assertNowhere(*argv)
            proc = policy.spawn(workspace=ws, env={}, command=["/bin/sh"])
            out, err = proc.communicate(probe_command("API_KEY", self.url + "/langchain") + "\n", timeout=300)
        finally:
            shutil.rmtree(ws, ignore_errors=True)
        self.assertNowhere(out, err)
        if FALLBACK:
            self.assertNotEqual(proc.returncode, 0, out)
            return
        self.assertEqual(proc.returncode, 0, err)
        self.assertIn("bound 200 ok", out)
        self.assertTrue(HOST.saw("/langchain", self.value), HOST.heads)

    def test_deepagents_sandbox_binds_a_secret(self):
        if importlib.util.find_spec("deepagents") is None:
            self.skipTest("deepagents is not installed (the `deepagents` extra)")
        from stockade.deepagents import StockadeSandbox

        kw = dict(
            binary=BIN, allow_hosts=[self.host], secrets={"API_KEY": self.host}, flags=["--egress-ca", CA]
        )
        if FALLBACK:
            with self.assertRaises(stockade.SetupError) as e:
                StockadeSandbox(**kw)
            self.assertNowhere(str(e.exception))
            return
        with StockadeSandbox(**kw) as sandbox:
            r = sandbox.execute(probe_command("API_KEY", self.url + "/deepagents"))
        self.assertEqual(r.exit_code, 0, r.output)
        self.assertIn("bound 200 ok", r.output)
        self.assertNowhere(r.output)
        self.assertTrue(HOST.saw("/deepagents", self.value), HOST.heads)


class Options(unittest.TestCase):
    """Bad secrets are refused before anything starts, naming the keyword."""

    def setUp(self):
        os.environ["API_KEY"] = "sk-test-options-0123456789abcdef"

    def tearDown(self):
        os.environ.pop("API_KEY", None)

    def field_of(self, **kw):
        with self.assertRaises((InvalidOption, InvalidOptionType)) as e:
            stockade.run(["true"], binary=BIN, **kw)
        self.assertNotIn(os.environ["API_KEY"], str(e.exception))
        return e.exception.field

    def test_each_refusal_names_the_keyword(self):
        h = "api.example.com"
        self.assertEqual(self.field_of(secrets={"API_KEY": h}), "secrets")
        self.assertEqual(self.field_of(secrets={"1X": h}, allow_hosts=[h]), "secrets")
        self.assertEqual(self.field_of(secrets={"API_KEY": []}, allow_hosts=[h]), "secrets.API_KEY")
        self.assertEqual(self.field_of(secrets={"API_KEY": "a,b"}, allow_hosts=[h]), "secrets.API_KEY")
        self.assertEqual(self.field_of(secrets=["API_KEY"], allow_hosts=[h]), "secrets")
        self.assertEqual(self.field_of(secrets={"NOT_SET_HERE": h}, allow_hosts=[h]), "secrets")
        self.assertEqual(
            self.field_of(secrets={"API_KEY": h}, allow_hosts=[h], env={"API_KEY": "x"}), "secrets"
        )
        self.assertEqual(
            self.field_of(secrets={"API_KEY": h}, secret_files={"OTHER": "/x"}, allow_hosts=[h]),
            "secret_files.OTHER",
        )
        self.assertEqual(self.field_of(allow_hosts="api.example.com"), "allow_hosts")
        self.assertEqual(self.field_of(allow_hosts=["a b"]), "allow_hosts[0]")
        with self.assertRaises(InvalidOption) as e:
            stockade.Session(binary=BIN, network="host", allow_hosts=[h])
        self.assertEqual(e.exception.field, "allow_hosts")

    def test_a_server_request_names_secrets_and_never_carries_a_value(self):
        c = stockade.Client("unix:/nonexistent/stockade.sock")
        for secrets, field in (
            ({"API_KEY": "value"}, "secrets"),
            ("API_KEY", "secrets"),
            (["API_KEY", None], "secrets[1]"),
            (["API-KEY"], "secrets[0]"),
            (["A", "A"], "secrets[1]"),
            (["K%d" % i for i in range(65)], "secrets"),
        ):
            with self.assertRaises((InvalidOption, InvalidOptionType)) as e:
                c.run(["true"], secrets=secrets)
            self.assertEqual(e.exception.field, field, secrets)
            with self.assertRaises((InvalidOption, InvalidOptionType)):
                c.session(secrets=secrets)


if __name__ == "__main__":
    unittest.main()
