"""Every benchmark builds its storm targets and realms the way its script
does, so that a changed signature anywhere on that path (a target's
constructor, a factory, the harness's realm classes and their methods)
fails `make test` rather than `make bench` minutes into its run (issue 48
item 8: storm_bench's kmpc-malicious factory passed metrics= to a
constructor without it).

No daemon starts: the harness's classes (realm.Realm, kmpc_realm.KmpcRealm,
cluster.MpcCluster, replica.ReplicaKdc and ReplicaSet, netns.Lan) keep
their real constructors, and each method that would run a process is
replaced by one that binds its arguments to the real method's signature
(a TypeError as the real call would raise), records the call and does what
the bench reads afterwards (ports, a process id, kadmin.local's "created."
lines and keytab files). Everything else, the benches' own code included,
runs as it is. Well under a second."""
import argparse
import functools
import inspect
import os
import subprocess
import threading

import pytest

from bench import (cts_bench, cts_realm, kdc_cpu_ab, kdc_profile, kpasswd_bench, netns_bench,
                   one_client_ab, pkinit_bench, replica_bench, ring_delay, storm_ab, storm_bench,
                   storm_profile, storm_soak, tgs_bench)
from kmpc_harness import cluster, kmpc_realm, netns, realm, replica

# Methods kept as they are: they run no process themselves (ReplicaSet's
# create and start only call the faked methods of its realms).
PURE = {"make_env", "metrics_url", "addr", "log_path", "store_dir", "pid", "cert",
        "ReplicaSet.create", "ReplicaSet.start"}
FAKED_CLASSES = (realm.Realm, kmpc_realm.KmpcRealm, cluster.MpcCluster,
                 replica.ReplicaKdc, replica.ReplicaSet, netns.Lan,
                 netns_bench.NetnsKmpc)
# NetnsKmpc's own steps that start processes in the namespaces.
NETNS_STEPS = {"_start_servers", "_start_kdc"}


class FakeProc:
    """What the benches read of a started daemon: its pid and that it runs.
    The pid is past Linux's largest (PID_MAX_LIMIT, 2^22): a stop() that
    signals it reaches no process."""
    pid = (1 << 22) + 1

    def poll(self):
        return None

    def terminate(self):
        pass

    kill = terminate

    def wait(self, timeout=None):
        return 0


