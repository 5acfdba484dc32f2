#!/usr/bin/env python3
"""The login-storm benchmark's results (make bench, last step).

Reads what the earlier steps wrote into build/bench:
  storm.json  integration-tests/bench/storm_bench.py --target stock,kmpc (headline and
              default settings: peak sustained rate, latency, CPU, MPC cost)
  soak.json   integration-tests/bench/storm_soak.py (soaks at 90% of kmpc's peak, each
              judged on errors and on anonymous memory read from /proc;
              kmpc's one-client latency with the 100 ms window and with
              early flush)
  netns.json  integration-tests/bench/netns_bench.py (the same realm across network
              namespaces), optional
  mpc.json    integration-tests/bench/bench-mpc.sh (MPC micro-benchmark), optional
  cts.json    integration-tests/bench/cts_bench.py (users with MPC-held aes256-cts
              keys: Debian's kinit, one client, with and without FAST; their
              storm against the krbtgt-only storm; both modes), optional
  tgs.json    integration-tests/bench/tgs_bench.py (TGS to a service whose
              aes256-cts key the cluster holds: Debian's kvno, one client;
              Runs, ANDs, AND rounds and each server's CPU per TGS; the
              login+TGS mix; both modes), optional
  pkinit.json integration-tests/bench/pkinit_bench.py (certificate, anonymous
              and anonymously armored password logins with Debian's kinit,
              one client, stock MIT's KDC beside kmpc; the module's Runs
              per login), optional
and writes build/bench/results.json:
  {"kmpc":  {"peak_logins_per_s", "p50_ms_one_client", "p99_ms_at_90pct",
             "errors", ...},
   "stock": {"peak_logins_per_s", "p50_ms_one_client", ...},
   "ratio": kmpc / stock peak (headline pair: disable_last_success and
            disable_lockout on for both),
   "default_settings": {"kmpc": ..., "stock": ..., "ratio": ...},
   "mix": {"kmpc": {"ops_per_s", "failed", "by_op", ...}, "stock": ...,
           "ratio": ...} (login + TGS + renewal + forwarding, headline),
   "soak": ..., "netns": ..., "ring_delay": ... (netns.json's ring delay
   sweep: ring_cost.results_section), "mpc_microbench": ..., "targets": [...]}
and prints the table.  Exit status 0 whether or not targets are met (the
table says which were missed); 2 when storm.json lacks a stock or kmpc run.

With --cts-rows only cts.json is read: its section of the table and its
target rows are printed, nothing is written (make bench-cts).

Usage: bench_results.py [--dir build/bench] [--out FILE] [--cts-rows]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench import ring_cost  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(HERE))  # integration-tests/bench -> the repository
BUILD = os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build"))

# The issue's targets.
TARGET_RATIO = 0.60          # kmpc peak >= 60% of stock, zero errors
TARGET_P50_EARLY_MS = 5.0    # one client, early flush
TARGET_P99_90PCT_MS = 250.0  # at 90% of peak, 100 ms window
TARGET_MALICIOUS_RATIO = 0.50  # issue 25: malicious kmpc peak / semi-honest kmpc peak
TARGET_MALICIOUS_MPC_RATIO = 0.25  # issue 25: malicious / semi-honest AES-128 blocks/s
# Issue 24 (default configuration, PACs on, semi-honest): one client's
# exchanges, the mix at 16 clients against stock, KDC CPU per login.
TARGET_ONE_LOGIN_MS = 4.0
TARGET_ONE_TGS_MS = 3.0
TARGET_ONE_RENEW_MS = 3.0
TARGET_MIX_RATIO = 0.5
TARGET_KDC_CPU_RATIO = 1.3
# Runs per exchange, by the KDC module's own count, for each of these kinds
# in the mix at 16 clients (kmpc_kdc_exchange_runs_total /
# kmpc_kdc_exchanges_total).
TARGET_RUNS_PER_EXCHANGE = 1
RUNS_KINDS = ("as", "tgs", "renew", "forward")
# Issue 39: users whose aes256-cts key the cluster holds, Debian's kinit,
# one client, p50 (ms) by server mode, without and with FAST (kinit -T);
# their storm's peak against the krbtgt-only storm's, same mode.
TARGET_CTS_P50_MS = {"semi-honest": 150.0, "malicious": 200.0}
TARGET_CTS_FAST_P50_MS = {"semi-honest": 250.0, "malicious": 300.0}
TARGET_CTS_STORM_RATIO = 0.5
# Issue 48: the directory-like realm's closed-loop storm (cts_realm.py)
# against the same realm's uniform names: logins/s ratio, no failed
# login, Runs per login.
TARGET_REALM_RATIO = 0.9
TARGET_REALM_RUNS_PER_LOGIN = 1.05
# Issue 48 item 7 and its one-client bound: each MPC server's CPU per
# aes*-cts login at the cts storm's peak sustained rate (/proc, the
# busiest of the three), and Debian's kinit p50 with malicious servers.
TARGET_CTS_SERVER_CPU_US_AT_PEAK = {"malicious": 600.0, "semi-honest": 300.0}
TARGET_CTS_P50_MS_ISSUE48 = {"malicious": 100.0}
# Issue 50: a TGS to a service whose aes*-cts key the cluster holds,
# Debian's kvno, one client; the TGT's Run and the ticket's.
TARGET_TGS_P50_MS = {"malicious": 150.0, "semi-honest": 120.0}
TARGET_TGS_RUNS = 2
# A closed-loop login+TGS storm (64 logins in flight) whose TGS goes to a
# service under an aes*-cts handle, against the same storm to a service
# under an aes*-ctr-mpc handle: ops/s ratio, same realm and run, every
# server mode.
TARGET_LOGIN_TGS_RATIO = 0.6
TGS_MODES = ("malicious", "rep3", "semi-honest")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def r(x, nd=3):
    return None if x is None else round(x, nd)


def side(sec):
    """One target/settings section of storm.json -> the results' figures."""
    one = sec.get("one_client", {})
    a50 = sec.get("at_50pct_of_peak", {})
    a90 = sec.get("at_90pct_of_peak", {})
    peak = sec.get("peak_sustained") or {}
    errors = sum((p or {}).get("failed", 0) + (p or {}).get("dropped", 0)
                 for p in (peak, a50, a90))
    cpu_peak = {n: r(c["us_per_login"], 1) for n, c in (peak.get("cpu") or {}).items()}
    cpu_sat = {n: r(v, 1) for n, v in (sec.get("cpu_us_per_login") or {}).items()}
    # The highest swept rate that held with p99 <= 250 ms (the issue's p99
    # target), nothing failed, dropped or retransmitted: a stricter peak.
    strict = [row for row in sec.get("sweep", [])
              if not int(row.get("superseded", 0)) and int(row.get("failed", 1)) == 0
              and int(row.get("dropped", 1)) == 0 and int(row.get("retransmits", 1)) == 0
              and float(row.get("p99_ms", 1e9)) <= TARGET_P99_90PCT_MS
              and float(row.get("achieved", 0)) >= 0.95 * float(row.get("offered", 0))]
    out = {
        "peak_logins_per_s": r(sec.get("peak_logins_per_s"), 1),
        "peak_logins_per_s_p99_le_250ms": r(max((float(x["achieved"]) for x in strict),
                                                default=None), 1),
        "peak_offered": peak.get("offered"),
        "closed_loop_logins_per_s": r((sec.get("saturation_closed_loop") or {})
                                      .get("logins_per_s"), 1),
        "p50_ms_one_client": r(one.get("p50_ms")),
        "p99_ms_one_client": r(one.get("p99_ms")),
        "p50_ms_at_50pct": r(a50.get("p50_ms")), "p99_ms_at_50pct": r(a50.get("p99_ms")),
        "p50_ms_at_90pct": r(a90.get("p50_ms")), "p90_ms_at_90pct": r(a90.get("p90_ms")),
        # CPU the hypervisor gave elsewhere during the 90% point (/proc/stat
        # steal): a host busy with other guests, not this benchmark.
        "steal_cores_at_90pct": r(a90.get("machine_steal_cores"), 3),
        "p99_ms_at_90pct": r(a90.get("p99_ms")),
        "sustained_at_50pct": a50.get("sustained"), "sustained_at_90pct": a90.get("sustained"),
        "errors": errors,
        "errors_note": "failed + dropped logins at the peak, 50% and 90% points",
        # CPU seconds per login of every process, as microseconds.
        "cpu_us_per_login_at_peak": cpu_peak,
        "cpu_us_per_login_at_saturation": cpu_sat,
        "server_side_cpu_us_per_login_at_peak": r(sum(
            v for n, v in cpu_peak.items() if n != "kmpc-storm"), 1) if cpu_peak else None,
        "mpc_per_login": sec.get("mpc_per_login"),
        "generator_bottleneck": sec.get("generator_bottleneck"),
        "p99_bound_ms_for_sustained": sec.get("p99_bound_ms"),
    }
    return out


