"""The standard gRPC health protocol (grpc.health.v1) on each MPC server,
checked with an independent client (Debian's python3-grpcio, mTLS with the
cluster's KDC certificate), the way a load balancer or an orchestrator
would: every server answers SERVING for itself and its two services, an
unknown service is NOT_FOUND, a stopped server is unreachable while the
others keep answering, and a restarted one answers SERVING again.
"""
import time

import grpc  # python3-grpcio (deploy/install-deps.sh)
import pytest

from kmpc_harness import cluster as kmpc_cluster

CHECK = "/grpc.health.v1.Health/Check"
# HealthCheckResponse.status (grpc/health/v1/health.proto): SERVING = 1,
# NOT_SERVING = 2, encoded as field 1, varint.
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"


def health_request(service=""):
    """HealthCheckRequest{service} (field 1, string)."""
    s = service.encode()
    return (b"\x0a" + bytes([len(s)]) + s) if s else b""


def check(cluster, party, service=""):
    c = cluster.certs
    with open(f"{c}/ca.pem", "rb") as f:
        ca = f.read()
    with open(f"{c}/kdc.pem", "rb") as f:
        cert = f.read()
    with open(f"{c}/kdc.key", "rb") as f:
        key = f.read()
    creds = grpc.ssl_channel_credentials(ca, key, cert)
    addr = cluster.addr(party)
    with grpc.secure_channel(addr, creds, options=[
            ("grpc.ssl_target_name_override", f"kmpc-party-{party}")]) as ch:
        call = ch.unary_unary(CHECK, request_serializer=None,
                              response_deserializer=None)
        return call(health_request(service), timeout=5)


def wait_for(pred, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_health_protocol(tmp_path):
    cluster = kmpc_cluster.MpcCluster(str(tmp_path / "mpc"))
    try:
        cluster.start()
        cluster.wait_ring()
        for i in range(3):
            assert wait_for(lambda: check(cluster, i) == SERVING), i
            assert check(cluster, i, "kmpc.v1.KeyOps") == SERVING
            assert check(cluster, i, "kmpc.v1.Admin") == SERVING
        # An unknown service: NOT_FOUND, as the protocol says.
        with pytest.raises(grpc.RpcError) as e:
            check(cluster, 0, "no.such.Service")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # Party 1 stopped: unreachable; the others still serve.
        cluster.stop_party(1)
        with pytest.raises(grpc.RpcError) as e:
            check(cluster, 1)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        for i in (0, 2):
            assert check(cluster, i) == SERVING
        cluster.start_party(1)
        cluster.wait_ring()
        assert wait_for(lambda: check(cluster, 1, "kmpc.v1.KeyOps") == SERVING)
    except Exception:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
