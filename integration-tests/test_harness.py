"""The harness's promise that a daemon which dies fails the test that was
using it (conftest._realms, Realm.dead_daemons), for krb5kdc as for the MPC
servers of a KmpcRealm; and that a server the test stopped or restarted
through the harness (MpcCluster.stop_party, start_party) is no death."""
import os
import signal
import time

import pytest

import conftest
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.kmpc_realm import KmpcRealm
from kmpc_harness.realm import Realm


def _kill(pid):
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while kmpc_cluster.pid_alive(pid) and time.time() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # a party start_party made is our child
        except ChildProcessError:
            pass
        time.sleep(0.02)


def _teardown_fails(gen, match):
    """The fixture's teardown (the generator's end) fails the test."""
    with pytest.raises(pytest.fail.Exception, match=match):
        next(gen)


def test_a_dead_kdc_fails_the_test(tmp_path, request):
    gen = conftest._realms(tmp_path, request, Realm, "realm")
    r = next(gen)()
    r.start_kdc()
    assert r.dead_daemons() == []
    r.kdc_proc.kill()
    r.kdc_proc.wait()
    assert r.dead_daemons() == ["krb5kdc"]
    _teardown_fails(gen, "krb5kdc died during the test")


def test_a_dead_mpc_server_fails_the_test(tmp_path, request):
    kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")
    gen = conftest._realms(tmp_path, request, KmpcRealm, "kmpc")
    r = next(gen)(module="real")
    c = r.cluster
    assert r.dead_daemons() == []
    c.stop_party(2)  # stopped on purpose: no death
    assert r.dead_daemons() == []
    _kill(c.pid(1))
    assert r.dead_daemons() == ["MPC server 1"]
    c.start_party(1)  # restarted: alive again
    c.start_party(2)
    assert r.dead_daemons() == []
    _kill(c.pid(1))  # a restarted party dies too (our child: a zombie)
    assert r.dead_daemons() == ["MPC server 1"]
    _teardown_fails(gen, "MPC server 1 died during the test")
