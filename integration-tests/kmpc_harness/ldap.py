#!/usr/bin/env python3
"""An OpenLDAP server for a throwaway realm's KDB (MIT's kldap module).

Debian's slapd (package slapd) runs from its own cn=config directory and
mdb database under the realm's directory, listening on 127.0.0.1:PORT
(the KDB's simple binds) and on an ldapi socket in that directory (the
harness's own administration, SASL EXTERNAL as the invoking uid, so no
administrator password exists at all).  It is never the system's slapd:
nothing under /etc/ldap or /var/lib/ldap is read or written, except the
schema files Debian ships (core.ldif).

Layout of the directory tree (SUFFIX = dc=kmpc,dc=test):

  SUFFIX                          the database's root entry
  cn=kdc-service,SUFFIX           the KDC's bind DN (ldap_kdc_dn)
  cn=kadmin-service,SUFFIX        kadmind's bind DN (ldap_kadmind_dn), also
                                  used by kdb5_ldap_util and kadmin.local
  cn=krbContainer,SUFFIX          ldap_kerberos_container_dn: the realm
                                  (cn=REALM,...) is made under it by
                                  `kdb5_ldap_util create`

The two service DNs get random passwords which reach the KDB only through
`kdb5_ldap_util stashsrvpw` (the ldap_service_password_file): the KDC and
kadmind read them there, as in MIT's "Configuring Kerberos with OpenLDAP
back-end" (doc/admin/conf_ldap.rst).  Access rules follow that document:
only the two service DNs can read or write the Kerberos container, nobody
else reads anything of it.

The schema is MIT's own, kerberos.openldap.ldif from the krb5 source tree
(src/plugins/kdb/ldap/libkdb_ldap/) that built the prefix.
"""
import base64
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse

from kmpc_harness import realm as kmpc_realm

SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
LDAPMODIFY = "/usr/bin/ldapmodify"
LDAPSEARCH = "/usr/bin/ldapsearch"
CORE_SCHEMA = "/etc/ldap/schema/core.ldif"
SUFFIX = "dc=kmpc,dc=test"
CONTAINER = f"cn=krbContainer,{SUFFIX}"
KDC_DN = f"cn=kdc-service,{SUFFIX}"
KADMIN_DN = f"cn=kadmin-service,{SUFFIX}"


class LdapError(kmpc_realm.RealmError):
    pass


def mit_schema(prefix=None):
    """MIT's OpenLDAP schema (LDIF) from the krb5 source tree that built
    prefix (build-krb5.sh keeps it in BUILD/krb5-src next to BUILD/krb5)."""
    prefix = prefix or kmpc_realm.PREFIX
    path = os.path.join(os.path.dirname(prefix), "krb5-src", "src", "plugins", "kdb",
                        "ldap", "libkdb_ldap", "kerberos.openldap.ldif")
    if not os.path.exists(path):
        raise LdapError(f"{path} missing: build krb5 with krb5-patches/build-krb5.sh")
    return path


def kldap_built(prefix=None):
    """The kldap KDB module of the prefix (configure --with-ldap)."""
    prefix = prefix or kmpc_realm.PREFIX
    so = os.path.join(prefix, "lib", "krb5", "plugins", "kdb", "kldap.so")
    if not os.path.exists(so):
        raise LdapError(f"{so} missing: krb5 was built --without-ldap; rebuild it "
                        "(make krb5)")
    return so


