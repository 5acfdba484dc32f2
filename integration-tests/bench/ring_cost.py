"""What the MPC ring costs a login, from the servers' own counters, and what a
delay between the server rooms adds to it: arithmetic only, no process.

Counters are storm_bench.mpc_metrics() snapshots ({party: {series: value}},
read with kmpc-mpc-client metrics before and after a known number of
logins). Each server counts what it sent on the ring
(kmpc_ring_bytes_sent_total, kmpc_ring_messages_sent_total: one message per
AND layer of a Run, plus the malicious check's), so a login's ring rounds
are the messages one server sent for it: a round is a message to the
predecessor and the wait for the successor's, so a one-way delay d between
the rooms adds about rounds x d to the login.

ring_delay.py (make bench-netns) and cts_bench.py (make bench-cts) write
these figures; bench_results.py reads them back with results_section() and
prints them with print_delay().
"""

SERIES = {"ring_bytes_per_login": "kmpc_ring_bytes_sent_total",
          "ring_messages_per_login": "kmpc_ring_messages_sent_total",
          "and_rounds_per_login": "kmpc_cts_and_rounds_total",
          "ands_per_login": "kmpc_cts_ands_total",
          "runs_per_login": "kmpc_batches_run_ok_total",
          # The ring's receive waits that spun, slept first, paid a
          # wake-up after their spin, or spun through a peer's delay
          # (--ring_spin_us, --ring_spin_late, --ring_spin_through_us).
          "spinning_waits_per_login": "kmpc_ring_spinning_waits_total",
          "waits_slept_first_per_login": "kmpc_ring_waits_slept_first_total",
          "spins_ran_out_per_login": "kmpc_ring_spins_ran_out_total",
          "waits_spun_through_per_login": "kmpc_ring_waits_spun_through_total"}


def per_server(m0, m1, logins):
    """{"mpc-server-I": {figure: value per login}} for the three servers
    between snapshots m0 and m1 over `logins` logins; None when a snapshot
    is missing or lacks a party, or logins <= 0."""
    if not m0 or not m1 or not logins or logins <= 0:
        return None
    if any(i not in m0 or i not in m1 for i in range(3)):
        return None
    out = {}
    for i in range(3):
        out[f"mpc-server-{i}"] = {
            k: round((m1[i].get(s, 0) - m0[i].get(s, 0)) / logins, 2)
            for k, s in SERIES.items()}
    return out


def mean_of(servers, key):
    """The three servers' mean of one figure of per_server(); None without."""
    if not servers:
        return None
    xs = [v[key] for v in servers.values() if v.get(key) is not None]
    return round(sum(xs) / len(xs), 2) if xs else None


def bytes_row(servers):
    """{"by_server": {name: bytes per login}, "mean", "spread"} of
    per_server(); None without."""
    if not servers:
        return None
    by = {n: v["ring_bytes_per_login"] for n, v in servers.items()}
    return {"by_server": by, "mean": mean_of(servers, "ring_bytes_per_login"),
            "spread": round(max(by.values()) - min(by.values()), 1)}


def login_row(rp):
    """cts_bench's "ring_per_login" (ring_blocks) -> results.json's: per
    kind of login, each server's bytes per login with their mean and
    spread, the mean messages, AND rounds and ANDs per login, and each
    process's CPU ms a login where measured; None when it was not
    measured."""
    if not rp:
        return None
    out = {"logins": rp.get("logins")}
    for who in ("cts", "kdb"):
        srv = rp.get(who)
        out[who] = srv and {"bytes": bytes_row(srv), "failed": rp.get(f"{who}_failed"),
                            **{k: mean_of(srv, k) for k in ("ring_messages_per_login",
                                                            "and_rounds_per_login",
                                                            "ands_per_login")},
                            "cpu_ms_per_login": (rp.get("cpu_ms") or {}).get(who)}
    return out


def login_line(row):
    """The table's line of login_row()."""
    def side(v):
        if not v:
            return "unmeasured"
        b = v["bytes"]
        cpu = v.get("cpu_ms_per_login") or {}
        srv = [f"{x:.1f}" for k, x in sorted(cpu.items()) if k.startswith("mpc-server")]
        return (" / ".join(f"{x:,.0f}" for x in b["by_server"].values())
                + f" bytes (servers 0 / 1 / 2), {fmt(v['ring_messages_per_login'], ',.0f')} "
                f"messages" + (f", {' / '.join(srv)} ms of CPU" if srv else ""))
    return (f"ring per login, each server ({row['logins']} logins a user): aes256-cts user "
            f"{side(row.get('cts'))}; krbtgt-only {side(row.get('kdb'))}")


