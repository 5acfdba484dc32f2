"""Debian's Apache (apache2) with mod_auth_gssapi (libapache2-mod-auth-gssapi),
run by a test on loopback: its own ServerRoot, config, logs and replay
cache under one directory, in the foreground (-DFOREGROUND), never the
system service (no /etc/apache2, no systemd).

Apache refuses to serve as root and, started as root, drops its children
to its User (mod_unixd): a test run as root gives the whole server to
`nobody` (a directory of its own under /tmp: pytest's are 0700 to root);
any other user runs it as itself in the directory it is given.

Absent packages raise ApacheError: deploy/install-deps.sh installs them,
so the caller fails, it does not skip.
"""
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from kmpc_harness import realm as kmpc_realm

APACHE = "/usr/sbin/apache2"
MODULES = "/usr/lib/apache2/modules"
LOADED = ("mpm_prefork", "authn_core", "authz_core", "authz_user", "auth_gssapi")
GSSAPI = os.path.join(MODULES, "mod_auth_gssapi.so")


class ApacheError(Exception):
    pass


CONFIG = """ServerRoot "{root}"
ServerName {host}
Listen 127.0.0.1:{port}
PidFile "{root}/run/httpd.pid"
DefaultRuntimeDir "{root}/run"
ErrorLog "{root}/error.log"
LogLevel warn auth_gssapi:debug
LogFormat "%u \\"%r\\" %>s" kmpc
CustomLog "{root}/access.log" kmpc
StartServers 1
MinSpareServers 1
MaxSpareServers 2
{modules}
DocumentRoot "{root}/htdocs"
<Location />
    AuthType GSSAPI
    AuthName "kmpc"
    GssapiCredStore keytab:{keytab}
    GssapiAllowedMech krb5
    GssapiBasicAuth Off
    Require valid-user
</Location>
"""


class Apache:
    """One Apache on 127.0.0.1:port serving `host` with the keytab's
    HTTP/ key; krb5_conf is the krb5.conf its GSSAPI reads."""

    def __init__(self, workdir, host, keytab, krb5_conf):
        for path in [APACHE] + [os.path.join(MODULES, f"mod_{m}.so") for m in LOADED]:
            if not os.path.exists(path):
                raise ApacheError(f"{path} missing: run deploy/install-deps.sh "
                                  "(apache2, libapache2-mod-auth-gssapi)")
        self.user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        self.root = tempfile.mkdtemp(prefix="kmpc-apache-") if self.user else workdir
        self.host = host
        self.port = kmpc_realm.free_ports(1)[0]
        self.proc = None
        for d in ("run", "htdocs", "rcache"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        with open(os.path.join(self.root, "htdocs", "index.html"), "w") as f:
            f.write("hello from kmpc's Apache\n")
        self.keytab = os.path.join(self.root, "http.keytab")
        self.krb5_conf = os.path.join(self.root, "krb5.conf")
        shutil.copyfile(keytab, self.keytab)
        shutil.copyfile(krb5_conf, self.krb5_conf)
        modules = "\n".join(f"LoadModule {m}_module {MODULES}/mod_{m}.so" for m in LOADED)
        self.conf = os.path.join(self.root, "httpd.conf")
        with open(self.conf, "w") as f:
            f.write(CONFIG.format(root=self.root, host=host, port=self.port,
                                  keytab=self.keytab, modules=modules))
        if self.user:
            for d, dirs, files in os.walk(self.root):
                for n in [d] + [os.path.join(d, x) for x in dirs + files]:
                    os.chown(n, self.user.pw_uid, self.user.pw_gid)

    @property
    def url(self):
        return f"http://{self.host}:{self.port}/index.html"

    def start(self, timeout=20):
        env = {"PATH": "/usr/sbin:/usr/bin:/bin", "LC_ALL": "C",
               "KRB5_CONFIG": self.krb5_conf,
               "KRB5RCACHEDIR": os.path.join(self.root, "rcache")}
        kw = {}
        if self.user:
            kw = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        with open(os.path.join(self.root, "stderr.log"), "w") as err:
            self.proc = subprocess.Popen([APACHE, "-f", self.conf, "-DFOREGROUND"],
                                         env=env, cwd=self.root,
                                         stdout=subprocess.DEVNULL, stderr=err, **kw)
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2)
                return self
            except urllib.error.HTTPError:
                return self      # 401: up, asking for Negotiate
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise ApacheError(f"apache2 did not start:\n{self.logs()}")
                time.sleep(0.2)

    def log(self, name):
        path = os.path.join(self.root, name)
        if not os.path.exists(path):
            return ""
        with open(path, errors="replace") as f:
            return f.read()

    def logs(self):
        return "\n".join(f"--- {n}\n{self.log(n)}"
                         for n in ("stderr.log", "error.log", "access.log"))

    def stop(self):
        """SIGTERM to the parent, which stops its children (Apache's
        'stop'); then the directory made for `nobody` goes (a caller
        wanting the logs reads them first)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.user:
            shutil.rmtree(self.root, ignore_errors=True)