def mix_side(m):
    """The operation mix (storm_bench.py's mix_closed_loop) of one target."""
    if not m:
        return None
    return {"ops": m.get("ops"), "concurrency": m.get("concurrency"),
            "ops_per_s": r(m.get("ops_per_s"), 1), "p50_ms": r(m.get("p50_ms")),
            "p99_ms": r(m.get("p99_ms")), "failed": m.get("failed"),
            "by_op": m.get("by_op"),
            **({"runs_per_exchange": m["runs_per_exchange"]} if m.get("runs_per_exchange")
               else {})}


def build(bench_dir):
    storm = load(os.path.join(bench_dir, "storm.json")) or {}
    soak = load(os.path.join(bench_dir, "soak.json"))
    netns = load(os.path.join(bench_dir, "netns.json"))
    mpc = load(os.path.join(bench_dir, "mpc.json"))
    if "kmpc" not in storm or "stock" not in storm:
        raise SystemExit(f"bench_results: {bench_dir}/storm.json needs both a stock and a "
                         f"kmpc run (integration-tests/bench/storm_bench.py --target stock,kmpc)")
    res = {"generated_from": {k: os.path.exists(os.path.join(bench_dir, k + ".json"))
                              for k in ("storm", "soak", "netns", "mpc")},
           "machine": storm["kmpc"].get("machine"),
           "note": ("one shared, loaded 2-core machine: KDC, three MPC servers and the "
                    "load generator on the same cores; compare figures within one run")}
    pairs = {}
    for s in ("headline", "default"):
        k = storm["kmpc"]["settings"].get(s)
        st = storm["stock"]["settings"].get(s)
        if not k or not st:
            continue
        pk, ps = side(k), side(st)
        after = st.get("repeat_after")
        if after:
            # A-B-A (storm_bench.py --bracket): stock's sweep right before
            # and right after kmpc's; the shared VM's speed drifts between
            # sweeps, so the ratio is taken against the mean of the two.
            pa = side(after)
            for key in ("peak_logins_per_s", "peak_logins_per_s_p99_le_250ms"):
                two = [x for x in (ps[key], pa[key]) if x]
                ps[key + "_before_kmpc"], ps[key + "_after_kmpc"] = ps[key], pa[key]
                ps[key] = r(sum(two) / len(two), 1) if two else None
            ps["bracket_note"] = ("peak_logins_per_s is the mean of the sweeps right before "
                                  "and right after kmpc's (*_before_kmpc, *_after_kmpc)")
        def ratio(key, stock_key=None):
            a, b = pk[key], ps[stock_key or key]
            return r(a / b) if a is not None and b else None

        pairs[s] = {"kmpc": pk, "stock": ps, "ratio": ratio("peak_logins_per_s"),
                    "ratio_at_p99_le_250ms": ratio("peak_logins_per_s_p99_le_250ms")}
        if after:
            for when in ("before", "after"):
                pairs[s][f"ratio_vs_stock_{when}"] = ratio(
                    "peak_logins_per_s", f"peak_logins_per_s_{when}_kmpc")
    if "headline" not in pairs:
        raise SystemExit("bench_results: storm.json has no headline pair")
    h = pairs["headline"]
    res["settings"] = ("headline: disable_last_success = true, disable_lockout = true "
                       "([dbmodules]) for both; kmpc module batch_window_ms = 100, "
                       "early_flush off")
    res["kmpc"], res["stock"], res["ratio"] = h["kmpc"], h["stock"], h["ratio"]
    res["ratio_at_p99_le_250ms"] = h["ratio_at_p99_le_250ms"]
    for key in ("ratio_vs_stock_before", "ratio_vs_stock_after"):
        if key in h:
            res[key] = h[key]
    res["peak_definition"] = (
        "peak_logins_per_s: the highest open-loop rate sustained in the sweep: every due "
        "login done, none failed or dropped, retransmits <= 0.1%, p99 within the target's "
        "bound (stock 100 ms; kmpc 500 ms, twice its 2-batch design latency) and achieved "
        ">= 97% of offered (stock: over the completion span; kmpc: completed / duration). "
        "peak_logins_per_s_p99_le_250ms: the highest swept rate with p99 <= 250 ms and no "
        "failure, drop or retransmit")
    # The operation mixes (storm_bench.py): at 16 clients ("mix"), 64 and 1.
    for key, out_key in (("mix_closed_loop", "mix"), ("mix_closed_loop_64", None),
                         ("mix_one_client", None)):
        mk = storm["kmpc"]["settings"]["headline"].get(key)
        ms = storm["stock"]["settings"]["headline"].get(key)
        if mk or ms:
            res[out_key or key] = {"kmpc": mix_side(mk), "stock": mix_side(ms),
                                   "ratio": (r(mk["ops_per_s"] / ms["ops_per_s"])
                                             if mk and ms and ms.get("ops_per_s") else None)}
    per_exchange = storm["kmpc"]["settings"]["headline"].get("mpc_requests_per_exchange")
    if per_exchange:
        res["mpc_requests_per_exchange"] = per_exchange
    if "default" in pairs:
        res["default_settings"] = pairs["default"]
    if soak:
        ef = soak.get("one_client_early_flush") or {}
        w = soak.get("one_client_window_100ms") or {}
        res["kmpc"]["p50_ms_one_client_early_flush"] = r(ef.get("p50_ms"))
        res["kmpc"]["p99_ms_one_client_early_flush"] = r(ef.get("p99_ms"))
        res["kmpc"]["p50_ms_one_client_window_100ms_soak_run"] = r(w.get("p50_ms"))
        if soak.get("early_flush_at_50pct_of_peak"):
            res["kmpc"]["early_flush_at_50pct_of_peak"] = soak["early_flush_at_50pct_of_peak"]
        for key in ("breakdown_one_client_early_flush", "breakdown_90pct_window_100ms"):
            if soak.get(key):
                res["kmpc"][key] = soak[key]
        so = dict(soak.get("soak") or {})
        so.pop("rss_samples", None)  # per-second samples stay in soak.json
        so.pop("heap_samples", None)
        so["per_run"] = [soak_row(x) for x in soak.get("soaks") or []]
        res["soak"] = so
    if netns:
        res["netns"] = {k: v for k, v in netns.items()}
        res["ring_delay"] = ring_cost.results_section(netns.get("ring_delay"))
    if mpc:
        def figures(security):
            # Records from before the security modes carry no "security":
            # they were semi-honest.
            mine = [x for x in mpc if x.get("security", "semi-honest") == security
                    and x.get("cipher") == "aes128"]
            big = [x for x in mine if x.get("blocks") == 100000]
            one = [x for x in mine if x.get("blocks") == 1]
            return {
                "aes128_100k_blocks_per_s_best": max((x["blocks_per_s"] for x in big),
                                                     default=None),
                "aes128_bytes_per_block_per_party": min(
                    (x["bytes_per_block_per_party"] for x in big), default=None),
                "aes128_single_block_p50_ms": min((x["latency_p50_ms"] for x in one),
                                                  default=None),
            }
        mb = figures("semi-honest")
        mal = figures("malicious")
        if any(v is not None for v in mal.values()):
            a, b = mal["aes128_100k_blocks_per_s_best"], mb["aes128_100k_blocks_per_s_best"]
            c, d = mal["aes128_single_block_p50_ms"], mb["aes128_single_block_p50_ms"]
            mal["ratio_100k_blocks_per_s"] = r(a / b) if a and b else None
            mal["ratio_single_block_p50"] = r(c / d, 2) if c and d else None
            mb["malicious"] = mal
        res["mpc_microbench"] = mb
    ks = storm.get("kmpc-malicious", {}).get("settings", {}).get("headline")
    if ks:
        # The same login storm with the servers in --security=malicious,
        # same run (storm_bench.py's kmpc-malicious target, the same sweep as kmpc's).
        pm = side(ks)
        base = res["kmpc"]["peak_logins_per_s"]
        res["kmpc_malicious"] = pm
        res["ratio_malicious_to_kmpc"] = (r(pm["peak_logins_per_s"] / base)
                                          if pm["peak_logins_per_s"] is not None and base
                                          else None)
    cts = load(os.path.join(bench_dir, "cts.json"))
    if cts:
        res["cts"] = cts_side(cts)
        res["generated_from"]["cts"] = True
    tgs = load(os.path.join(bench_dir, "tgs.json"))
    if tgs:
        res["tgs"] = tgs_side(tgs)
        res["generated_from"]["tgs"] = True
    pk = load(os.path.join(bench_dir, "pkinit.json"))
    if pk:
        res["pkinit"] = pkinit_side(pk)
        res["generated_from"]["pkinit"] = True
    res["targets"] = targets(res)
    return res


