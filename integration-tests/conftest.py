"""Shared pytest fixtures: real daemons from the private krb5 prefix.

Every daemon's log is printed when a test fails (MP-SPDZ's habit), and a
daemon that died during a test fails it.
"""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kmpc_realm  # noqa: E402


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _dump_on_failure(request, realm):
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        sys.stderr.write(f"\n===== daemon logs for {request.node.name} =====\n")
        sys.stderr.write(realm.logs() + "\n")


@pytest.fixture
def realm_factory(tmp_path, request):
    """Create realms on demand; they are stopped (and logs dumped on failure)."""
    made = []

    def make(**kw):
        r = kmpc_realm.Realm(str(tmp_path / f"realm{len(made)}"), **kw).create()
        made.append(r)
        return r

    yield make
    for r in made:
        died = r.kdc_proc is not None and r.kdc_proc.poll() is not None
        _dump_on_failure(request, r)
        r.stop()
        if died:
            pytest.fail("krb5kdc died during the test:\n" + r.logs())


@pytest.fixture
def kmpc_factory(tmp_path, request):
    """Whole kmpc realms (deploy/kmpc_cluster.py: three MPC servers, the KDB
    with key handles, the KDC with a kdcmpc module), created on demand:
    make(**KmpcRealm kwargs) returns a created realm (servers running, KDC
    not started yet). Stopped by PID afterwards; every daemon log is dumped
    on failure, and a daemon that died fails the test."""
    import kmpc_cluster
    made = []

    def make(**kw):
        r = kmpc_cluster.KmpcRealm(str(tmp_path / f"kmpc{len(made)}"), **kw)
        made.append(r)
        r.create()
        return r

    yield make
    for r in made:
        died = r.kdc_proc is not None and r.kdc_proc.poll() is not None
        _dump_on_failure(request, r)
        r.stop()
        if died:
            pytest.fail("krb5kdc died during the test:\n" + r.logs())