def delay_summary(points):
    """The delay sweep's figures from its points (ring_delay.measure, in run
    order; each {"label", "via", "delay_ms", "cts": side, "kdb": side,
    "relay": [stats] or None}, a side {"p50_ms", "servers": per_server()}).

    control: the first point at 0 ms through the delaying path (the relay
    at 0 ms, or netem at 0); every delayed point is judged against it:
    added_ms = p50 - control's p50, predicted_added_ms = rounds x delay
    (rounds: the mean ring messages a server sent per login at that point),
    ratio = added / predicted. relay_overhead: the control against "direct"
    (the servers dialling each other), per login and per round. drift: a
    last 0 ms point against the control."""
    ctl = next((p for p in points if p["via"] != "direct" and not p["delay_ms"]), None)
    direct = next((p for p in points if p["via"] == "direct"), None)
    out = {"control": ctl and ctl["label"], "by_delay": []}
    if ctl is None:
        return out
    for who in ("cts", "kdb"):
        base = ctl[who].get("p50_ms")
        rounds = mean_of(ctl[who].get("servers"), "ring_messages_per_login")
        if direct and base is not None and direct[who].get("p50_ms") is not None:
            over = base - direct[who]["p50_ms"]
            out.setdefault("relay_overhead", {})[who] = {
                "ms_per_login": round(over, 2),
                "us_per_round": round(over * 1e3 / rounds, 1) if rounds else None}
        zeros = [p for p in points if p is not ctl and p["via"] == ctl["via"]
                 and not p["delay_ms"] and p[who].get("p50_ms") is not None]
        if zeros and base is not None:
            out.setdefault("drift_ms", {})[who] = round(zeros[-1][who]["p50_ms"] - base, 2)
    for p in points:
        if p["via"] != ctl["via"] or not p["delay_ms"]:
            continue
        row = {"label": p["label"], "delay_ms": p["delay_ms"]}
        for who in ("cts", "kdb"):
            row[who] = delay_row(p[who], ctl[who], p["delay_ms"])
        lat = [r.get("lateness") or {} for r in p.get("relay") or []]
        if lat and all("p50_us" in x for x in lat):
            row["relay_lateness_p50_us"] = [x["p50_us"] for x in lat]
        out["by_delay"].append(row)
    return out


def delay_row(side, ctl, delay_ms):
    """One kind of login at one delay against the control's (delay_summary)."""
    rounds = mean_of(side.get("servers"), "ring_messages_per_login")
    p50, base = side.get("p50_ms"), ctl.get("p50_ms")
    row = {"p50_ms": p50, "failed": side.get("failed"), "rounds": rounds}
    if rounds is None or base is None:
        return row
    row["predicted_added_ms"] = round(rounds * delay_ms, 1)
    row["predicted_p50_ms"] = round(base + rounds * delay_ms, 1)
    if p50 is not None:
        row["added_ms"] = round(p50 - base, 1)
        row["ratio"] = (round(row["added_ms"] / row["predicted_added_ms"], 3)
                        if row["predicted_added_ms"] else None)
    return row


def results_section(sweep):
    """netns.json's "ring_delay" -> results.json's "ring_delay": how the
    delay was made (and by which relay: "c++" or "python"), the logins per
    point, each point's p50 per kind and the summary; None when the sweep
    did not run, {"error"} when it failed."""
    if not sweep:
        return None
    if "error" in sweep:
        return {"error": sweep["error"]}
    return {"via": sweep.get("via"), "relay_impl": sweep.get("relay_impl"),
            "logins_per_point": sweep.get("logins"),
            "points": [{"label": p["label"], "delay_ms": p["delay_ms"],
                        **{f"{w}_p50_ms": p[w].get("p50_ms") for w in ("cts", "kdb")},
                        **{f"{w}_failed": p[w].get("failed") for w in ("cts", "kdb")}}
                       for p in sweep.get("points") or []],
            "summary": sweep.get("summary")}


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def delay_lines(sec):
    """The table's lines of results_section(): each point, then summary_lines()."""
    if not sec:
        return []
    if "error" in sec:
        return [f"ring delay sweep failed: {sec['error'][:200]}"]
    s = sec.get("summary") or {}
    via = f"{sec.get('via')}" + (f", {sec['relay_impl']} relay" if sec.get("relay_impl") else "")
    lines = [f"ring delay between the MPC servers ({via}; Debian's kinit, one "
             f"client, {sec.get('logins_per_point')} logins a point; control {s.get('control')}):"]
    for p in sec.get("points") or []:
        lines.append(f"  {p['label']:16s} aes256-cts user p50 {fmt(p['cts_p50_ms'])} ms "
                     f"(failed {p['cts_failed']}), krbtgt-only p50 {fmt(p['kdb_p50_ms'])} ms "
                     f"(failed {p['kdb_failed']})")
    return lines + summary_lines(s)


def summary_lines(s):
    """delay_summary()'s lines: each delay's added time against the
    prediction, the relay's overhead, the drift."""
    lines = []
    for r in s.get("by_delay") or []:
        lines.append(f"  {r['delay_ms']:g} ms one way: " + "; ".join(
            f"{w} +{fmt(r[w].get('added_ms'))} ms against {fmt(r[w].get('rounds'), '.0f')} "
            f"rounds x {r['delay_ms']:g} = +{fmt(r[w].get('predicted_added_ms'))} ms "
            f"({fmt(r[w].get('ratio'), '.2f')}x)" for w in ("cts", "kdb") if r.get(w)))
    for w, v in (s.get("relay_overhead") or {}).items():
        lines.append(f"  relay at 0 ms against direct, {w}: {fmt(v['ms_per_login'], '+.2f')} ms "
                     f"a login, {fmt(v['us_per_round'], '+.1f')} us a round")
    if s.get("drift_ms"):
        lines.append(f"  0 ms again against the control (drift): {s['drift_ms']} ms")
    return lines


def print_delay(sec, p=print):
    for line in delay_lines(sec):
        p(line)