def cts_side(cts):
    """cts.json (cts_bench.py) -> results' "cts": per mode, the one-client
    figures with and without FAST, ANDs and AND rounds per login, the two
    storms' peaks and their ratio."""
    out = {"when": cts.get("when"), "machine": cts.get("machine"), "modes": {}}
    for mode, m in (cts.get("modes") or {}).items():
        if "error" in m:
            out["modes"][mode] = {"error": m["error"]}
            continue
        one = m.get("one_client") or {}
        st = m.get("storm") or {}
        peak = {k: (st.get(k) or {}).get("peak_logins_per_s") for k in ("cts", "kdb")}
        cts_peak = (st.get("cts") or {}).get("peak_sustained") or {}
        out["modes"][mode] = {
            "one_client_p50_ms": (one.get("cts") or {}).get("p50_ms"),
            "one_client_p99_ms": (one.get("cts") or {}).get("p99_ms"),
            "one_client_failed": (one.get("cts") or {}).get("failed"),
            "krbtgt_only_one_client_p50_ms": (one.get("kdb") or {}).get("p50_ms"),
            "fast_p50_ms": (one.get("fast") or {}).get("p50_ms"),
            "fast_p99_ms": (one.get("fast") or {}).get("p99_ms"),
            "fast_failed": (one.get("fast") or {}).get("failed"),
            "fast_errors": (one.get("fast") or {}).get("errors"),
            "cold_first_login": one.get("cold_first_login"),
            "ands_per_login": one.get("ands_per_login"),
            "and_rounds_per_login": one.get("and_rounds_per_login"),
            "ring_per_login": ring_cost.login_row(one.get("ring_per_login")),
            "storm_peak_logins_per_s": peak["cts"],
            "krbtgt_only_storm_peak_logins_per_s": peak["kdb"],
            "storm_ratio": st.get("ratio_cts_to_krbtgt_only"),
            "storm_cpu_us_per_login": (st.get("cts") or {}).get("cpu_us_per_login"),
            "storm_cpu_us_per_login_at_peak": cpu_at_peak(cts_peak),
            "storm_logins_per_run_at_peak": (cts_peak.get("mpc") or {}).get(
                "logins_per_run_batch"),
            "krbtgt_only_storm_cpu_us_per_login": (st.get("kdb") or {}).get("cpu_us_per_login"),
            "realm": realm_side(m.get("realm")),
            "loadavg": [m.get("loadavg_before"), m.get("loadavg_after")],
        }
    return out


def cpu_at_peak(peak):
    """A storm section's peak sustained point ({} without one) ->
    {process: us per login}, or None."""
    cpu = peak.get("cpu")
    if not cpu:
        return None
    return {n: round(c["us_per_login"], 1) for n, c in cpu.items()}


def spread_ms(us):
    """Microsecond figures -> "a-b ms" (or "a ms" when they round alike)."""
    lo, hi = f"{min(us) / 1000:.2f}", f"{max(us) / 1000:.2f}"
    return f"{lo} ms" if lo == hi else f"{lo}-{hi} ms"


def server_cpu_target(mode, m):
    """Issue 48 item 7: the busiest MPC server's CPU per cts login at the
    cts storm's peak sustained rate."""
    bound = TARGET_CTS_SERVER_CPU_US_AT_PEAK[mode]
    cpu = m.get("storm_cpu_us_per_login_at_peak") or {}
    servers = {n: v for n, v in cpu.items() if n.startswith("mpc-server")}
    worst = max(servers.values()) if servers else None
    what = (f"each MPC server's CPU per aes256-cts login at the cts storm's peak "
            f"<= {bound / 1000:g} ms ({mode} servers)")
    if worst is None:
        return {"what": what, "measured": "not measured", "met": False,
                "miss_by": "not measured"}
    peak, per_run = m.get("storm_peak_logins_per_s"), m.get("storm_logins_per_run_at_peak")
    return {
        "what": what,
        "measured": (spread_ms(servers.values()) + " at "
                     f"{fmt(peak, '.0f')} logins/s ({fmt(per_run, '.0f')} logins per Run)"),
        "met": worst <= bound,
        "miss_by": None if worst <= bound else f"{(worst - bound) / 1000:.2f} ms",
    }


def realm_side(rl):
    """cts.json's directory-like realm of one mode -> its figures: per
    population logins/s, failed, Runs per 1,000 logins, compiles, distinct
    shapes, CPU per login; the ratio; the one-at-a-time samples."""
    if not rl:
        return None
    keep = ("users", "name_lengths", "logins_per_s", "failed_logins", "runs_per_1000_logins",
            "program_cache", "shapes", "cpu_ms_per_login", "heimdal")
    return {**{p: {k: (rl.get(p) or {}).get(k) for k in keep} for p in ("varied", "uniform")},
            "ratio_varied_to_uniform": rl.get("ratio_varied_to_uniform"),
            "samples": rl.get("samples")}


def realm_target(mode, rl):
    """Issue 48's row: the directory-like realm's storm against uniform
    names, zero failed logins, Runs per login."""
    v = (rl or {}).get("varied") or {}
    q = (rl or {}).get("ratio_varied_to_uniform")
    rpl = (v["runs_per_1000_logins"] / 1000 if v.get("runs_per_1000_logins") is not None
           else None)
    met = bool(q is not None and q >= TARGET_REALM_RATIO and v.get("failed_logins") == 0
               and rpl is not None and rpl <= TARGET_REALM_RUNS_PER_LOGIN)
    return {
        "what": (f"aes256-cts users named as in a directory ({mode} servers): closed-loop "
                 f">= {TARGET_REALM_RATIO:g}x the logins/s of uniform names, 0 failed, "
                 f"<= {TARGET_REALM_RUNS_PER_LOGIN:g} Runs per login"),
        "measured": ("not measured" if q is None else
                     f"{v.get('logins_per_s')} vs {rl['uniform'].get('logins_per_s')} logins/s "
                     f"= {q:.3f}; {v.get('failed_logins')} failed; {rpl} Runs per login"),
        "met": met,
        "miss_by": None if met else ("not measured" if q is None else
                                     f"ratio {q:.3f}, failed {v.get('failed_logins')}, "
                                     f"Runs per login {rpl}"),
    }


