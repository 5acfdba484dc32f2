#!/usr/bin/env python3
"""A throwaway Kerberos realm on 127.0.0.1, run from the patched krb5 prefix.

Used by the integration tests, `make demo` and the benchmarks, in the spirit
of MIT's k5test.py: real daemons (kdb5_util, kadmin.local, krb5kdc), their own
ports and directories, a "commencing operation" wait, every daemon's log kept
for dumping on failure, and processes stopped by PID.

Only binaries and libraries from the private prefix (KRB5_PREFIX, default
build/krb5) are used: patched and stock krb5 libraries must never meet in one
process, so the environment is scrubbed of LD_LIBRARY_PATH and friends.

CLI:  python3 -m kmpc_harness.realm start DIR [--enctype E ...]   (prints the env to use)
      python3 -m kmpc_harness.realm stop DIR
(with integration-tests/ on PYTHONPATH, or run the file itself)
"""

import argparse
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

# integration-tests/kmpc_harness/realm.py -> the repository root.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build"))
PREFIX = os.environ.get("KRB5_PREFIX", os.path.join(BUILD, "krb5"))

REALM = "KMPC.TEST"
DEFAULT_ENCTYPES = ("aes256-ctr-mpc", "aes128-ctr-mpc")
# The KDC never makes session keys of an MPC enctype (krb5's key-operation layer patch), so
# clients must also offer, and be permitted, an ordinary one.
DEFAULT_SESSION_ENCTYPES = ("aes256-cts-hmac-sha1-96",)


class RealmError(Exception):
    pass


def _ephemeral_range():
    """The kernel's range for ports it picks itself (outgoing connections,
    unbound UDP sends, bind to port 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def listen_port_range(span=1):
    """[first, last] for base ports of listeners that need `span` ports.

    Listening ports are taken outside the ephemeral range: a port from it
    (what bind(0) hands out) was free when checked, but any outgoing
    connection or UDP socket on the machine - a login storm makes thousands a
    second - may take it before the daemon binds it.  Ports outside that
    range are only ever taken by someone binding them explicitly."""
    lo, hi = _ephemeral_range()
    if lo - 10000 >= 2000:
        return 10000, lo - span
    return hi + 1, 65535 - span + 1


def _bindable(port, udp=True):
    socks = []
    try:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,):
            s = socket.socket(socket.AF_INET, kind)
            socks.append(s)
            s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def free_port_block(offsets, udp=True, tries=1000):
    """A base port such that base+o is free (TCP, and UDP unless udp=False)
    on 127.0.0.1 for every o in offsets, outside the ephemeral range."""
    offsets = list(offsets)
    first, last = listen_port_range(max(offsets) + 1)
    for _ in range(tries):
        base = random.randint(first, last)
        if all(_bindable(base + o, udp) for o in offsets):
            return base
    raise RealmError("no free ports on 127.0.0.1")


def free_ports(n):
    """n distinct TCP+UDP ports on 127.0.0.1 that are free right now (outside
    the ephemeral range, see listen_port_range)."""
    ports = []
    while len(ports) < n:
        p = free_port_block([0])
        if p not in ports:
            ports.append(p)
    return ports


def build_c(source, out, libs=("krb5", "k5crypto", "com_err"), cflags=()):
    """Compiles the C file `source` into `out` against the patched prefix
    (its headers, its libraries, found at run time through an rpath), as a
    test's own client of libkrb5 or libkadm5; returns out."""
    lib = os.path.join(PREFIX, "lib")
    subprocess.run(["cc", *cflags, "-o", str(out), str(source),
                    "-I" + os.path.join(PREFIX, "include"), "-L" + lib,
                    "-Wl,-rpath," + lib, *("-l" + l for l in libs)],
                   check=True, capture_output=True)
    return str(out)


def build_c_text(text, workdir, name, libs=("krb5", "k5crypto", "com_err")):
    """build_c of the C program `text`, written to workdir/name.c; returns
    the path of workdir/name."""
    src = os.path.join(str(workdir), name + ".c")
    with open(src, "w") as f:
        f.write(text)
    return build_c(src, os.path.join(str(workdir), name), libs=libs)


def binpath(name):
    for sub in ("bin", "sbin"):
        p = os.path.join(PREFIX, sub, name)
        if os.path.exists(p):
            return p
    raise RealmError(f"{name} not found under {PREFIX}: run `make krb5` first")


def libdefaults(realm, ets, extra=""):
    """krb5.conf's [libdefaults] of the test realms: no DNS, TCP only,
    the enctypes ets (a space-separated list) for tickets and sessions,
    then extra lines."""
    return f"""[libdefaults]
    default_realm = {realm}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    udp_preference_limit = 1
    default_tkt_enctypes = {ets}
    default_tgs_enctypes = {ets}
    permitted_enctypes = {ets}
    allow_weak_crypto = false
{extra}"""


