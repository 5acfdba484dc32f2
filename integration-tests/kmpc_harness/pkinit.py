"""PKINIT (RFC 4556) in a test or demo realm: the certificates of
deploy/gen-pkinit-certs.sh, the kdc.conf and krb5.conf relations that use
them, and the anonymous principal (docs/admin-guide.md, "PKINIT").
"""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(REPO, "deploy", "gen-pkinit-certs.sh")
ANONYMOUS = "WELLKNOWN/ANONYMOUS"
# RFC 6111 section 3: the anonymous principal's realm in a fully anonymous
# ticket's client name; MIT's klist prints it for an anonymous ccache.
ANONYMOUS_CLIENT = "WELLKNOWN/ANONYMOUS@WELLKNOWN:ANONYMOUS"


def make_certs(certs, realm, principals=()):
    """The realm's CA, KDC certificate and a client certificate for each of
    principals, in certs (deploy/gen-pkinit-certs.sh)."""
    p = subprocess.run(["bash", GEN, certs, realm, *principals],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"gen-pkinit-certs.sh failed: {p.stderr.strip()}")
    return certs


def identity(certs, principal):
    """kinit -X X509_user_identity= value of principal's certificate."""
    stem = os.path.join(certs, principal.replace("/", "_"))
    return f"FILE:{stem}.pem,{stem}.key"


def kdc_relations(certs, require_freshness=False, restrict_anonymous=True):
    """kdc.conf relations of the realm's block: the KDC's identity and the
    anchors it checks client certificates against; anonymous tickets only
    to the realm's TGS (FAST armor), unless restrict_anonymous=False."""
    out = (f"        pkinit_identity = FILE:{certs}/kdc.pem,{certs}/kdc.key\n"
           f"        pkinit_anchors = FILE:{certs}/ca.pem\n")
    if restrict_anonymous:
        out += "        restrict_anonymous_to_tgt = true\n"
    if require_freshness:
        out += "        pkinit_require_freshness = true\n"
    return out


def client_relation(certs):
    """The krb5.conf relation of a client's realm block."""
    return f"        pkinit_anchors = FILE:{certs}/ca.pem\n"


def add_anonymous(kr):
    """WELLKNOWN/ANONYMOUS without keys: anonymous PKINIT replaces the reply
    key, so the principal needs none, and the KDB then holds none (no real
    key to steal, none to deal to the cluster)."""
    kr.kadmin_local(f"addprinc -nokey {ANONYMOUS}")