def cts_targets(res):
    """Issue 39's rows and issue 48's realm row, per mode (malicious
    first: the default)."""
    modes = (res.get("cts") or {}).get("modes") or {}
    out = []
    for mode in ("malicious", "semi-honest"):
        m = modes.get(mode) or {}
        if m.get("realm"):
            out.append(realm_target(mode, m["realm"]))
        err = m.get("error")
        what = f"aes256-cts user, Debian's kinit, one client ({mode} servers)"
        for key, bound, label in (("one_client_p50_ms", TARGET_CTS_P50_MS[mode], "p50"),
                                  ("fast_p50_ms", TARGET_CTS_FAST_P50_MS[mode],
                                   "p50 with FAST (kinit -T)")):
            v = m.get(key)
            row = bound_row(f"{what}: {label} <= {bound:g} ms", v, bound, ".1f",
                            "not measured" + (f" ({err[:120]})" if err else ""))
            if key == "one_client_p50_ms" and v is not None:
                row["measured"] += (f" (p99 {fmt(m.get('one_client_p99_ms'), '.1f')} ms; "
                                    f"{fmt(m.get('ands_per_login'), ',.0f')} ANDs, "
                                    f"{fmt(m.get('and_rounds_per_login'), ',.0f')} AND rounds "
                                    f"per login; krbtgt-only user "
                                    f"{fmt(m.get('krbtgt_only_one_client_p50_ms'), '.1f')} ms)")
            if key == "fast_p50_ms" and v is None and m.get("fast_failed"):
                row["measured"] = (f"no FAST login: {m['fast_failed']} failed ("
                                   + "; ".join((m.get("fast_errors") or [])[:1])[-160:] + ")")
            out.append(row)
        if mode in TARGET_CTS_P50_MS_ISSUE48:
            bound = TARGET_CTS_P50_MS_ISSUE48[mode]
            out.append(bound_row(f"{what}: p50 <= {bound:g} ms (issue 48)",
                                 m.get("one_client_p50_ms"), bound, ".1f", "not measured"))
        if m.get("storm_peak_logins_per_s") is not None or err:
            out.append(server_cpu_target(mode, m))
        q = m.get("storm_ratio")
        out.append({
            "what": (f"aes256-cts users' storm peak >= {TARGET_CTS_STORM_RATIO:g}x the "
                     f"krbtgt-only storm's ({mode} servers, same realm)"),
            "measured": ("not measured" if q is None else
                         f"{m['storm_peak_logins_per_s']:.0f} vs "
                         f"{m['krbtgt_only_storm_peak_logins_per_s']:.0f} logins/s = {q:.3f}"),
            "met": bool(q is not None and q >= TARGET_CTS_STORM_RATIO),
            "miss_by": (None if q is not None and q >= TARGET_CTS_STORM_RATIO
                        else "not measured" if q is None
                        else f"{TARGET_CTS_STORM_RATIO - q:.3f} of the krbtgt-only peak"),
        })
    return out


def tgs_side(tgs):
    """tgs.json (tgs_bench.py) -> results' "tgs": per mode, Debian's kvno
    to the cts service and to the KDB one (p50/p99), the cold tickets, Runs,
    ANDs, AND rounds and CPU per TGS, the mix's figures, the login+TGS
    storm's to the cts and the ctr-mpc service."""
    out = {"when": tgs.get("when"), "machine": tgs.get("machine"), "modes": {}}
    for mode, m in (tgs.get("modes") or {}).items():
        if "error" in m:
            out["modes"][mode] = {"error": m["error"]}
            continue
        one = m.get("one_client") or {}
        cts, kdb, per = one.get("cts") or {}, one.get("kdb") or {}, one.get("per_tgs") or {}
        mx = m.get("mix") or {}
        lt = m.get("login_tgs") or {}
        out["modes"][mode] = {
            "one_client_p50_ms": cts.get("p50_ms"), "one_client_p99_ms": cts.get("p99_ms"),
            "one_client_n": cts.get("n"), "one_client_failed": cts.get("failed"),
            "one_client_errors": cts.get("errors"),
            "kdb_service_p50_ms": kdb.get("p50_ms"), "kdb_service_p99_ms": kdb.get("p99_ms"),
            "cold_first_tickets_ms": [c.get("ms") for c in one.get("cold_first_tickets") or []],
            "heimdal_kgetcred": one.get("heimdal_kgetcred"),
            **{k: per.get(k) for k in ("tgs_exchanges", "runs_per_tgs", "server_runs",
                                       "module_runs_per_tgs", "servers_disagreed_on_runs",
                                       "ands_per_tgs", "and_rounds_per_tgs",
                                       "cpu_ms_per_tgs")},
            "us_per_and_round": one.get("us_per_and_round"),
            "mix": {w: {k: (mx.get(w) or {}).get(k) for k in (
                "ops_per_s", "failed", "step_p50_ms", "cpu_us_per_op", "server_runs_per_op",
                "runs_per_exchange", "module_errors", "batches")}
                for w in ("cts", "kdb") if mx.get(w)}
            or None,
            "mix_warm_up": mx.get("warm_up"),
            "mix_ratio_cts_to_kdb": mx.get("ratio_cts_to_kdb_ops"),
            "mix_extra_cpu_us_per_cts_tgs": mx.get("extra_cpu_us_per_cts_tgs"),
            "login_tgs": {w: {k: (lt.get(w) or {}).get(k) for k in (
                "service", "ops_per_s", "p50_ms", "p99_ms", "failed", "cpu_us_per_op",
                "server_runs_per_op", "runs_per_exchange", "module_errors", "batches")}
                for w in ("cts", "ctr") if lt.get(w)}
            or None,
            "login_tgs_ratio_cts_to_ctr": lt.get("ratio_cts_to_ctr_ops"),
            "loadavg": [m.get("loadavg_before"), m.get("loadavg_after")],
        }
    return out


PKINIT_KINDS = {"certificate": "certificate (kinit -X)",
                "anonymous": "anonymous PKINIT (kinit -n)",
                "armored_password": "password, anonymous armor (kinit -T)"}


def pkinit_side(pk):
    """pkinit.json (pkinit_bench.py) -> results' "pkinit": per login kind,
    stock's and kmpc's p50/p99/min/max and failures, kmpc/stock at p50,
    the module's Runs per kmpc login."""
    out = {k: pk.get(k) for k in ("when", "machine", "logins", "servers", "error")
           if pk.get(k) is not None}
    out["kinds"] = {}
    for kind, sec in (pk.get("kinds") or {}).items():
        row = {side: {k: (sec.get(side) or {}).get(k) for k in (
            "n", "p50_ms", "p99_ms", "min_ms", "max_ms", "failed")} for side in ("stock", "kmpc")}
        runs = sec.get("kmpc_runs") or {}
        row.update({"ratio_p50": sec.get("ratio_p50"),
                    "cold_ms": {side: (c or {}).get("ms")
                                for side, c in (sec.get("cold") or {}).items()},
                    "kmpc_runs_per_login": runs.get("runs_per_login"),
                    "kmpc_runs_distribution": runs.get("runs_distribution"),
                    "kmpc_runs_expected": runs.get("expected_runs"),
                    "kmpc_runs_as_expected": runs.get("as_expected")})
        out["kinds"][kind] = row
    return out


def print_pkinit(res):
    """pkinit.json's lines of the table: per login kind a stock row and a
    kmpc row (ms), kmpc's with its ratio at p50 and the module's Runs."""
    pk = res.get("pkinit")
    if not pk:
        return
    print(f"PKINIT, Debian's kinit, one client, {pk.get('logins')} logins each, stock MIT "
          f"beside kmpc ({pk.get('servers')} servers) (pkinit.json):")
    if pk.get("error"):
        print(f"  failed: {pk['error'][:300]}")
    print(f"  {'login':38s} {'':5s} {'p50':>7s} {'p99':>7s} {'min':>7s} {'max':>7s} "
          f"{'failed':>6s}")
    for kind, m in (pk.get("kinds") or {}).items():
        for side in ("stock", "kmpc"):
            v = m[side]
            line = (f"  {PKINIT_KINDS.get(kind, kind) if side == 'stock' else '':38s} "
                    f"{side:5s} " + " ".join(f"{fmt(v[k], '.1f'):>7s}" for k in (
                        "p50_ms", "p99_ms", "min_ms", "max_ms")) + f" {v['failed']!s:>6s}")
            if side == "kmpc":
                line += (f"  {fmt(m['ratio_p50'], '.2f', 'x')} stock's p50; Runs per login "
                         f"{fmt(m['kmpc_runs_per_login'], '.2f')} "
                         f"{m['kmpc_runs_distribution'] or ''} (expected "
                         f"{m['kmpc_runs_expected']})")
            print(line)


