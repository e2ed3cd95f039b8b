"""Run test modules with unittest and write one JSON line per test to a
file: {"test", "result": pass|fail|error|skipped, "detail"}. Used by
tests/python_integrations.rs, which turns skips into SKIPPED lines (a skip
never counts as a pass).

    python run_suite.py RESULTS.jsonl test_local test_evaluator …
"""

import json
import sys
import unittest


class Recorder(unittest.TextTestResult):
    def __init__(self, out, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out = out

    def record(self, test, result, detail=""):
        self.out.write(json.dumps({"test": test.id(), "result": result, "detail": detail}) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self.record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.record(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self.record(test, "error", self._exc_info_to_string(err, test))

    def addSubTest(self, test, subtest, err):
        # A failed subTest is one result of its own (the test itself then
        # reports no success).
        super().addSubTest(test, subtest, err)
        if err is not None:
            result = "fail" if issubclass(err[0], test.failureException) else "error"
            self.record(subtest, result, self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.record(test, "fail", "expected failures are not allowed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.record(test, "fail", "unexpected success")


def main():
    path, modules = sys.argv[1], sys.argv[2:]
    suite = unittest.defaultTestLoader.loadTestsFromNames(modules)
    with open(path, "w") as out:
        runner = unittest.TextTestRunner(verbosity=2, resultclass=lambda *a, **k: Recorder(out, *a, **k))
        result = runner.run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
