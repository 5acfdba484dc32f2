"""The KeyOps Run requests a kmpc-mpc-server recorded
(--debug_record_requests: "METHOD SIZE\\n" then the serialized request and
"\\n"), read with just enough protobuf wire format (proto/kmpc.proto) to
find each job's public fields and its slice of RunRequest.data_shares
(proto/contract.cc SharedBytes), so that a test that holds all three
servers' recordings can rebuild a dealt value the way no one server can.
"""

JOB_ENCRYPT, JOB_DECRYPT, JOB_CHECKSUM, JOB_VERIFY_CHECKSUM = 1, 2, 3, 4
CTS_CIPHERS = (17, 18)
CF2_HALF = {0: 0, 1: 16, 2: 32}
JOB_FIELDS = {1: "job_id", 2: "key_id", 3: "type", 4: "usage", 5: "length", 6: "data",
              7: "checksum", 8: "release_if_ok", 9: "cipher", 13: "cts_key",
              14: "splice_length", 15: "splice_offset"}


def _varint(buf, at):
    v, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, at


def fields(buf):
    """(field number, value) of a message: int for varints, bytes else."""
    at, out = 0, []
    while at < len(buf):
        key, at = _varint(buf, at)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, at = _varint(buf, at)
        elif wt == 2:
            n, at = _varint(buf, at)
            v, at = buf[at:at + n], at + n
        elif wt == 1:
            v, at = buf[at:at + 8], at + 8
        elif wt == 5:
            v, at = buf[at:at + 4], at + 4
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, v))
    return out


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
        req = {"batch_id": b"", "jobs": [], "data_shares": b""}
        for num, v in fields(body):
            if num == 1:
                req["batch_id"] = v
            elif num == 2:
                req["jobs"].append({JOB_FIELDS[k]: x for k, x in fields(v) if k in JOB_FIELDS})
            elif num == 4:
                req["data_shares"] = v
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
