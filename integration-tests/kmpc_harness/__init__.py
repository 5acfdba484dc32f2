"""kmpc's test harness: real daemons on loopback or in network namespaces.

  realm     a throwaway realm of the patched krb5 (Realm, RealmError, ports)
  cluster   three MPC servers (MpcCluster), the kmpc realm's command line
  kmpc_realm  the kmpc realm on those servers (KmpcRealm: the realm class
            every test, benchmark and the demo uses; bring_up)
  replica   primary and replica KDCs (kprop, iprop) on one cluster
  tickets   tickets in a client's ccache (credentials, a tampered TGT)
  ldap      a slapd of its own per realm (the LDAP KDB back end)
  netns     emulated hosts: network namespaces on one bridge
  packages  the Debian packages installed on emulated hosts
  heimdal   Debian's Heimdal clients, unpacked under build/heimdal (not
            installed)
  deploy_tool  deploy/kmpc_deploy.py, the administrator's tool, as a module
  storm_users  a storm's users, keytabs and kmpc-storm binary (the harness
            and the benchmarks share it; the harness imports no bench module)
  proto     Python classes of proto/kmpc.proto (protoc, into build/pyproto)
  pkinit    PKINIT certificates (deploy/gen-pkinit-certs.sh), their kdc.conf
            and krb5.conf relations, the anonymous principal

conftest.py puts integration-tests/ on sys.path; scripts outside it (the
benchmarks, demo.py) do the same before importing.
"""
