"""The KeyOps Run requests a kmpc-mpc-server recorded
(--debug_record_requests: "METHOD SIZE\\n" then the serialized request and
"\\n"), decoded with Python classes protoc generates from proto/kmpc.proto
(kmpc_harness.proto), to find each job's public fields and its slice of
RunRequest.data_shares (proto/contract.cc SharedBytes), so that a test
that holds all three servers' recordings can rebuild a dealt value the way
no one server can.
"""
from kmpc_harness.proto import kmpc_pb2

pb = kmpc_pb2()
JOB_ENCRYPT, JOB_DECRYPT = pb.JOB_ENCRYPT, pb.JOB_DECRYPT
JOB_CHECKSUM, JOB_VERIFY_CHECKSUM = pb.JOB_CHECKSUM, pb.JOB_VERIFY_CHECKSUM
CTS_CIPHERS = (pb.CIPHER_AES128_CTS, pb.CIPHER_AES256_CTS)
# Bytes of the dealt KRB-FX-CF2 half an aes*-cts job carries, by Job.cts_key.
CF2_HALF = {pb.CTS_KEY_DEALT: 0, pb.CTS_KEY_CF2_AES128: 16, pb.CTS_KEY_CF2_AES256: 32}


def shared_bytes(job):
    """Bytes of each share job takes in data_shares (contract::SharedBytes)."""
    t, n = job.get("type", 0), job.get("length", 0)
    if job.get("cipher", 0) in CTS_CIPHERS:
        keyed = t in (JOB_ENCRYPT, JOB_DECRYPT)
        half = CF2_HALF.get(job.get("cts_key", 0), 0) if keyed else 0
        spliced = job.get("splice_length", 0) if t == JOB_ENCRYPT else 0
        return half + (n if keyed or t == JOB_CHECKSUM else 0) + spliced
    return {JOB_CHECKSUM: n, JOB_VERIFY_CHECKSUM: n + 16}.get(t, 0)


def runs(path):
    """Each recorded Run request: {"batch_id", "jobs": [dict of the job's
    fields, with "shares": (s_i, s_i+1) its slice]}."""
    with open(path, "rb") as f:
        data = f.read()
    at, out = 0, []
    while at < len(data):
        nl = data.index(b"\n", at)
        method, size = data[at:nl].decode().split(" ")
        body = data[nl + 1:nl + 1 + int(size)]
        at = nl + 1 + int(size) + 1
        if method != "Run":
            continue
        msg = pb.RunRequest.FromString(body)
        # Each job as {field name: value} of the fields it sets (proto3:
        # an absent field reads as its default, as job.get(name, 0) does).
        req = {"batch_id": msg.batch_id, "data_shares": msg.data_shares,
               "jobs": [{f.name: v for f, v in job.ListFields()} for job in msg.jobs]}
        pos = 0
        for job in req["jobs"]:
            n = shared_bytes(job)
            job["shares"] = (req["data_shares"][pos:pos + n],
                             req["data_shares"][pos + n:pos + 2 * n])
            pos += 2 * n
        out.append(req)
    return out


def dealt_values(paths, want):
    """The values dealt for the jobs for which want(job) holds, rebuilt
    from the three servers' recordings (party i holds s_i, s_i+1) of one
    Run each: [(job, s_0 ^ s_1 ^ s_2)]. Asserts that the copies of each
    share two servers received agree (the recordings were read right)."""
    by_batch = [{r["batch_id"]: r for r in runs(p)} for p in paths]
    out = []
    for batch_id, r0 in by_batch[0].items():
        rs = [r0] + [by_batch[i].get(batch_id) for i in (1, 2)]
        if None in rs:
            continue
        for k, job in enumerate(r0["jobs"]):
            if not want(job):
                continue
            sh = [r["jobs"][k]["shares"] for r in rs]
            for i in range(3):
                assert sh[i][1] == sh[(i + 1) % 3][0], "the recorded share copies disagree"
            value = bytes(a ^ b ^ c for a, b, c in zip(sh[0][0], sh[1][0], sh[2][0]))
            out.append((job, value))
    return out