def login_tgs_target(mode, m):
    """The login+TGS storm's ops/s with TGS to the cts service against
    the same storm to the ctr-mpc service (a miss when either failed an
    operation)."""
    q = m.get("login_tgs_ratio_cts_to_ctr")
    lt = m.get("login_tgs") or {}
    cts, ctr = lt.get("cts") or {}, lt.get("ctr") or {}
    failed = (cts.get("failed") or 0) + (ctr.get("failed") or 0)
    met = bool(q is not None and q >= TARGET_LOGIN_TGS_RATIO and not failed)
    return {
        "what": (f"login+TGS storm at 64 clients, TGS to a service under an aes*-cts handle "
                 f">= {TARGET_LOGIN_TGS_RATIO:g}x the same storm to a service under an "
                 f"aes*-ctr-mpc handle ({mode} servers, same realm and run)"),
        "measured": ("not measured" if q is None else
                     f"{fmt(cts.get('ops_per_s'), '.1f')} vs {fmt(ctr.get('ops_per_s'), '.1f')} "
                     f"ops/s = {q:.3f}, {cts.get('failed')} + {ctr.get('failed')} failed"),
        "met": met,
        "miss_by": (None if met else "not measured" if q is None
                    else f"{failed} failed" if q >= TARGET_LOGIN_TGS_RATIO
                    else f"{TARGET_LOGIN_TGS_RATIO - q:.3f} of the ctr-mpc storm's ops/s"),
    }


def tgs_targets(res):
    """Issue 50's rows per mode (malicious first: the default): Debian's
    kvno p50 to a service in the cluster, and exactly two Runs per TGS by
    the servers' count; in every mode measured, the login+TGS storm's
    cts/ctr-mpc ratio."""
    modes = (res.get("tgs") or {}).get("modes") or {}
    out = []
    for mode in TGS_MODES:
        if mode not in modes:
            continue
        m = modes[mode]
        if m.get("login_tgs") or m.get("error"):
            out.append(login_tgs_target(mode, m))
        if mode not in TARGET_TGS_P50_MS:
            continue
        err = m.get("error")
        bound = TARGET_TGS_P50_MS[mode]
        v = m.get("one_client_p50_ms")
        row = bound_row(f"TGS to a service in the cluster (aes256-cts), Debian's kvno, one "
                        f"client ({mode} servers): p50 <= {bound:g} ms", v, bound, ".1f",
                        "not measured" + (f" ({err[:120]})" if err else ""))
        if v is not None:
            row["measured"] += (f" (p99 {fmt(m.get('one_client_p99_ms'), '.1f')} ms, "
                                f"{m.get('one_client_failed')} failed; KDB-key service "
                                f"{fmt(m.get('kdb_service_p50_ms'), '.1f')} ms; "
                                f"{fmt(m.get('and_rounds_per_tgs'), ',.0f')} AND rounds per TGS)")
            if m.get("one_client_failed"):
                row["met"] = False
                row["miss_by"] = (row.get("miss_by") or "") + \
                    f" {m['one_client_failed']} failed"
        out.append(row)
        n, runs = m.get("tgs_exchanges"), m.get("server_runs")
        ok = bool(n and runs == TARGET_TGS_RUNS * n and not m.get("servers_disagreed_on_runs"))
        out.append({
            "what": (f"MPC Runs per TGS to a service in the cluster == {TARGET_TGS_RUNS} "
                     f"({mode} servers; the servers' Run count, one client)"),
            "measured": ("not measured" if not n or runs is None else
                         f"{runs}/{n} = {m.get('runs_per_tgs'):g}"
                         f" (the KDC module's count {m.get('module_runs_per_tgs')})"),
            "met": ok,
            "miss_by": None if ok else ("not measured" if not n or runs is None
                                        else f"{m.get('runs_per_tgs'):g} Runs per TGS"),
        })
        mx = (m.get("mix") or {}).get("cts")
        if mx:
            out.append({
                "what": (f"login + TGS + renewal + forwarding mix at 16 clients, TGS to the "
                         f"service in the cluster, zero failed ({mode} servers)"),
                "measured": (f"{mx.get('ops_per_s')} ops/s ("
                             f"{fmt(m.get('mix_ratio_cts_to_kdb'), '.3f', 'x')} the mix with "
                             f"a KDB-key service), {mx.get('failed')} failed"
                             + (f": {mx.get('module_errors')}" if mx.get("failed") else "")),
                "met": mx.get("failed") == 0,
                "miss_by": None if mx.get("failed") == 0 else f"{mx.get('failed')} failed",
            })
    return out


def soak_row(run):
    """One soak run of soak.json, without its samples: the figures and, per
    judged process, the anonymous memory's reference, end, growth and
    second-half projection (KiB)."""
    mem = {n: {k: v.get(k) for k in ("ref_anon_kib", "end_anon_kib", "growth_kib",
                                     "judged_from_s", "slope_kib_per_s", "projected_kib",
                                     "grown", "too_short")}
           for n, v in (run.get("memory") or {}).items() if v and v.get("judged")}
    return {"run": run.get("run"), "pass": run.get("pass"), "rate_held": run.get("rate_held"),
            "p99_within_bound": run.get("sustained"),
            "logins_per_s": r(run.get("logins_per_s"), 1), "logins": run.get("logins"),
            "errors": run.get("errors"), "p99_ms": r(run.get("p99_ms"), 1),
            "max_ms": r(run.get("max_ms"), 1),
            "machine_steal_cores": r(run.get("machine_steal_cores"), 3),
            "memory": mem, "memory_unmeasured": run.get("memory_unmeasured") or [],
            "heap": {n: {k: v.get(k) for k in ("before_kib", "after_kib", "growth_kib",
                                               "growth_from_reference_kib", "grown")}
                     for n, v in (run.get("heap") or {}).items() if v},
            "heap_unmeasured": run.get("heap_unmeasured") or []}


def bound_row(what, value, bound, fmt, missing, ratio=False):
    """A target row for a figure that must stay at or below `bound` (ms)."""
    return {
        "what": what,
        "measured": missing if value is None else f"{value:{fmt}} ms",
        "met": value is not None and value <= bound,
        "miss_by": (None if value is None or value <= bound
                    else f"{value - bound:{fmt}} ms"
                         + (f" ({value / bound:.1f}x)" if ratio else "")),
    }


def runs_target(res):
    """One Run per exchange of each kind in the 16-client mix, with no
    plan miss, by the KDC module's count."""
    rp = ((res.get("mix") or {}).get("kmpc") or {}).get("runs_per_exchange") or {}
    got = {kind: rp.get(kind) for kind in RUNS_KINDS}
    bad = [kind for kind, x in got.items()
           if not x or x["runs"] != TARGET_RUNS_PER_EXCHANGE * x["exchanges"]
           or x["plan_misses"]]
    return {
        "what": (f"MPC Runs per exchange == {TARGET_RUNS_PER_EXCHANGE} for "
                 f"{', '.join(RUNS_KINDS)} (mix at 16 clients, the KDC module's count)"),
        "measured": "; ".join(
            f"{kind} " + ("not measured" if not x else
                          f"{x['runs']}/{x['exchanges']} = {x['runs_per_exchange']:g}"
                          f", {x['plan_misses']} misses")
            for kind, x in got.items()),
        "met": not bad,
        "miss_by": None if not bad else "over 1 or unmeasured: " + ", ".join(bad),
    }