def kadmin_out(text):
    """kadmin.local's answer to these queries: a "created." line per
    addprinc, every ktadd -k FILE's keytab made (the benches chmod it)."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["addprinc"]:
            out.append(f'Principal "{words[-1]}" created.')
        if words[:1] == ["ktadd"] and "-k" in words:
            path = words[words.index("-k") + 1]
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            open(path, "a").close()
            out.append(f"Entries for {words[-1]} added to keytab WRFILE:{path}.")
    return "\n".join(out) + "\n"


_port = iter(range(40000, 60000, 50))


def realm_create(self):
    os.makedirs(self.dir, exist_ok=True)
    self.kdc_port = next(_port)
    self.kadmin_port, self.kpasswd_port = self.kdc_port + 1, self.kdc_port + 2
    for path, text in ((self.krb5_conf, f"[libdefaults]\n    default_realm = {self.realm}\n"
                                         f"[realms]\n    kdc = 127.0.0.1:{self.kdc_port}\n"),
                       (self.kdc_conf, f"kdc_listen = 127.0.0.1:{self.kdc_port}\n")):
        with open(path, "w") as f:
            f.write(text)
    self.env = self.make_env()
    return self


def cluster_start(self, wait=True):
    self.base = next(_port)
    self.servers = ",".join(f"127.0.0.1:{self.base + i}" for i in range(3))
    if self.metrics:
        self.metrics_base = self.base + 20
    os.makedirs(self.dir, exist_ok=True)
    for i in range(3):  # what pid(i) reads
        with open(os.path.join(self.dir, f"party-{i}.pid"), "w") as f:
            f.write(str(FakeProc.pid))
    return self


def kmpc_create(self):
    realm_create(self)
    for cl in self.clusters:
        cluster_start(cl)
    if self.metrics and self.module == "real":
        self.kdc_metrics_url = f"http://127.0.0.1:{self.kdc_port + 3}/metrics"
    return self


def started(self, *a, **kw):
    self.kdc_proc = FakeProc()
    return self


def kadmind_started(self, *a, **kw):
    self.kadmind_proc = FakeProc()


def netns_servers(self):
    self.server_procs = {i: FakeProc() for i in range(3)}


def netns_kdc(self):
    self.realm.kdc_proc = FakeProc()


# What a faked method does, by "Class.method"; any other returns None.
ACTIONS = {
    "Realm.create": realm_create,
    "KmpcRealm.create": kmpc_create,
    "ReplicaKdc.create": realm_create,
    "MpcCluster.start": cluster_start,
    "Realm.start_kdc": started,
    "KmpcRealm.start": started,
    "ReplicaKdc.start": started,
    "Realm.start_kadmind": kadmind_started,
    "Realm.run": lambda self, argv, input=None, **kw: (
        kadmin_out(" ".join(argv) + "\n" + (input or "")) if argv[0] == "kadmin.local"
        else ""),
    "Realm.kadmin_local": lambda self, query, **kw: kadmin_out(query),
    "KmpcRealm.admin": lambda self, *a, **kw: "",
    "Realm.kdc_alive": lambda self: True,
    "KmpcRealm.alive": lambda self: True,
    "Realm.logs": lambda self: "",
    "KmpcRealm.logs": lambda self: "",
    "ReplicaSet.logs": lambda self: "",
    "Lan.exec_prefix": lambda self, host: [],
    "NetnsKmpc._start_servers": netns_servers,
    "NetnsKmpc._start_kdc": netns_kdc,
}


def faked(cls, name, real, calls):
    action = ACTIONS.get(f"{cls.__name__}.{name}")
    sig = inspect.signature(real)

    @functools.wraps(real)
    def method(self, *args, **kwargs):
        sig.bind(self, *args, **kwargs)  # the real call's TypeError
        calls.append((cls.__name__, name, args, kwargs))
        return action(self, *args, **kwargs) if action else None
    return method


@pytest.fixture
def dry(monkeypatch, tmp_path):
    """The harness without processes (module docstring); the calls made."""
    calls = []
    for cls in FAKED_CLASSES:
        for name, real in vars(cls).items():
            if (not inspect.isfunction(real) or name.startswith("__")
                    or {name, f"{cls.__name__}.{name}"} & PURE
                    or (cls is netns_bench.NetnsKmpc and name not in NETNS_STEPS)):
                continue
            monkeypatch.setattr(cls, name, faked(cls, name, real, calls))
    main = threading.current_thread()

    def no_process(real):
        def guard(*a, **kw):
            # The session's certificate pool fills on a thread of its own.
            if threading.current_thread() is main:
                raise AssertionError(f"a bench target started a process: {a[:1]}")
            return real(*a, **kw)
        return guard

    for fn in ("run", "Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, fn, no_process(getattr(subprocess, fn)))
    # A krb5 tool's path without a built krb5 (kadmind's arguments).
    monkeypatch.setattr(replica, "binpath", lambda name: os.path.join("/krb5/bin", name))
    monkeypatch.setattr(storm_bench, "BENCH_DIR", str(tmp_path / "bench"))
    monkeypatch.setattr(cts_bench, "MODES", dict(cts_bench.MODES))
    monkeypatch.setattr(storm_bench, "TARGETS", dict(storm_bench.TARGETS))
    return calls


STORM_TARGET = ("env", "keytab", "principal_fmt", "n_users", "service", "watch",
                "p99_bound_ms", "max_inflight", "saturation_concurrency")


def check_target(t, n_users):
    """storm_bench's target interface (its docstring), as run_storm and
    bench_settings read it."""
    for attr in STORM_TARGET:
        assert getattr(t, attr) is not None or attr == "principal_fmt", attr
    assert t.n_users == n_users
    assert t.principal_fmt is None or t.principal_fmt.count("%d") == 1
    assert all(isinstance(p, int) and p > 0 for p in t.watch.values()), t.watch
    assert t.alive() and t.logs() is not None
    t.stop()


@pytest.mark.parametrize("name", sorted(storm_bench.TARGETS))
def test_storm_bench_factories(dry, tmp_path, name):
    """storm_bench.bench_settings: factory(workdir, settings, n_users) for
    every settings the target lists (make bench-storm, storm_ab.py's
    sweep)."""
    factory, settings, _doc = storm_bench.TARGETS[name]
    for s in settings:
        check_target(factory(str(tmp_path / f"{name}-{s}" / "realm"), s, 8), 8)


def test_storm_bench_malicious_serves_metrics(dry, tmp_path):
    """The case issue 48 found: kmpc-malicious with /metrics (the module's
    Runs per exchange), semi-honest servers nowhere."""
    t = storm_bench.TARGETS["kmpc-malicious"][0](str(tmp_path / "realm"), "headline", 4)
    assert t.realm.metrics and t.metrics_urls["mpc-server-2"]
    assert "--security=malicious" in t.realm.cluster.server_flags


def test_soak_target(dry, tmp_path):
    check_target(storm_soak.soak_target(str(tmp_path), 8), 8)


@pytest.mark.parametrize("argv", [[], ["--malicious"], ["--cts", "6"],
                                  ["--cts", "6", "--cts-kdb", "--semi-honest",
                                   "--module-option", "max_inflight=1",
                                   "--tcp-max-connections", "0"]])
def test_profile_target(dry, tmp_path, argv):
    args = storm_profile.parser().parse_args(argv)
    t = storm_profile.profile_target(args, str(tmp_path / "realm"))
    check_target(t, args.cts or 1000)


def test_ab_tools_targets(dry, tmp_path):
    for kind in ("stock", "kmpc"):
        check_target(kdc_cpu_ab.make_target(kind, str(tmp_path / f"cpu-{kind}"), 4), 4)
        check_target(kdc_profile.make_target(kind, str(tmp_path / f"prof-{kind}"), 4), 4)
    check_target(one_client_ab.kmpc_target(str(tmp_path / "one-kmpc"), 4), 4)
    check_target(one_client_ab.stock_target(str(tmp_path / "one-stock"), 4), 4)
    for name in ("stock", "kmpc", "kmpc-malicious"):
        check_target(storm_ab.make_target(storm_bench, name, str(tmp_path / f"ab-{name}")),
                     1000)


@pytest.mark.parametrize("mode", sorted(cts_bench.MODES))
def test_cts_bench_targets(dry, tmp_path, mode):
    """cts_bench: its realm (bring_up, as main calls it) and each storm's
    target as bench_settings makes it from the registered factory."""
    args = cts_bench.parser().parse_args(["--users", "6", "--quick"])
    r, pws = cts_bench.bring_up(str(tmp_path / "realm"), mode, args.users,
                                args.tcp_max_connections,
                                cts_bench.parse_module_options(args.module_option))
    assert set(pws) >= {"ctsuser", "kdbuser"}
    for which, name in cts_bench.register_targets(r, mode, args.quick).items():
        factory, settings, _doc = storm_bench.TARGETS[name]
        for s in settings:
            check_target(factory(str(tmp_path / name / "realm"), s, args.users), args.users)
    # The realm phases' storms (cts_realm.phase), each population's groups.
    stock = cts_bench.Stock(r, "realm-stock")
    confs = cts_realm.client_confs(r, stock.conf)
    for label, pop in r.populations.items():
        targets = cts_realm.pop_targets(r, pop, confs)
        assert set(targets) == {"plain", "addr"}
        for group, t in targets.items():
            check_target(t, len(pop.groups[group]))
            assert os.path.exists(t.keytab)
    assert "noaddresses = false" in open(confs["addr"]).read()


@pytest.mark.parametrize("mode", sorted(tgs_bench.MODES))
def test_tgs_bench_realm_and_mix_targets(dry, tmp_path, mode):
    """tgs_bench: its realm as main brings it up (the cts and kdb services'
    keytabs, the cts one shared as a service key, the ctr service's
    aes256-ctr-mpc key made in the cluster as a service's) and the
    storms' targets."""
    calls = dry
    args = tgs_bench.parser().parse_args(["--users", "6", "--module-option", "deadline_ms=9"])
    r = tgs_bench.bring_up(str(tmp_path / "realm"), mode, args.users,
                           cts_bench.parse_module_options(args.module_option), args.server_flags)
    assert set(r.service_keytabs) == {"cts", "kdb"}
    assert all(os.path.exists(kt) for kt in r.service_keytabs.values())
    shares = [a for _c, n, a, _kw in calls if n == "admin" and a[:1] == ("share",)]
    assert ("share", "--from-existing", f"--enctype={tgs_bench.CTS256}", "--service",
            tgs_bench.SERVICES["cts"]) in shares
    assert not any(tgs_bench.SERVICES["kdb"] in a for a in shares)
    assert ("share", "--randkey", "--service", "--enctype=aes256-ctr-mpc",
            tgs_bench.SERVICES["ctr"]) in shares
    assert ("--security=semi-honest" in r.cluster.server_flags) == (mode == "semi-honest")
    for which in ("cts", "kdb", "ctr"):
        check_target(tgs_bench.MixTarget(r, which), args.users)


def test_pkinit_bench_realms(dry, tmp_path):
    """pkinit_bench: both realms as main brings them up (PKINIT on, the
    anonymous principal without keys, the users' keys shared in kmpc's
    only) and its clients' krb5.conf with the anchor."""
    calls = dry
    certs = str(tmp_path / "pkinit")
    realms = {side: pkinit_bench.bring_up(str(tmp_path / side), side, certs, "pw")
              for side in pkinit_bench.SIDES}
    assert not isinstance(realms["stock"], kmpc_realm.KmpcRealm)
    assert realms["kmpc"].metrics and realms["kmpc"].module == "real"
    assert all("pkinit_identity = FILE:" in r.realm_extra for r in realms.values())
    shares = [a for _c, n, a, _kw in calls if n == "admin" and a[:1] == ("share",)]
    assert shares == [("share", "--from-existing", f"--enctype={pkinit_bench.CTS256}",
                       pkinit_bench.CERT_USER, pkinit_bench.PASSWORD_USER)]
    anon = [a for _c, n, a, _kw in calls if n == "kadmin_local" and "WELLKNOWN/ANONYMOUS" in a[0]]
    assert len(anon) == 2 and all("-nokey" in a[0] for a in anon)
    for name, r in realms.items():
        c = pkinit_bench.Client(r, f"c-{name}", certs)
        assert f"pkinit_anchors = FILE:{certs}/ca.pem" in open(c.conf).read()
        argv = {k: pkinit_bench.login_argv(k, r, certs, "/armor.cc") for k in pkinit_bench.KINDS}
        assert argv["anonymous"] == ["-n", f"@{r.realm}"]
        assert argv["armored_password"][:2] == ["-T", "/armor.cc"]


def test_kpasswd_bench_realms(dry, tmp_path):
    for dealer in (True, False):
        r = kpasswd_bench.setup(str(tmp_path / f"d{dealer}"), dealer, True)
        assert r.kdc_proc and r.kadmind_proc


def test_replica_bench_sides(dry, tmp_path):
    rs = replica_bench.bring_up(str(tmp_path), 8, replica_bench.headline_extra())
    for side in replica_bench.sides(rs, 8):
        assert side.env and side.keytab and side.principal_fmt.count("%d") == 1
        assert side.udp_ports[0] > 0 and side.alive() and side.logs() is not None
    assert replica_bench.server_pids(rs)["krb5kdc-replica1"] > 0


def test_netns_target(dry, tmp_path):
    lan = object.__new__(netns.Lan)  # no namespaces: exec_prefix is faked
    check_target(netns_bench.netns_target(lan, str(tmp_path), 8), 8)


def test_a_wrong_signature_fails(dry, tmp_path, monkeypatch):
    """The check itself: a factory calling a constructor with an argument
    it does not take (what broke make bench) fails here."""
    def old_factory(workdir, settings, n_users):
        return storm_bench.KmpcTarget(workdir, settings, n_users, metric=True)
    with pytest.raises(TypeError):
        old_factory(str(tmp_path / "realm"), "headline", 4)
    calls = dry
    with pytest.raises(TypeError):
        kmpc_realm.bring_up(str(tmp_path / "r2"), n_random=4, no_such_option=1)
    storm_bench.TARGETS["kmpc"][0](str(tmp_path / "r3"), "headline", 4)
    assert any(n == "add_users" and kw.get("n_random") == 4 for _c, n, _a, kw in calls)
    with pytest.raises(TypeError):
        realm.Realm.addprinc(object.__new__(realm.Realm), "alice", no_such_kw=1)


def test_netns_ring_delay_target(dry, tmp_path):
    """netns_bench's target with ring_delay.py's users, its servers
    restarted through the relays: each party's flag file dials its relay
    (127.0.0.1 in its namespace), each relay its predecessor's ring."""
    calls = dry
    lan = object.__new__(netns.Lan)
    t = netns_bench.netns_target(lan, str(tmp_path), 8, delay_users=True)
    assert set(t.delay_passwords) == set(ring_delay.USERS)
    shares = [a for _c, n, a, _kw in calls if n == "admin" and a[:1] == ("share",)]
    assert ("share", "--from-existing", f"--enctype={ring_delay.CTS256}", "ctsuser") in shares
    base = t.realm.cluster.base
    ring = ring_delay.RelayRing(lan, base, str(tmp_path))
    assert ring.upstream[0] == f"{netns.HOSTS['p2']}:{base + 12}"
    t.restart_servers(ring.ring_prev())
    t.server_argv(1)  # what _start_servers runs: writes party 1's flag file
    flags = open(os.path.join(t.realm.dir, "etc-kmpc", "party1.flags")).read()
    assert f"--ring_prev=127.0.0.1:{base + ring_delay.RELAY_PORT_OFFSET + 1}\n" in flags
    assert flags.count("--ring_prev=") == 1
    check_target(t, 8)
