"""Shared pytest fixtures: real daemons from the private krb5 prefix.

Every daemon's log is printed when a test fails (MP-SPDZ's habit), and a
daemon that died during a test fails it.
"""
import os
import sys

import pytest

# integration-tests/ on the path: the harness package (kmpc_harness), the
# benchmarks (bench) and the tests' reference modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kmpc_harness.kmpc_realm import KmpcRealm  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: a test whose figures need the machine to itself (a storm, "
        "latencies, a window): make test runs these files one by one after the others, "
        "which run in parallel (-m 'not serial' -n N)")


@pytest.fixture(scope="session", autouse=True)
def _cert_pool(tmp_path_factory):
    """The clusters' certificates generated ahead in the background
    (cluster.CertPool): each cluster's own, as before, without the wait."""
    kmpc_cluster.use_cert_pool(str(tmp_path_factory.mktemp("cert-pool")))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def pytest_ignore_collect(collection_path, config):
    """test_upgrades.py needs the 1.20.1-based packages (make
    test-upgrades builds them and sets KMPC_UPG_OLD_DEBS): left out of a
    run of the whole directory (make test) unless they are given; named on
    the command line, it runs, and fails without them."""
    if collection_path.name != "test_upgrades.py" or os.environ.get("KMPC_UPG_OLD_DEBS"):
        return None
    named = {os.path.realpath(a.split("::")[0]) for a in config.args}
    return True if str(collection_path) not in named else None


def pytest_collection_finish(session):
    """A test module with a start_in_background() (test_packages.py: its
    package builds) starts it once the session's tests are known, so that
    its slow preparation overlaps the other tests (on the CPU time they
    leave idle)."""
    if session.config.option.collectonly:
        return
    # Under pytest-xdist (make test) every worker collects every test, and
    # which worker runs a module is decided later: the module's own fixture
    # starts its preparation there instead (once, in that worker).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for mod in {getattr(item, "module", None) for item in session.items} - {None}:
        start = getattr(mod, "start_in_background", None)
        if start is not None:
            start()


def pytest_sessionfinish(session):
    for mod in {getattr(item, "module", None) for item in getattr(session, "items", [])} - {None}:
        stop = getattr(mod, "stop_background", None)
        if stop is not None:
            stop()


def _dump_on_failure(request, realm):
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        sys.stderr.write(f"\n===== daemon logs for {request.node.name} =====\n")
        sys.stderr.write(realm.logs() + "\n")


def _realms(tmp_path, request, cls, prefix):
    """make(**kw) creates cls(tmp_path/<prefix><n>, **kw) and returns it;
    after the test every realm made is stopped, its logs dumped if the test
    failed, and a daemon of it that died during the test (Realm.dead_daemons:
    krb5kdc, slapd, an MPC server) fails it.  A realm is
    recorded before create() so that what a failed create() started is
    stopped too."""
    made = []

    def make(**kw):
        r = cls(str(tmp_path / f"{prefix}{len(made)}"), **kw)
        made.append(r)
        r.create()
        return r

    yield make
    for r in made:
        # krb5kdc, slapd (a realm on LDAP), the MPC servers (a KmpcRealm).
        dead = r.dead_daemons()
        _dump_on_failure(request, r)
        r.stop()
        if dead:
            pytest.fail(f"{', '.join(dead)} died during the test:\n" + r.logs())


@pytest.fixture
def realm_factory(tmp_path, request):
    """Create realms (kmpc_realm.Realm) on demand: make(**Realm kwargs)
    returns a created realm, KDC not started yet."""
    yield from _realms(tmp_path, request, kmpc_realm.Realm, "realm")


@pytest.fixture
def kmpc_factory(tmp_path, request):
    """Whole kmpc realms (kmpc_harness.kmpc_realm: three MPC servers, the KDB
    with key handles, the KDC with a kdcmpc module), created on demand:
    make(**KmpcRealm kwargs) returns a created realm (servers running, KDC
    not started yet). Stopped by PID afterwards; every daemon log is dumped
    on failure, and a daemon that died fails the test."""
    yield from _realms(tmp_path, request, KmpcRealm, "kmpc")