def targets(res):
    k, s = res["kmpc"], res["stock"]
    soak = res.get("soak") or {}
    out = []
    errs = k["errors"] + soak.get("errors", 0)
    out.append({
        "what": "kmpc peak >= 60% of stock peak with zero errors (headline pair)",
        "measured": (f"{k['peak_logins_per_s']:.0f} vs {s['peak_logins_per_s']:.0f} logins/s"
                     + (f" (stock {s['peak_logins_per_s_before_kmpc']:.0f} before and "
                        f"{s['peak_logins_per_s_after_kmpc']:.0f} after kmpc, mean)"
                        if s.get("peak_logins_per_s_after_kmpc") else "") + " = "
                     f"{res['ratio']:.2f}; errors {k['errors']} in the sweep's reported points"
                     + (f", {soak.get('errors')} in the soak" if soak else "")),
        "met": bool(res["ratio"] is not None and res["ratio"] >= TARGET_RATIO and errs == 0),
        "miss_by": (None if res["ratio"] is None or res["ratio"] >= TARGET_RATIO
                    else f"{TARGET_RATIO - res['ratio']:.2f} of stock "
                         f"({TARGET_RATIO * s['peak_logins_per_s'] - k['peak_logins_per_s']:.0f}"
                         f" logins/s short)"),
    })
    out.append(bound_row("kmpc one-client p50 <= 5 ms with early flush",
                         k.get("p50_ms_one_client_early_flush"), TARGET_P50_EARLY_MS,
                         ".2f", "not measured (no soak.json)", ratio=True))
    out.append(bound_row("kmpc p99 at 90% of peak <= 250 ms with the 100 ms window",
                         k.get("p99_ms_at_90pct"), TARGET_P99_90PCT_MS, ".1f",
                         "not measured"))
    mix = res.get("mix") or {}
    sides = [mix.get("kmpc"), mix.get("stock")]
    ok = all(sd and sd["failed"] == 0 and sd["by_op"]
             and all(v["ok"] > 0 and v["failed"] == 0 for v in sd["by_op"].values())
             for sd in sides)
    out.append({
        "what": ("login + TGS + renewal + forwarding mix with zero failed exchanges, "
                 "kmpc and stock in the same run"),
        "measured": ("not measured (no mix in storm.json)" if not mix else
                     "; ".join(f"{n} {sd['ops_per_s']:.0f} ops/s, failed {sd['failed']}"
                               if sd else f"{n} not measured"
                               for n, sd in zip(("kmpc", "stock"), sides))),
        "met": bool(mix) and ok,
        "miss_by": None if mix and ok else "see mix",
    })
    # One client, each exchange's own latency (kmpc-storm --mix, c = 1).
    one = (res.get("mix_one_client") or {})
    ko, so = one.get("kmpc") or {}, one.get("stock") or {}
    for op, name, bound in (("login", "login (AS with PAC)", TARGET_ONE_LOGIN_MS),
                            ("tgs", "TGS-REQ", TARGET_ONE_TGS_MS),
                            ("renew", "renewal", TARGET_ONE_RENEW_MS)):
        kv = ((ko.get("by_op") or {}).get(op) or {})
        sv = ((so.get("by_op") or {}).get(op) or {})
        p50 = kv.get("step_p50_us")
        row = bound_row(f"kmpc one client p50 {name} <= {bound:g} ms (default configuration)",
                        None if p50 is None else p50 / 1e3, bound, ".2f",
                        "not measured (no one-client mix)")
        if p50 is not None:
            row["measured"] += (f" (p99 {kv.get('step_p99_us', 0) / 1e3:.2f} ms; stock p50 "
                                f"{fmt((sv.get('step_p50_us') or 0) / 1e3, '.2f')} ms)")
        out.append(row)
    for key, conc, goal in (("mix", 16, TARGET_MIX_RATIO), ("mix_closed_loop_64", 64, None)):
        mx = res.get(key) or {}
        q = mx.get("ratio")
        out.append({
            "what": (f"mix at {conc} clients: kmpc ops/s / stock ops/s"
                     + (f" >= {goal:g}" if goal else " (reported)")),
            "measured": ("not measured" if q is None else
                         f"{mx['kmpc']['ops_per_s']:.0f} vs {mx['stock']['ops_per_s']:.0f} "
                         f"ops/s = {q:.3f}"),
            "met": bool(q is not None and (goal is None or q >= goal)),
            "miss_by": (None if q is not None and (goal is None or q >= goal)
                        else "not measured" if q is None else f"{goal - q:.3f} of stock"),
        })
    kc = (k.get("cpu_us_per_login_at_saturation") or {}).get("krb5kdc")
    sc = (s.get("cpu_us_per_login_at_saturation") or {}).get("krb5kdc")
    q = (kc / sc) if kc and sc else None
    out.append({
        "what": f"KDC CPU per login <= {TARGET_KDC_CPU_RATIO:g}x stock's (same run)",
        "measured": ("not measured" if q is None else
                     f"{kc:.0f} vs {sc:.0f} us = {q:.2f}x"),
        "met": bool(q is not None and q <= TARGET_KDC_CPU_RATIO),
        "miss_by": (None if q is not None and q <= TARGET_KDC_CPU_RATIO
                    else "not measured" if q is None else f"{q - TARGET_KDC_CPU_RATIO:.2f}x"),
    })
    if "kmpc_malicious" in res:
        m, q = res["kmpc_malicious"], res.get("ratio_malicious_to_kmpc")
        out.append({
            "what": ("kmpc peak with the servers in --security=malicious >= 50% of the "
                     "semi-honest kmpc peak (issue 25)"),
            "measured": (f"{fmt(m['peak_logins_per_s'], '.0f')} vs "
                         f"{fmt(k['peak_logins_per_s'], '.0f')} logins/s = "
                         f"{fmt(q, '.2f')}"),
            "met": bool(q is not None and q >= TARGET_MALICIOUS_RATIO),
            "miss_by": (None if q is not None and q >= TARGET_MALICIOUS_RATIO
                        else "not measured" if q is None
                        else f"{TARGET_MALICIOUS_RATIO - q:.2f} of the semi-honest peak"),
        })
    mm = (res.get("mpc_microbench") or {}).get("malicious")
    if mm:
        q = mm.get("ratio_100k_blocks_per_s")
        out.append({
            "what": ("MPC micro-benchmark: malicious AES-128 at 100,000 blocks >= 25% of the "
                     "semi-honest blocks/s (issue 25)"),
            "measured": (f"{fmt(mm.get('aes128_100k_blocks_per_s_best'), '.0f')} blocks/s = "
                         f"{fmt(q, '.3f')} of semi-honest"),
            "met": bool(q is not None and q >= TARGET_MALICIOUS_MPC_RATIO),
            "miss_by": (None if q is not None and q >= TARGET_MALICIOUS_MPC_RATIO
                        else "see mpc_microbench"),
        })
        q = mm.get("ratio_single_block_p50")
        out.append({
            "what": ("MPC micro-benchmark: malicious single-block latency <= 2x the "
                     "semi-honest one (issue 25)"),
            "measured": (f"{fmt(mm.get('aes128_single_block_p50_ms'), '.2f')} ms = "
                         f"{fmt(q, '.1f')}x semi-honest"),
            "met": bool(q is not None and q <= 2.0),
            "miss_by": None if q is not None and q <= 2.0 else "see mpc_microbench",
        })
    if soak:
        runs = soak.get("runs", 1)
        out.append({
            "what": (f"{runs} x {soak.get('duration_s', 0):.0f} s soak at 90% of peak in the "
                     "same processes, each run: no crash, zero errors, >= 97% of the rate, heap in "
                     "use (each process's own mallinfo2 on /metrics) and anonymous memory "
                     f"(/proc) flat within {soak.get('rss_slack_kib', 0)} KiB"),
            "measured": (f"{soak.get('passed_runs')} of {runs} runs clean; lowest "
                         f"{soak.get('logins_per_s', 0):.0f}/s of {soak.get('offered')}, errors "
                         f"{soak.get('errors')}, memory over the slack: "
                         f"{soak.get('rss_grown') or 'none'}, heap over the slack: "
                         f"{soak.get('heap_grown') or 'none'}"),
            "met": bool(soak.get("pass")),
            "miss_by": None if soak.get("pass") else "see soak.per_run",
        })
    out.insert(1, runs_target(res))
    if res.get("cts"):
        out += cts_targets(res)
    if res.get("tgs"):
        out += tgs_targets(res)
    return out


def fmt(v, spec=".2f", unit=""):
    return "-" if v is None else f"{v:{spec}}{unit}"