class Realm:
    """One realm: a KDC database, a krb5kdc, config files and a ccache."""

    def __init__(self, workdir, enctypes=DEFAULT_ENCTYPES, kdc_conf_extra="",
                 krb5_conf_extra="", realm=REALM, realm_extra="",
                 session_enctypes=DEFAULT_SESSION_ENCTYPES, ldap=False,
                 supported_enctypes=None):
        """ldap: keep the KDB in OpenLDAP (MIT's kldap module) on a slapd
        of the realm's own, started by create() and stopped by stop()
        (integration-tests/kmpc_harness/ldap.py) instead of a db2 file.
        supported_enctypes: kdc.conf's (the enctypes of new keys: addprinc,
        cpw, kpasswd) when they differ from enctypes (krb5.conf's lists)."""
        self.dir = os.path.abspath(workdir)
        self.realm = realm
        self.enctypes = list(enctypes)
        self.supported_enctypes = list(supported_enctypes or enctypes)
        # Offered and permitted on the client side after enctypes, but no
        # principal gets keys of them unless asked to.
        self.session_enctypes = [e for e in session_enctypes
                                 if e not in self.enctypes]
        self.kdc_conf_extra = kdc_conf_extra
        self.krb5_conf_extra = krb5_conf_extra
        # Extra relations inside the realm's [realms] block of kdc.conf
        # (e.g. "disable_pac = true").
        self.realm_extra = realm_extra
        self.kdc_proc = None
        self.kadmind_proc = None
        self.kdc_port = None
        self.krb5_conf = os.path.join(self.dir, "krb5.conf")
        self.kdc_conf = os.path.join(self.dir, "kdc.conf")
        self.kdc_log = os.path.join(self.dir, "krb5kdc.log")
        self.ccache = os.path.join(self.dir, "ccache")
        self.keytab = os.path.join(self.dir, "keytab")
        self.master_password = None
        self.env = None
        self.ldap = ldap
        self.slapd = None

    # ---- set-up -------------------------------------------------------
    def create(self):
        os.makedirs(self.dir, exist_ok=True)
        self.kdc_port, self.kadmin_port, self.kpasswd_port = free_ports(3)
        ets = " ".join(self.enctypes + self.session_enctypes)
        supported = " ".join(f"{e}:normal" for e in self.supported_enctypes)
        kdb_conf = self._start_ldap() if self.ldap else ""
        with open(self.krb5_conf, "w") as f:
            f.write(f"""{libdefaults(self.realm, ets, self.krb5_conf_extra)}
[realms]
    {self.realm} = {{
        kdc = 127.0.0.1:{self.kdc_port}
        admin_server = 127.0.0.1:{self.kadmin_port}
        kpasswd_server = 127.0.0.1:{self.kpasswd_port}
    }}
""")
        with open(self.kdc_conf, "w") as f:
            f.write(f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{self.kdc_port}
    kdc_tcp_listen = 127.0.0.1:{self.kdc_port}
{self.kdc_conf_extra}
[realms]
    {self.realm} = {{
        database_name = {self.dir}/principal
        {"database_module = ldap" if self.ldap else ""}
        key_stash_file = {self.dir}/stash
        acl_file = {self.dir}/kadm5.acl
        kadmind_port = {self.kadmin_port}
        kpasswd_port = {self.kpasswd_port}
        kadmind_listen = 127.0.0.1:{self.kadmin_port}
        kpasswd_listen = 127.0.0.1:{self.kpasswd_port}
        master_key_type = aes256-cts-hmac-sha1-96
        supported_enctypes = {supported}
        max_life = 10h
        max_renewable_life = 7d
{self.realm_extra}
    }}
[logging]
    kdc = FILE:{self.kdc_log}
    admin_server = FILE:{self.dir}/kadmind.log
    default = FILE:{self.dir}/krb5lib.log
{kdb_conf}""")
        open(os.path.join(self.dir, "kadm5.acl"), "w").close()
        self.env = self.make_env()
        # The master password only protects this throwaway database; it is
        # random per realm and never printed.
        self.master_password = secrets.token_urlsafe(24)
        if self.ldap:
            from kmpc_harness import ldap as kmpc_ldap
            kmpc_ldap.create_realm(self, self.slapd, self.ldap_stash,
                                   self.master_password)
            return self
        self.run(["kdb5_util", "create", "-s", "-r", self.realm, "-W"],
                 input=self.master_password + "\n" + self.master_password + "\n")
        return self

    def _start_ldap(self):
        """The realm's slapd (integration-tests/kmpc_harness/ldap.py), started; returns the
        kdc.conf [dbmodules] text for it."""
        from kmpc_harness import ldap as kmpc_ldap
        kmpc_ldap.kldap_built(PREFIX)
        # Recorded before start(), so that stop() ends a slapd that started
        # but did not answer.
        self.slapd = kmpc_ldap.Slapd(os.path.join(self.dir, "ldap"),
                                     log=os.path.join(self.dir, "slapd.log"))
        self.slapd.start()
        return kmpc_ldap.dbmodules_conf(self.slapd, self.ldap_stash)

    @property
    def ldap_stash(self):
        """The LDAP service password file (kdb5_ldap_util stashsrvpw)."""
        return os.path.join(self.dir, "ldap.stash")

    def stop_ldap(self):
        if self.slapd is not None:
            self.slapd.stop()

    def make_env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LD_", "KRB5", "KPROP"))}
        env.update({
            "KRB5_CONFIG": self.krb5_conf,
            "KRB5_KDC_PROFILE": self.kdc_conf,
            "KRB5CCNAME": "FILE:" + self.ccache,
            "KRB5_KTNAME": "FILE:" + self.keytab,
            "KRB5RCACHEDIR": self.dir,
            "KRB5_TRACE": "/dev/null",
            "LC_ALL": "C",
        })
        return env

    # ---- running tools -----------------------------------------------
    def run(self, argv, input=None, expected_code=0, expected_msg=None,
            env=None, timeout=60):
        """Run a krb5 tool from the private prefix; check exit code/message."""
        argv = [binpath(argv[0])] + list(argv[1:])
        p = subprocess.run(argv, input=input, capture_output=True, text=True,
                           env=env or self.env, timeout=timeout)
        out = p.stdout + p.stderr
        if expected_code is not None and p.returncode != expected_code:
            raise RealmError(f"{os.path.basename(argv[0])} exited {p.returncode}, "
                             f"expected {expected_code}:\n{out}")
        if expected_msg is not None and expected_msg not in out:
            raise RealmError(f"{os.path.basename(argv[0])}: expected "
                             f"{expected_msg!r} in output:\n{out}")
        return out

    def kadmin_local(self, query, **kw):
        return self.run(["kadmin.local", "-r", self.realm, "-q", query], **kw)

    def addprinc(self, name, password=None, enctypes=None, flags="+requires_preauth"):
        ks = ""
        if enctypes:
            ks = "-e " + ",".join(f"{e}:normal" for e in enctypes) + " "
        if password is None:
            out = self.kadmin_local(f"addprinc {flags} {ks}-randkey {name}")
        else:
            out = self.kadmin_local(f"addprinc {flags} {ks}-pw {password} {name}")
        if "created" not in out:
            raise RealmError(f"addprinc {name} failed:\n{out}")

    def extract_keytab(self, name, keytab=None):
        kt = keytab or self.keytab
        self.kadmin_local(f"ktadd -norandkey -k {kt} {name}")
        return kt

    def kinit(self, princ, password, **kw):
        return self.run(["kinit", princ], input=password + "\n", **kw)

    # ---- the KDC -------------------------------------------------------
    def start_kdc(self, extra_args=(), timeout=20, attempts=3):
        """Start krb5kdc and wait for "commencing operation".

        The KDC's port was free when the realm was created and lies outside
        the ephemeral range, but another process may still bind it in between
        (another test's realm picking the same random port); then the KDC is
        moved to a fresh port and retried.
        """
        for attempt in range(attempts):
            try:
                return self._start_kdc_once(extra_args, timeout)
            except RealmError as e:
                if attempt + 1 == attempts or "Address already in use" not in str(e):
                    raise
                self._move_kdc_port()

    def _move_kdc_port(self):
        old, new = self.kdc_port, free_ports(1)[0]
        for path in (self.krb5_conf, self.kdc_conf):
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}"))
        self.kdc_port = new

    def _start_kdc_once(self, extra_args, timeout):
        if self.kdc_proc is not None:
            raise RealmError("KDC already running")
        offset = os.path.getsize(self.kdc_log) if os.path.exists(self.kdc_log) else 0
        self.kdc_proc = subprocess.Popen(
            [binpath("krb5kdc"), "-n", "-r", self.realm, *extra_args],
            env=self.env, stdout=open(os.path.join(self.dir, "krb5kdc.out"), "ab"),
            stderr=subprocess.STDOUT)
        with open(os.path.join(self.dir, "krb5kdc.pid"), "w") as f:
            f.write(str(self.kdc_proc.pid))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.kdc_proc.poll() is not None:
                code = self.kdc_proc.returncode
                self.kdc_proc = None
                raise RealmError(f"krb5kdc exited with {code}:\n" + self.logs())
            if os.path.exists(self.kdc_log):
                with open(self.kdc_log) as f:
                    f.seek(offset)
                    if "commencing operation" in f.read():
                        return
            time.sleep(0.05)
        raise RealmError("krb5kdc did not start within %ds:\n%s" % (timeout, self.logs()))

    def kdc_alive(self):
        return self.kdc_proc is not None and self.kdc_proc.poll() is None

    def dead_daemons(self):
        """The daemons of this realm that were started and died without being
        stopped: krb5kdc, and slapd for a realm on LDAP (conftest fails the
        test that was using them)."""
        dead = []
        if self.kdc_proc is not None and self.kdc_proc.poll() is not None:
            dead.append("krb5kdc")
        slapd = getattr(self, "slapd", None)
        if slapd is not None and slapd.proc is not None and not slapd.alive():
            dead.append("slapd")
        return dead

    def stop_kdc(self):
        if self.kdc_proc is None:
            return
        if self.kdc_proc.poll() is None:
            self.kdc_proc.send_signal(signal.SIGTERM)
            try:
                self.kdc_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kdc_proc.kill()
                self.kdc_proc.wait()
        self.kdc_proc = None

    def logs(self):
        parts = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith((".log", ".out")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    parts.append(f"----- {name} -----\n{f.read()[-20000:]}")
        return "\n".join(parts)

    # ---- kadmind --------------------------------------------------------
    def start_kadmind(self, acl="*/admin@{realm} *\n", timeout=20, extra_args=()):
        """Start kadmind (kadmin RPC and the kpasswd service on loopback)
        and wait for its "starting" line; acl: the kadm5.acl text;
        extra_args: more kadmind options (e.g. iprop's -p/-K/-k/-F)."""
        if self.kadmind_proc is not None:
            raise RealmError("kadmind already running")
        with open(os.path.join(self.dir, "kadm5.acl"), "w") as f:
            f.write(acl.format(realm=self.realm))
        log = os.path.join(self.dir, "kadmind.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        self.kadmind_proc = subprocess.Popen(
            [binpath("kadmind"), "-nofork", "-r", self.realm,
             "-P", os.path.join(self.dir, "kadmind.pid"), *extra_args],
            env=self.env, stdout=open(os.path.join(self.dir, "kadmind.out"), "ab"),
            stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.kadmind_proc.poll() is not None:
                code = self.kadmind_proc.returncode
                self.kadmind_proc = None
                raise RealmError(f"kadmind exited with {code}:\n" + self.logs())
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    f.seek(offset)
                    if "starting" in f.read():
                        return
            time.sleep(0.05)
        raise RealmError(f"kadmind did not start within {timeout}s:\n" + self.logs())

    def stop_kadmind(self):
        if self.kadmind_proc is None:
            return
        self.kadmind_proc.terminate()
        try:
            self.kadmind_proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kadmind_proc.kill()
            self.kadmind_proc.wait()
        self.kadmind_proc = None

    def stop(self):
        self.stop_kadmind()
        self.stop_kdc()
        self.stop_ldap()


def storm_users_realm(make, enctype, users, service=True):
    """A realm from make(enctypes=[enctype]) (realm_factory) with `users`
    random-key users user0.. requiring pre-auth and their keytab
    (storm_users.populate_users), the storm's service principal unless
    service=False; the KDC started."""
    from kmpc_harness import storm_users  # it imports this module
    r = make(enctypes=[enctype])
    storm_users.populate_users(r, users, service=storm_users.SERVICE if service else None)
    r.start_kdc()
    return r


def stop_dir(workdir):
    """Stop the KDC and kadmind of a realm directory by their pid files."""
    for name in ("krb5kdc.pid", "kadmind.pid"):
        pidfile = os.path.join(workdir, name)
        if not os.path.exists(pidfile):
            continue
        with open(pidfile) as f:
            pid = int(f.read().strip() or 0)
        try:
            if pid > 0:
                os.kill(pid, signal.SIGTERM)
                for _ in range(100):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.unlink(pidfile)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("dir")
    s.add_argument("--enctype", action="append")
    t = sub.add_parser("stop")
    t.add_argument("dir")
    args = ap.parse_args()
    if args.cmd == "stop":
        stop_dir(args.dir)
        return 0
    if os.path.exists(args.dir):
        stop_dir(args.dir)
        shutil.rmtree(args.dir)
    realm = Realm(args.dir, enctypes=args.enctype or DEFAULT_ENCTYPES).create()
    realm.start_kdc()
    # Leave the KDC running detached from this process.
    realm.kdc_proc = None
    for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME"):
        print(f"export {k}={realm.env[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
