"""The program a rollout runs inside the sandbox: a repository's tests, one forked process per test.

Run by ``rl/sandbox.py`` as ``python -I -B harness.py`` with the repository's own interpreter,
never imported by the project: it uses the standard library only (and the repository's pytest
when its runner is pytest). It reads its spec as JSON on stdin and writes one JSON line per test
to the descriptor that was its stdout when it started; the tests' own output goes to stderr.

Two modes:

- ``trace``: collect the tests of some test modules, run (at most ``max_tests`` of) each, and
  report, per test, its verdict and the repository functions it called (a profile hook records
  ``(file, first line, qualname)`` of each Python call);
- ``score``: run the given test ids and report each one's verdict.

A verdict is ``passed`` only when the harness itself saw the test pass in a child process forked
for that test alone, the child then reported it, with the run's nonce, and exited normally; a
test that fails, errors, is skipped, times out, kills its process or cannot be found is not
passed. Because each test has its own process, nothing one test (or the completion it called)
changes in memory reaches another test's verdict. In ``score`` mode the harness also refuses what
would let the code under test rewrite the runner from inside (docs/rl.md, "What a completion
cannot do"): setting a trace or profile function and listing the interpreter's objects are
refused by an audit hook, and after each test the runner's modules and classes (pytest, pluggy,
unittest, this harness) must hold the very objects they held before collection, or the test
fails. The parent harness is made non-dumpable, so a test's process cannot read its memory or
descriptors through /proc.
"""

import contextlib
import hashlib
import json
import os
import select
import signal
import sys
import time
import traceback
import unittest

RUNNER_MODULES = ("pytest", "_pytest", "pluggy", "unittest", "__main__")
DENIED_EVENTS = {
    "sys.settrace",
    "sys.setprofile",
    "sys._current_frames",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
}
_REPORT_BYTES = 2048  # of a failing test's report, printed to stderr


def main():
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    # Results go to the descriptor that was stdout; what the tests print goes to stderr.
    results = os.dup(1)
    os.dup2(2, 1)
    _non_dumpable()
    harness = Harness(spec, results)
    if spec["mode"] == "score":
        sys.addaudithook(_deny)
    try:
        if spec["runner"] == "pytest":
            harness.run_pytest()
        else:
            harness.run_unittest()
    except BaseException:  # a broken repository or completion: reported, never a verdict
        traceback.print_exc()
        harness.emit({"error": traceback.format_exc(limit=3)[-_REPORT_BYTES:]})
    harness.emit({"done": True})
    os._exit(0)


def _deny(event, args):
    if event in DENIED_EVENTS:
        raise RuntimeError(f"sandbox harness: {event} is not allowed while scoring")