def ssha(password):
    """RFC 2307 {SSHA} userPassword value (SHA-1 of password+salt, then salt):
    slapd's default password scheme, so no clear text is stored."""
    salt = secrets.token_bytes(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


class Slapd:
    """slapd for one realm, in workdir (created); start() then stop()."""

    def __init__(self, workdir, log=None):
        self.dir = os.path.abspath(workdir)
        self.confdir = os.path.join(self.dir, "slapd.d")
        self.dbdir = os.path.join(self.dir, "db")
        self.sock = os.path.join(self.dir, "ldapi")
        self.ldapi = "ldapi://" + urllib.parse.quote(self.sock, safe="")
        self.log = log or os.path.join(self.dir, "slapd.log")
        self.port = None
        self.uri = None
        self.proc = None
        # Bind passwords of the two service DNs: random, never printed; they
        # go to slapd as {SSHA} hashes and to krb5 through stashsrvpw.
        self.passwords = {KDC_DN: secrets.token_urlsafe(24),
                          KADMIN_DN: secrets.token_urlsafe(24)}

    # ---- configuration (offline, slapadd) ------------------------------
    def _slapadd(self, ldif, *args):
        p = subprocess.run([SLAPADD, "-q", *args], input=ldif, capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise LdapError(f"slapadd {' '.join(args)} failed:\n{p.stdout}{p.stderr}")

    def _config_ldif(self):
        uid = os.geteuid()
        acl_container = (f'to dn.subtree="{CONTAINER}" by dn.exact="{KADMIN_DN}" write '
                         f'by dn.exact="{KDC_DN}" write by * none')
        return f"""dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {self.dir}/slapd.pid
olcAuthzRegexp: "gidNumber=[0-9]+\\+uidNumber={uid},cn=peercred,cn=external,cn=auth" "cn=admin,{SUFFIX}"

dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file://{CORE_SCHEMA}

include: file://{mit_schema()}

dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: to * by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcSuffix: {SUFFIX}
olcRootDN: cn=admin,{SUFFIX}
olcDbDirectory: {self.dbdir}
olcDbMaxSize: 268435456
olcDbIndex: objectClass eq
olcDbIndex: krbPrincipalName eq,pres,sub
olcAccess: to attrs=userPassword by anonymous auth by * none
olcAccess: {acl_container}
olcAccess: to * by dn.exact="{KADMIN_DN}" read by dn.exact="{KDC_DN}" read by * none
"""

    def _base_ldif(self):
        entries = [f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\n"
                   f"dc: kmpc\no: kmpc test realm\n",
                   f"dn: {CONTAINER}\nobjectClass: krbContainer\ncn: krbContainer\n"]
        for dn, pw in self.passwords.items():
            cn = dn.split(",")[0].split("=")[1]
            entries.append(f"dn: {dn}\nobjectClass: organizationalRole\n"
                           f"objectClass: simpleSecurityObject\ncn: {cn}\n"
                           f"userPassword: {ssha(pw)}\n")
        return "\n".join(entries)

    def configure(self):
        for path in (SLAPD, SLAPADD, LDAPMODIFY, CORE_SCHEMA):
            if not os.path.exists(path):
                raise LdapError(f"{path} missing: run deploy/install-deps.sh "
                                "(slapd, ldap-utils)")
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in (self.confdir, self.dbdir):
            os.makedirs(d, mode=0o700)
        self._slapadd(self._config_ldif(), "-n", "0", "-F", self.confdir)
        self._slapadd(self._base_ldif(), "-b", SUFFIX, "-F", self.confdir)

    # ---- the daemon ----------------------------------------------------
    def start(self, timeout=20):
        """Configure and start slapd in the foreground (-d: no fork, its
        log on stderr); returns when an ldapi search succeeds."""
        if self.proc is not None:
            raise LdapError("slapd already running")
        self.configure()
        self.port = kmpc_realm.free_port_block((0,), udp=False)
        self.uri = f"ldap://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [SLAPD, "-d", "0", "-F", self.confdir, "-h", f"{self.uri}/ {self.ldapi}"],
            stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                raise LdapError(f"slapd exited with {code}:\n{self.logs()}")
            if self._answers():
                return self
            time.sleep(0.1)
        raise LdapError(f"slapd did not answer within {timeout}s:\n{self.logs()}")

    def _answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
        except OSError:
            return False
        p = subprocess.run([LDAPSEARCH, "-Q", "-Y", "EXTERNAL", "-H", self.ldapi,
                            "-b", SUFFIX, "-s", "base", "dn"],
                           capture_output=True, text=True, timeout=10)
        return p.returncode == 0

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def logs(self):
        if not os.path.exists(self.log):
            return ""
        with open(self.log, errors="replace") as f:
            return f.read()[-20000:]

    # ---- administration over ldapi (SASL EXTERNAL: the rootdn) ----------
    def modify(self, ldif):
        """ldapmodify as the directory's administrator."""
        p = subprocess.run([LDAPMODIFY, "-Q", "-Y", "EXTERNAL", "-H", self.ldapi],
                           input=ldif, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise LdapError(f"ldapmodify failed:\n{p.stdout}{p.stderr}")
        return p.stdout

    def search(self, base, filt="(objectClass=*)", *attrs):
        p = subprocess.run([LDAPSEARCH, "-Q", "-LLL", "-o", "ldif-wrap=no", "-Y",
                            "EXTERNAL", "-H", self.ldapi, "-b", base, filt, *attrs],
                           capture_output=True, text=True, timeout=30)
        if p.returncode not in (0, 32):          # 32: noSuchObject
            raise LdapError(f"ldapsearch failed:\n{p.stdout}{p.stderr}")
        return p.stdout


def dbmodules_conf(slapd, stash):
    """The kdc.conf [dbmodules] section of a realm on slapd (database_module
    = ldap in the realm), the service passwords in the stash file."""
    return f"""[dbmodules]
    ldap = {{
        db_library = kldap
        ldap_kerberos_container_dn = {CONTAINER}
        ldap_kdc_dn = {KDC_DN}
        ldap_kadmind_dn = {KADMIN_DN}
        ldap_service_password_file = {stash}
        ldap_servers = {slapd.uri}
        ldap_conns_per_server = 5
    }}
"""


def create_realm(realm, slapd, stash, master_password):
    """The realm's KDB on slapd: both bind passwords stashed, then
    `kdb5_ldap_util create -s` (realm container, K/M, krbtgt, kadmin/*, the
    master key stash) as the kadmind DN.  Passwords go through stdin."""
    for dn, pw in slapd.passwords.items():
        realm.run(["kdb5_ldap_util", "-r", realm.realm, "stashsrvpw", "-f", stash, dn],
                  input=pw + "\n" + pw + "\n")
    os.chmod(stash, 0o600)
    realm.run(["kdb5_ldap_util", "-r", realm.realm, "create", "-s",
               "-subtrees", CONTAINER, "-sscope", "sub"],
              input=master_password + "\n" + master_password + "\n")


def principal_dn(slapd, princ, realm):
    """The DN of princ's entry (kldap names it krbPrincipalName=...,cn=REALM,
    container); LdapError if there is none."""
    name = princ if "@" in princ else f"{princ}@{realm}"
    out = slapd.search(CONTAINER, f"(krbPrincipalName={ldap_escape(name)})", "dn")
    for line in out.splitlines():
        if line.startswith("dn: "):
            return line[4:]
        if line.startswith("dn:: "):
            return base64.b64decode(line[5:]).decode()
    raise LdapError(f"no LDAP entry for {name}")


def ldap_escape(value):
    """RFC 4515 filter escaping."""
    out = []
    for ch in value:
        out.append(f"\\{ord(ch):02x}" if ch in "*()\\\0" else ch)
    return "".join(out)


def set_delegation(slapd, realm, proxy, targets):
    """Constrained delegation policy: replace krbAllowedToDelegateTo of the
    proxy service's entry by targets (principal names; [] removes it).  MIT
    reads it into KRB5_TL_CONSTRAINED_DELEGATION_ACL and its
    check_allowed_to_delegate compares the requested server with each
    (plugins/kdb/ldap/libkdb_ldap/kdb_ldap.c)."""
    dn = principal_dn(slapd, proxy, realm)
    # A replace without values removes the attribute, present or not
    # (RFC 4511 4.6).
    lines = [f"dn: {dn}", "changetype: modify", "replace: krbAllowedToDelegateTo"]
    lines += [f"krbAllowedToDelegateTo: {t}" for t in targets]
    slapd.modify("\n".join(lines) + "\n")