def print_table(res, out_path):
    p = print
    k, s = res["kmpc"], res["stock"]
    p("")
    p("== login-storm benchmark (kmpc-storm, AS exchange with encrypted-timestamp pre-auth) ==")
    p(res["note"])
    p(res["settings"])
    p(f"{'':34s} {'stock':>12s} {'kmpc':>12s}")
    rows = [
        ("peak sustained logins/s", "peak_logins_per_s", ".0f", ""),
        ("closed-loop logins/s (saturation)", "closed_loop_logins_per_s", ".0f", ""),
        ("one client p50", "p50_ms_one_client", ".2f", " ms"),
        ("one client p99", "p99_ms_one_client", ".2f", " ms"),
        ("at 50% of peak: p50", "p50_ms_at_50pct", ".2f", " ms"),
        ("at 50% of peak: p99", "p99_ms_at_50pct", ".2f", " ms"),
        ("at 90% of peak: p50", "p50_ms_at_90pct", ".2f", " ms"),
        ("at 90% of peak: p99", "p99_ms_at_90pct", ".2f", " ms"),
        ("at 90% of peak: host steal", "steal_cores_at_90pct", ".3f", " cores"),
        ("errors (peak, 50%, 90% points)", "errors", "d", ""),
        ("server-side CPU us/login (peak)", "server_side_cpu_us_per_login_at_peak", ".0f", ""),
    ]
    for label, key, spec, unit in rows:
        p(f"{label:34s} {fmt(s.get(key), spec, unit):>12s} {fmt(k.get(key), spec, unit):>12s}")
    if s.get("peak_logins_per_s_after_kmpc") is not None:
        p(f"stock's peak above is the mean of its sweeps right before kmpc's "
          f"({fmt(s.get('peak_logins_per_s_before_kmpc'), '.0f')}/s) and right after it "
          f"({fmt(s.get('peak_logins_per_s_after_kmpc'), '.0f')}/s); kmpc against each: "
          f"{fmt(res.get('ratio_vs_stock_before'), '.2f', 'x')} and "
          f"{fmt(res.get('ratio_vs_stock_after'), '.2f', 'x')}")
    p(f"{'ratio kmpc/stock (peak)':34s} {'':>12s} {fmt(res['ratio'], '.2f', 'x'):>12s}")
    km = res.get("kmpc_malicious")
    if km:
        p(f"kmpc with --security=malicious servers (same run, same sweep): peak "
          f"{fmt(km['peak_logins_per_s'], '.0f')} logins/s, one client p50 "
          f"{fmt(km['p50_ms_one_client'], '.2f', ' ms')}; malicious/semi-honest peak "
          f"{fmt(res.get('ratio_malicious_to_kmpc'), '.2f', 'x')} (target >= "
          f"{TARGET_MALICIOUS_RATIO:.2f}x)")
    mm = (res.get("mpc_microbench") or {}).get("malicious")
    if mm:
        mb = res["mpc_microbench"]
        p(f"MPC micro-benchmark, AES-128 (mpc.json): 100,000 blocks "
          f"{fmt(mb.get('aes128_100k_blocks_per_s_best'), '.0f')} blocks/s semi-honest, "
          f"{fmt(mm.get('aes128_100k_blocks_per_s_best'), '.0f')} malicious "
          f"({fmt(mm.get('ratio_100k_blocks_per_s'), '.3f', 'x')}); single block p50 "
          f"{fmt(mb.get('aes128_single_block_p50_ms'), '.2f', ' ms')} and "
          f"{fmt(mm.get('aes128_single_block_p50_ms'), '.2f', ' ms')} "
          f"({fmt(mm.get('ratio_single_block_p50'), '.1f', 'x')})")
    mix = res.get("mix") or {}
    if mix:
        ms, mk = mix.get("stock") or {}, mix.get("kmpc") or {}
        p(f"{'mix ops/s (' + (mk.get('ops') or ms.get('ops') or '') + ')':34s} "
          f"{fmt(ms.get('ops_per_s'), '.0f'):>12s} {fmt(mk.get('ops_per_s'), '.0f'):>12s}"
          f"   ratio {fmt(mix.get('ratio'), '.2f', 'x')}")
        p(f"{'mix p50 ms / failed':34s} "
          f"{fmt(ms.get('p50_ms'), '.2f') + ' / ' + str(ms.get('failed', '-')):>12s} "
          f"{fmt(mk.get('p50_ms'), '.2f') + ' / ' + str(mk.get('failed', '-')):>12s}")
    p(f"{'peak with p99 <= 250 ms':34s} {fmt(s.get('peak_logins_per_s_p99_le_250ms'), '.0f'):>12s}"
      f" {fmt(k.get('peak_logins_per_s_p99_le_250ms'), '.0f'):>12s}   ratio "
      f"{fmt(res.get('ratio_at_p99_le_250ms'), '.2f', 'x')}")
    p(f"{'kmpc one client p50, early flush':34s} {'':>12s} "
      f"{fmt(k.get('p50_ms_one_client_early_flush'), '.2f', ' ms'):>12s}")
    p("CPU us per login at the peak, per process:")
    for side_name, d in (("stock", s), ("kmpc", k)):
        p(f"  {side_name:6s} " + ", ".join(f"{n} {v:.0f}" for n, v in
                                           d["cpu_us_per_login_at_peak"].items()))
    m = k.get("mpc_per_login")
    if m:
        p(f"MPC per login (at kmpc's peak): {m['aes_blocks_per_login']:.1f} AES blocks, "
          f"{m['ring_bytes_per_login_per_party']:.0f} ring bytes sent per party "
          f"({m['ring_bytes_per_login_all_parties']:.0f} all three), "
          f"{m['run_batches_per_login']:.3f} Run + {m['finalize_batches_per_login']:.3f} "
          f"Finalize batches ({m['logins_per_run_batch']:.1f} logins per Run batch)")
    for key, label in (("breakdown_one_client_early_flush", "one client, early flush"),
                       ("breakdown_90pct_window_100ms", "90% of peak, 100 ms window")):
        bd = k.get(key)
        if not bd:
            continue
        p(f"where kmpc's time goes, {label} (login p50 {bd['p50_ms']:.2f} ms; medians per "
          f"batch from the module's debug lines):")
        for kind, b in bd.get("batches", {}).items():
            p(f"  {kind:13s} {b['jobs_median']:>4} jobs {b['aes_blocks_median']:>5} blocks: "
              f"queued {fmt(b['queued_ms_median'], '.1f')} ms, run {fmt(b['run_ms_median'], '.1f')}"
              f" ms (servers: queue {fmt(b['servers_queue_ms_median'], '.1f')}, compute "
              f"{fmt(b['servers_compute_ms_median'], '.1f')} ms, {b['ring_messages_median']} ring "
              f"msgs), finalize {fmt(b['finalize_ms_median'], '.1f')} ms, total "
              f"{fmt(b['total_ms_median'], '.1f')} ms")
    d = res.get("default_settings")
    if d:
        p(f"default settings (last-success written to the KDB): stock "
          f"{fmt(d['stock']['peak_logins_per_s'], '.0f')}/s, kmpc "
          f"{fmt(d['kmpc']['peak_logins_per_s'], '.0f')}/s, ratio "
          f"{fmt(d['ratio'], '.2f', 'x')}; p99 at 90%: stock "
          f"{fmt(d['stock']['p99_ms_at_90pct'], '.1f', ' ms')}, kmpc "
          f"{fmt(d['kmpc']['p99_ms_at_90pct'], '.1f', ' ms')}")
    so = res.get("soak")
    if so:
        p(f"soak: {so.get('runs', 1)} x {so.get('duration_s', 0):.0f} s at {so.get('offered')}/s "
          f"in the same processes; anonymous memory (RssAnon, KiB) reference -> end "
          f"(growth; slope after the last backlog record), slack {so.get('rss_slack_kib')} KiB:")
        for x in so.get("per_run") or []:
            p(f"  run {x['run']}: {'clean' if x['pass'] else 'FAILED'}"
              + (" (rate not held)" if x.get("rate_held") is False else "") + ", "
              f"{fmt(x['logins_per_s'], '.0f')}/s, errors {x['errors']}, p99 "
              f"{fmt(x['p99_ms'], '.1f', ' ms')}"
              + (" (over the sweep's 500 ms)" if x.get("p99_within_bound") is False else "")
              + ", host steal "
              f"{fmt(x['machine_steal_cores'], '.3f')} cores"
              + (f"; memory not measured: {x['memory_unmeasured']}"
                 if x["memory_unmeasured"] else ""))
            for n, v in x["memory"].items():
                p(f"    {n:13s} {v['ref_anon_kib']:8d} -> {v['end_anon_kib']:8d} "
                  f"({v['growth_kib']:+6d}; {v['slope_kib_per_s']:+7.1f} KiB/s from "
                  f"{v['judged_from_s']:.0f} s)"
                  + (" over the slack" if v["grown"] else "")
                  + (" not judged (stretch too short)" if v["too_short"] else ""))
            for n, v in (x.get("heap") or {}).items():
                p(f"    {n:13s} heap in use {v['before_kib']:8d} -> {v['after_kib']:8d} KiB "
                  f"({v['growth_kib']:+6d}; {v['growth_from_reference_kib']:+d} from the "
                  "first run's level)" + (" over the slack" if v["grown"] else ""))
        across = so.get("memory_across_runs") or {}
        if len(so.get("per_run") or []) > 1 and across:
            p("  first run's reference -> last run's end: " + ", ".join(
                f"{n} {v['growth_kib']:+d} KiB" for n, v in across.items()))
        heap = so.get("heap_across_runs") or {}
        if len(so.get("per_run") or []) > 1 and heap:
            p("  heap in use, first run's level -> last run's end: " + ", ".join(
                f"{n} {v['growth_kib']:+d} KiB" for n, v in heap.items()))
        if so.get("memory_criterion"):
            p(f"  memory judged on: {so['memory_criterion']}")
        if so.get("heap_criterion"):
            p(f"  and on: {so['heap_criterion']}")
    n = res.get("netns")
    if n:
        p(f"netns LAN ({n.get('shaping')}): {n.get('note')}")
        for key, label in (("one_client_window_100ms", "one client, window 100 ms"),
                           ("one_client_early_flush", "one client, early flush"),
                           ("at_50pct_of_peak", "open loop at 50% of loopback peak"),
                           ("at_90pct_of_peak", "open loop at 90% of loopback peak"),
                           ("saturation_closed_loop", "closed loop saturation")):
            v = n.get(key)
            if v:
                p(f"  {label:36s} {v['logins_per_s']:7.0f}/s p50 {v['p50_ms']:8.2f} ms "
                  f"p99 {v['p99_ms']:8.2f} ms failed {v['failed']} dropped {v['dropped']}")
    ring_cost.print_delay(res.get("ring_delay"), p)
    print_cts(res)
    print_tgs(res)
    print_pkinit(res)
    print_targets(res["targets"])
    p(f"written: {out_path}")


