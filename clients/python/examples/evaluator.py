"""An evaluator service on stockade: score a model's answer with
user-supplied Python, each scoring in its own fresh jail.

    python3 evaluator.py --stockade unix:/run/stockade/stockade.sock --listen 127.0.0.1:8080
    curl -d '{"answer": "Paris", "reference": "paris",
              "scorer": "def score(a, r):\\n    return float(a.lower() == r.lower())"}' \\
         http://127.0.0.1:8080/score
    {"status": "scored", "score": 1.0}

The scorer is untrusted: it runs under the `python` profile (no network,
the interpreter read-only, writes only to its workdir and /tmp) with a
timeout and a memory limit; whatever it does, the service answers.
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import stockade
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), ".."))
    import stockade

# Runs in the jail: imports the user's scorer, reads the input, prints the
# score as the last line of JSON.
HARNESS = """\
import json, sys
sys.path.insert(0, ".")
from scorer import score
data = json.load(open("input.json"))
print(json.dumps({"score": float(score(data["answer"], data["reference"]))}))
"""


def evaluate(client, answer, reference, scorer, timeout="5s", memory="256m"):
    """Score `answer` against `reference` with `scorer` (Python source
    defining `score(answer, reference) -> float`). Returns a dict:
    {"status": "scored", "score": x} or {"status": why, "error": text}."""
    out = client.run(
        ["python3", "harness.py"],
        profile="python",
        files={
            "harness.py": HARNESS,
            "scorer.py": scorer,
            "input.json": json.dumps({"answer": answer, "reference": reference}),
        },
        limits={"timeout": timeout, "memory": memory},
    )
    if out.ok:
        try:
            last = out.stdout_text.strip().splitlines()[-1]
            return {"status": "scored", "score": float(json.loads(last)["score"])}
        except (IndexError, ValueError, KeyError, TypeError) as e:
            return {"status": "bad_output", "error": "scorer output: %s" % e}
    why = out.status if out.status != "exited" else "scorer_failed"
    return {"status": why, "error": (out.error or out.stderr_text)[-2000:]}


def make_handler(client):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            if self.path != "/score":
                return self._answer(404, {"error": "no such path"})
            try:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n))
                result = evaluate(client, req["answer"], req["reference"], req["scorer"])
            except (ValueError, KeyError, TypeError) as e:
                return self._answer(400, {"error": "bad request: %s" % e})
            except stockade.QueueFull as e:
                return self._answer(429, {"error": e.message})
            except stockade.StockadeError as e:
                return self._answer(502, {"error": "%s: %s" % (e.code, e.message)})
            self._answer(200, result)

        def _answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stockade", default="unix:/run/stockade/stockade.sock")
    ap.add_argument("--token-file")
    ap.add_argument("--listen", default="127.0.0.1:8080")
    a = ap.parse_args()
    token = open(a.token_file).read().strip() if a.token_file else None
    client = stockade.Client(a.stockade, token=token)
    host, port = a.listen.rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), make_handler(client)).serve_forever()


if __name__ == "__main__":
    main()
