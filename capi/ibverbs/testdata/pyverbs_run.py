"""Runs rdma-core's Python test suite (a copy of Debian's
/usr/share/doc/rdma-core/tests, unpacked in SUITE_DIR) as its run_tests.py
does, and writes each test's result to OUT as JSON:
{"tests.test_mr.MWTest.test_mw_type1": ["pass", ""], ...}, the first word
pass, fail, error or skip, the second the reason (a skip's) or the last
line of the traceback. Usage: pyverbs_run.py SUITE_DIR OUT [run_tests.py
arguments: --dev NAME --gid N ...]. TestPyverbs (pyverbs_test.go) runs it."""
import json
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader

suite_dir, out = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0]] + sys.argv[3:]
sys.path.insert(0, suite_dir)
from args_parser import parser  # noqa: E402  (the suite's own)

tests = SourceFileLoader('tests', os.path.join(suite_dir, '__init__.py')).load_module()
parser.parse_args()
results = {}


def last_line(result, err, test):
    lines = result._exc_info_to_string(err, test).strip().splitlines()
    return lines[-1] if lines else ''


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        results[test.id()] = ['pass', '']

    def addFailure(self, test, err):
        super().addFailure(test, err)
        results[test.id()] = ['fail', last_line(self, err, test)]

    def addError(self, test, err):
        super().addError(test, err)
        results[test.id()] = ['error', last_line(self, err, test)]

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        results[test.id()] = ['skip', reason]

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        results[test.id()] = ['fail', 'expected failure']

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        results[test.id()] = ['pass', 'unexpected success']


suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
unittest.TextTestRunner(resultclass=Result, verbosity=2).run(suite)
with open(out, 'w') as f:
    json.dump(results, f, indent=1, sort_keys=True)