def print_targets(rows):
    print("targets:")
    for t in rows:
        print(f"  [{'met ' if t['met'] else 'MISS'}] {t['what']}: {t['measured']}"
              + (f"; missed by {t['miss_by']}" if t.get("miss_by") else ""))


def print_cts(res):
    """The aes256-cts section of the table (cts.json)."""
    p = print
    cts = (res.get("cts") or {}).get("modes") or {}
    if cts:
        p("aes256-cts users (keys in the cluster), Debian's kinit (cts.json):")
        for mode, m in cts.items():
            if "error" in m:
                p(f"  {mode:11s} failed: {m['error'][:200]}")
                continue
            p(f"  {mode:11s} one client p50 {fmt(m['one_client_p50_ms'], '.1f', ' ms')} "
              f"p99 {fmt(m['one_client_p99_ms'], '.1f', ' ms')} (krbtgt-only user "
              f"{fmt(m['krbtgt_only_one_client_p50_ms'], '.1f', ' ms')}); FAST p50 "
              f"{fmt(m['fast_p50_ms'], '.1f', ' ms')}; {fmt(m['ands_per_login'], ',.0f')} ANDs, "
              f"{fmt(m['and_rounds_per_login'], ',.0f')} rounds per login; storm peak "
              f"{fmt(m['storm_peak_logins_per_s'], '.0f')} vs krbtgt-only "
              f"{fmt(m['krbtgt_only_storm_peak_logins_per_s'], '.0f')} logins/s = "
              f"{fmt(m['storm_ratio'], '.3f', 'x')}")
            if m.get("ring_per_login"):
                p("    " + ring_cost.login_line(m["ring_per_login"]))
            cpu = m.get("storm_cpu_us_per_login_at_peak")
            if cpu:
                p("    CPU us per cts login at the storm's peak ("
                  f"{fmt(m.get('storm_logins_per_run_at_peak'), '.0f')} logins per Run): "
                  + ", ".join(f"{n} {v:.0f}" for n, v in cpu.items()))
            rl = m.get("realm") or {}
            for pop in ("varied", "uniform"):
                v = rl.get(pop)
                if v:
                    p(f"    {pop:8s} {v['users']} users, names {v['name_lengths']}: "
                      f"{fmt(v['logins_per_s'], '.1f')} logins/s, {v['failed_logins']} failed, "
                      f"{fmt(v['runs_per_1000_logins'], '.0f')} Runs per 1,000 logins, "
                      f"compiles {(v['program_cache'] or {}).get('miss')}, shapes "
                      f"{(v['shapes'] or {}).get('distinct_shapes_by_kind')}, CPU ms/login "
                      f"{v['cpu_ms_per_login']}")
            if rl:
                p(f"    varied / uniform {fmt(rl.get('ratio_varied_to_uniform'), '.3f', 'x')}")


def print_tgs(res):
    """tgs.json's lines of the table."""
    modes = (res.get("tgs") or {}).get("modes") or {}
    if modes:
        print("TGS to a service whose aes256-cts key the cluster holds, Debian's kvno (tgs.json):")
    for mode, m in modes.items():
        if "error" in m:
            print(f"  {mode:11s} failed: {m['error'][:200]}")
            continue
        print(f"  {mode:11s} one client p50 {fmt(m['one_client_p50_ms'], '.1f', ' ms')} p99 "
              f"{fmt(m['one_client_p99_ms'], '.1f', ' ms')} (KDB-key service "
              f"{fmt(m['kdb_service_p50_ms'], '.1f', ' ms')}); cold "
              f"{m['cold_first_tickets_ms']} ms; Runs per TGS {m['runs_per_tgs']}; "
              f"{fmt(m['ands_per_tgs'], ',.0f')} ANDs, {fmt(m['and_rounds_per_tgs'], ',.0f')} "
              f"rounds per TGS; CPU ms per TGS {m['cpu_ms_per_tgs']}")
        mx = m.get("mix") or {}
        if mx:
            print(f"    mix {fmt((mx.get('cts') or {}).get('ops_per_s'), '.1f')} ops/s with the "
                  f"cts service, {fmt((mx.get('kdb') or {}).get('ops_per_s'), '.1f')} with the "
                  f"KDB one: {fmt(m.get('mix_ratio_cts_to_kdb'), '.3f', 'x')}")
            for w in ("cts", "kdb"):
                b = (mx.get(w) or {}).get("batches")
                if b:
                    print(f"      TGS to the {w} service: {b.get('tickets_per_run')} tickets per "
                          f"Run, {b['cts_shape_cuts']} of {b['module_runs']} Runs cut by the "
                          f"cts shape bound")
        lt = m.get("login_tgs") or {}
        if lt:
            print(f"    login+TGS storm {fmt((lt.get('cts') or {}).get('ops_per_s'), '.1f')} "
                  f"ops/s with the cts service, "
                  f"{fmt((lt.get('ctr') or {}).get('ops_per_s'), '.1f')} with the ctr-mpc "
                  f"one: {fmt(m.get('login_tgs_ratio_cts_to_ctr'), '.3f', 'x')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(BUILD, "bench"))
    ap.add_argument("--out", default=None, help="default DIR/results.json")
    ap.add_argument("--cts-rows", action="store_true",
                    help="only DIR/cts.json: print its section and target rows, "
                         "write nothing (make bench-cts)")
    args = ap.parse_args()
    if args.cts_rows:
        cts = load(os.path.join(args.dir, "cts.json"))
        if not cts:
            sys.stderr.write(f"bench_results: no {args.dir}/cts.json\n")
            return 2
        res = {"cts": cts_side(cts)}
        print_cts(res)
        print_targets(cts_targets(res))
        return 0
    out = args.out or os.path.join(args.dir, "results.json")
    try:
        res = build(args.dir)
    except SystemExit as e:
        sys.stderr.write(f"{e}\n")
        return 2
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print_table(res, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
