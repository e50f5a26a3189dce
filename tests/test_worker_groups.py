"""The tests on two workers (`.ci/run`: `pytest -n 2 --dist loadgroup`): what the machine has
only once stays in one worker (tests/conftest.py, `worker_group`).

A small suite is run with pytest-xdist under this suite's own hook; xdist names each test's
group after its id (`ID@GROUP`) and reports the worker that ran it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

CONFTEST = f'''
import importlib.util
import sys

import pytest

sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
sys.modules["suite_conftest"] = suite
spec.loader.exec_module(suite)
pytest_configure = suite.pytest_configure
pytest_collection_modifyitems = suite.pytest_collection_modifyitems


@pytest.fixture
def testbed():
    return None


@pytest.fixture
def local_prefix():
    return None


@pytest.fixture
def cmake4():
    return None


@pytest.fixture
def prefix(testbed):
    return None
'''

SUITE = '''
import pytest

pytestmark = []


@pytest.mark.testbed
@pytest.mark.parametrize("n", range(4))
def test_on_the_cluster(n):
    pass


@pytest.mark.parametrize("n", range(4))
def test_with_the_testbeds_prefix(prefix, n):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("n", range(3))
def test_a_real_install(n):
    pass


@pytest.mark.ranks
def test_real_ranks_here():
    pass


def test_with_a_provisioned_prefix(local_prefix):
    pass


def test_with_cmake4(cmake4):
    pass


@pytest.mark.slow
@pytest.mark.last
def test_waits_on_a_build():
    pass


@pytest.mark.parametrize("n", range(12))
def test_a_unit(n):
    pass
'''


def test_what_the_machine_has_once_runs_in_one_worker_and_units_anywhere(
        tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                           "-v", "-p", "no:cacheprovider", "-p", "no:randomly", "-o",
                           "addopts=", "test_suite.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # "[gw1] [ 12%] PASSED test_suite.py::test_a_unit[3]" (a group: "...[3]@host")
    ran = {m[2]: (m[1], m[3]) for m in re.finditer(
        r"^\[(gw\d)\][^\n]*?PASSED (test_suite\.py::\S+?)(?:@(\w+))?\s*$", proc.stdout,
        re.MULTILINE)}
    ran = {nodeid.split("::")[1]: v for nodeid, v in ran.items()}
    assert len(ran) == 27, proc.stdout

    def group_of(prefix: str) -> set[tuple[str, str | None]]:
        return {v for name, v in ran.items() if name.startswith(prefix)}

    cluster = group_of("test_on_the_cluster") | group_of("test_with_the_testbeds_prefix")
    host = (group_of("test_a_real_install") | group_of("test_real_ranks_here")
            | group_of("test_with_a_provisioned_prefix") | group_of("test_with_cmake4")
            | group_of("test_waits_on_a_build"))
    # each group in one worker, named as its group
    assert len(cluster) == 1 and next(iter(cluster))[1] == "testbed", cluster
    assert len(host) == 1 and next(iter(host))[1] == "host", host
    # the unit tests are in no group (each its own unit, for whichever worker is free)
    assert {v[1] for name, v in ran.items() if name.startswith("test_a_unit")} == {None}
    # the test that waits on a build is the host group's last
    host_order = [m[1] for m in re.finditer(r"PASSED test_suite\.py::(\S+?)@host\s*$",
                                            proc.stdout, re.MULTILINE)]
    assert host_order[-1] == "test_waits_on_a_build", host_order