def _non_dumpable():
    """PR_SET_DUMPABLE 0: processes of the same uid (a test's) may not ptrace this one or open
    its /proc files (memory, descriptors)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Harness:
    def __init__(self, spec, results_fd):
        self.spec = spec
        self.results_fd = results_fd
        self.nonce = spec["nonce"]
        self.trace = spec["mode"] == "trace"
        self.timeout = float(spec["test_timeout"])
        self.repo_root = spec["repo_root"].rstrip("/") + "/"
        self.protected = {}
        sys.path.insert(0, spec["import_root"])

    def emit(self, record):
        record["nonce"] = self.nonce
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(self.results_fd, data) :]

    def protect_runner(self):
        """Called once the runner is ready, before any test module is imported: what the runner
        is made of is protected from then on."""
        self.protected = _runner_objects()

    def name_runtime_files(self):
        """Tracing: the files of every module the harness and the runner have imported, so that no
        task is made from a function they run themselves."""
        if self.trace:
            files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
            self.emit({"runtime_files": sorted(f for f in files if isinstance(f, str))})

    def protect_tests(self):
        """Called once the tests are collected, before any runs: their modules are protected too."""
        self.protected.update(_runner_objects(_is_test_module))

    # --- pytest -------------------------------------------------------------------------

    def run_pytest(self):
        import pytest

        harness = self

        class Plugin:
            @pytest.hookimpl(tryfirst=True)
            def pytest_load_initial_conftests(self, early_config, parser, args):
                harness.name_runtime_files()  # before the repository's conftests import it

            @pytest.hookimpl(tryfirst=True)
            def pytest_sessionstart(self, session):
                harness.protect_runner()  # once configured: pytest sets some of its attributes then

            def pytest_collection_modifyitems(self, session, config, items):
                items[:] = harness.select(items, lambda item: item.nodeid)

            @pytest.hookimpl(tryfirst=True)
            def pytest_runtestloop(self, session):
                harness.protect_tests()
                for item in session.items:
                    harness.run_forked(item.nodeid, lambda item=item: harness.pytest_one(item))
                return True

            def pytest_runtest_logreport(self, report):
                harness.phases.append(report.outcome)
                if report.failed:
                    sys.stderr.write(f"--- {report.nodeid} ({report.when})\n{report.longreprtext[-_REPORT_BYTES:]}\n")

            @pytest.hookimpl(tryfirst=True)
            def pytest_pyfunc_call(self, pyfuncitem):
                # The test function called here, with nothing of the runner's between it and this
                # frame: its outcome is seen as it is, whatever the code under test did to reporting.
                function = pyfuncitem.obj
                kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
                result = function(**kwargs)
                if hasattr(result, "__await__") or hasattr(result, "__next__"):
                    raise TypeError("coroutine or generator tests are not supported by the harness")
                harness.raw_call_passed = True
                return True

        ini = self.spec["ini"]
        if self.trace:
            targets = [os.path.join(self.spec["import_root"], m) for m in self.spec["modules"]]
        else:  # files only: a test id that no longer exists is reported missing, not a usage error
            files = dict.fromkeys(t.split("::")[0] for t in self.spec["tests"])
            targets = [os.path.join(self.spec["import_root"], f) for f in files]
            targets = [t for t in targets if os.path.isfile(t)]
        if not targets:  # pytest would collect its working folder instead
            self.select([], lambda item: item)
            return
        args = [
            "-c", ini, "--rootdir", self.spec["import_root"], "--confcutdir", self.spec["repo_root"],
            "-p", "no:cacheprovider", "-p", "no:stepwise",
            "-s", "-q", "--no-header", "-o", "console_output_style=classic", "--basetemp", "/tmp/pytest",
            *targets,
        ]  # fmt: skip
        self.expected = None if self.trace else set(self.spec["tests"])
        code = pytest.main(args, plugins=[Plugin()])
        if code not in (0, 1, 5):  # 5: nothing collected; anything else: the session itself failed
            self.emit({"error": f"pytest exited with {int(code)}"})

    def pytest_one(self, item):
        self.phases, self.raw_call_passed = [], False
        item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
        from _pytest.python import Function

        # Items that are not test functions (unittest cases collected by pytest) have no raw call.
        raw_ok = self.raw_call_passed or not isinstance(item, Function)
        return self.phases == ["passed"] * 3 and raw_ok

    # --- unittest -----------------------------------------------------------------------

    def run_unittest(self):
        self.name_runtime_files()
        self.protect_runner()
        loader = unittest.TestLoader()
        if self.trace:
            cases = []
            for module in self.spec["modules"]:
                try:
                    cases += [c for c in _flatten(loader.loadTestsFromName(module)) if _reloads(loader, c)]
                except Exception:
                    traceback.print_exc()
            chosen = self.select(cases, lambda case: case.id())
            self.protect_tests()
            for case in chosen:
                self.run_forked(case.id(), lambda case=case: self.unittest_one(case))
            return
        found = {}
        for test_id in self.spec["tests"]:
            try:
                cases = list(_flatten(loader.loadTestsFromName(test_id)))
            except Exception:
                traceback.print_exc()
                cases = []
            found[test_id] = cases[0] if len(cases) == 1 and cases[0].id() == test_id else None
        self.protect_tests()
        for test_id, case in found.items():
            if case is None:
                self.emit({"test": test_id, "verdict": "missing"})
            else:
                self.run_forked(test_id, lambda case=case: self.unittest_one(case))

    def unittest_one(self, case):
        result = _Result()
        unittest.TestSuite([case]).run(result)
        for test, text in result.errors + result.failures:
            sys.stderr.write(f"--- {test}\n{text[-_REPORT_BYTES:]}\n")
        return result.succeeded == 1 and result.wasSuccessful() and not result.skipped and result.testsRun == 1

    # --- both ---------------------------------------------------------------------------

    def select(self, items, name_of):
        """Trace mode: at most ``max_tests`` per module, spread by a hash of their ids (stable
        whatever the collection order). Score mode: the given ids, in the given order."""
        if not self.trace:
            by_id = {name_of(item): item for item in items}
            for missing in [t for t in self.spec["tests"] if t not in by_id]:
                self.emit({"test": missing, "verdict": "missing"})
            return [by_id[t] for t in self.spec["tests"] if t in by_id]
        ordered = sorted(items, key=lambda item: hashlib.sha256(name_of(item).encode()).hexdigest())
        limit = int(self.spec["max_tests"])
        per_module, chosen = {}, []
        for item in ordered:
            module = name_of(item).split("::")[0] if "::" in name_of(item) else name_of(item).rsplit(".", 2)[0]
            if per_module.get(module, 0) < limit:
                per_module[module] = per_module.get(module, 0) + 1
                chosen.append(item)
        return sorted(chosen, key=name_of)

    def run_forked(self, test_id, run_one):
        """Run one test in a child process; emit its verdict (and, tracing, its calls)."""
        read_end, write_end = os.pipe()
        started = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            os.close(self.results_fd)  # only the parent reports; it is not dumpable, so this stays shut
            os.setpgid(0, 0)
            self._child(test_id, run_one, write_end)
        os.close(write_end)
        message, status = self._collect(pid, read_end)
        verdict = "failed"
        record = {"test": test_id}
        if status == "timeout":
            verdict = "timeout"
        elif message is not None and message.get("nonce") == self.nonce and status == 0:
            verdict = "passed" if message.get("passed") is True else "failed"
            if self.trace:
                record["calls"] = message.get("calls", [])
        elif message is None or status != 0:
            verdict = "crashed"
        record["verdict"] = verdict
        record["seconds"] = round(time.monotonic() - started, 3)
        self.emit(record)

    def _child(self, test_id, run_one, write_end):
        write, nonce, protected, dumps = os.write, self.nonce, self.protected, json.dumps
        calls = set()
        passed = False
        try:
            if self.trace:
                prefix = self.repo_root

                def profile(frame, event, arg):
                    if event == "call":
                        code = frame.f_code
                        if code.co_filename.startswith(prefix):
                            calls.add((code.co_filename, code.co_firstlineno, code.co_qualname))

                sys.setprofile(profile)
                import threading

                threading.setprofile(profile)
            passed = bool(run_one())
            if self.trace:
                sys.setprofile(None)
            elif sys.gettrace() is not None or sys.getprofile() is not None:
                passed = False
            changed = _changed(protected)
            if changed:
                sys.stderr.write(f"--- {test_id}: the runner was modified during the test: {changed}\n")
                passed = False
        except BaseException:
            sys.setprofile(None)
            traceback.print_exc()
            passed = False
        message = {"nonce": nonce, "passed": passed}
        if self.trace:
            message["calls"] = sorted(calls)
        data = (dumps(message) + "\n").encode()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            while data:
                data = data[write(write_end, data) :]
            os._exit(0)

    def _collect(self, pid, read_end):
        """The child's message and exit status (or "timeout"); the child's group is killed after."""
        deadline = time.monotonic() + self.timeout
        chunks, status = [], None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            ready, _, _ = select.select([read_end], [], [], left)
            if ready:
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        os.close(read_end)
        for target in (-pid, pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, signal.SIGKILL)
        _, raw_status = os.waitpid(pid, 0)
        if status is None:
            status = os.waitstatus_to_exitcode(raw_status)
        lines = b"".join(chunks).splitlines()
        if len(lines) != 1:  # a test that wrote its own line too is not believed
            return None, status
        try:
            return json.loads(lines[0]), status
        except ValueError:
            return None, status


class _Result(unittest.TestResult):
    """Counts successes itself (its methods are the harness's, protected as the runner's)."""

    succeeded = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.succeeded += 1


def _flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _flatten(test)
        else:
            yield test


def _reloads(loader, case):
    """Whether ``case`` can be found again by its id (scoring names tests by id only)."""
    try:
        found = list(_flatten(loader.loadTestsFromName(case.id())))
    except Exception:
        return False
    return len(found) == 1 and found[0].id() == case.id()


def _runner_objects(is_protected=lambda name, module: name.split(".")[0] in RUNNER_MODULES):
    """Every function and class the protected modules hold, and every attribute of their classes."""
    objects = {}
    for name, module in list(sys.modules.items()):
        if module is None or not is_protected(name, module):
            continue
        for attribute, value in list(vars(module).items()):
            if callable(value):
                objects[(name, attribute)] = value
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for member, inner in list(vars(value).items()):
                    objects[(name, attribute, member)] = inner
    return objects


def _is_test_module(name, module):
    """Test files, conftests and testing helpers (``numpy.testing``, ``pandas._testing``): what a test
    checks its result with, which the code under test must not rewrite either."""
    filename = getattr(module, "__file__", None) or ""
    parts = filename.split("/")
    base = parts[-1]
    return (
        base.startswith("test_")
        or base == "conftest.py"
        or bool({"test", "tests"}.intersection(parts[:-1]))
        or any("testing" in part for part in name.split("."))
    )


def _changed(protected):
    changed = []
    for key, value in protected.items():
        holder = sys.modules.get(key[0])
        current = getattr(holder, key[1], _changed) if holder is not None else _changed
        if len(key) == 3:
            current = vars(current).get(key[2], _changed) if isinstance(current, type) else _changed
        if current is not value:
            changed.append(".".join(key))
    return changed[:5]


if __name__ == "__main__":
    main()
