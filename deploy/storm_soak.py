#!/usr/bin/env python3
"""Login-storm soak and one-client latency of kmpc (make bench-soak).

One kmpc realm (deploy/kmpc_cluster.py, headline settings: disable_last_success
and disable_lockout on), then:
  1. one client (closed loop, c=1) with the module's default batch window
     (batch_window_ms = 100, early_flush off);
  2. the soak: an open-loop storm at 90% of kmpc's peak sustained rate (from
     build/bench/storm.json, else --rate): a warm-up run of --warmup seconds
     (10), then --duration seconds (60) measured, sampling the resident
     memory (VmRSS) of the KDC, each MPC server and the load generator once a
     second.  Memory is judged on the heap bytes each process has allocated
     and not freed (glibc malloc_info through gdb, all arenas and mmapped
     chunks, the process idle after the warm-up run and after the soak):
     glibc keeps freed heap pages resident, so raw RSS climbs to the
     high-water mark of any backlog (thousands of logins in flight when the
     shared machine stalls; the load generator's RSS jumps with it) and
     stays there, leak or not; bytes in use do not.  Passes when no login
     failed or was dropped and no process has more than --rss-slack-kib
     more in use after the soak than after the warm-up.  Raw RSS (first
     10 s, max, end, second-half slope) and RSS after malloc_trim(0) are
     reported beside; without gdb the raw RSS is judged (highest RSS in the
     second half against the highest during the first 10 s);
  3. the KDC restarted with early_flush = true (same cluster, same KDB):
     one client again, and a short open-loop point at 50% of the peak
     (what early flush costs under load).
Writes build/bench/soak.json; prints one line per phase.  Every process is
stopped by PID at the end, also on failure.

Usage: storm_soak.py [--duration 60] [--warmup 10] [--rate R] [--users 1000]
"""

import argparse
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kmpc_realm  # noqa: E402
import storm_bench  # noqa: E402

BENCH_DIR = storm_bench.BENCH_DIR


def malloc_state(pids):
    """{name: {"rss_trimmed_kib", "in_use_kib"}} for each idle process: through
    gdb (batch mode, detaches at once) it calls malloc_trim(0) -- glibc keeps
    freed heap pages resident, so raw RSS stays at the high-water mark of any
    backlog -- then reads VmRSS, and malloc_info() gives the bytes the
    allocator has handed out and not got back (all arenas, mmapped chunks
    included): what a leak makes grow, fragmentation and retention do not.
    None for a process where gdb is missing or a call failed.  The processes
    are non-dumpable; ptrace by root still works."""
    import shutil
    import subprocess
    import tempfile
    gdb = shutil.which("gdb")
    out = {}
    for n, pid in pids.items():
        out[n] = None
        if not gdb:
            continue
        fd, xml = tempfile.mkstemp(prefix="malloc-info-", suffix=".xml")
        os.close(fd)
        try:
            p = subprocess.run(
                [gdb, "-nx", "-batch", "-p", str(pid),
                 "-ex", "call (int) malloc_trim(0)",
                 "-ex", f'set $f = (void *) fopen("{xml}", "w")',
                 "-ex", "call (int) malloc_info(0, $f)",
                 "-ex", "call (int) fclose($f)", "-ex", "detach"],
                capture_output=True, text=True, timeout=60)
            with open(xml) as f:
                text = f.read()
            tail = text[text.rfind("</heap>"):]
            v = {k: int(x) for k, x in re.findall(
                r'<(?:total|system) type="(fast|rest|mmap|current)" (?:count="\d+" )?'
                r'size="(\d+)"/>', tail)}
            if p.returncode == 0 and len(v) == 4:
                out[n] = {"rss_trimmed_kib": rss_kib(pid),
                          "in_use_kib": (v["current"] - v["fast"] - v["rest"] + v["mmap"])
                          // 1024}
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            os.unlink(xml)
    return out


def save(path, out):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, path)


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def find_child(ppid, name):
    """A child process of ppid whose comm starts with name (the storm
    runs under subprocess.run; its pid is found from /proc)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == ppid and comm.startswith(name[:15]):
            return int(d)
    return None


def rss_summary(samples, t_warm):
    """samples: [(t, rss_kib)] for one process; t from the storm's start.
    Warm-up level: the highest RSS up to t_warm. Growth: the highest RSS in
    the second half of the run above that level, and the slope of a least
    squares line over the second half."""
    if not samples:
        return None
    warm = [r for t, r in samples if t <= t_warm] or [samples[0][1]]
    t_end = samples[-1][0]
    half = [(t, r) for t, r in samples if t >= (t_warm + t_end) / 2] or samples[-1:]
    level = max(warm)
    late_max = max(r for _, r in half)
    n = len(half)
    slope = 0.0
    if n >= 3:
        mt = sum(t for t, _ in half) / n
        mr = sum(r for _, r in half) / n
        den = sum((t - mt) ** 2 for t, _ in half)
        slope = sum((t - mt) * (r - mr) for t, r in half) / den if den else 0.0
    return {"warmup_level_kib": level, "first_kib": samples[0][1],
            "max_kib": max(r for _, r in samples), "end_kib": samples[-1][1],
            "second_half_max_kib": late_max, "growth_over_warmup_kib": late_max - level,
            "second_half_slope_kib_per_s": round(slope, 2), "samples": len(samples)}


def restart_kdc_with(target, options):
    """Stop the KDC, set the kdcmpc module options in kdc.conf, start it."""
    r = target.realm
    r.stop_kdc()
    with open(r.kdc_conf) as f:
        conf = f.read()
    a = conf.find("[kdcmpc]")
    if a < 0:
        raise kmpc_realm.RealmError("no [kdcmpc] section in kdc.conf")
    b = conf.find("\n[", a + 1)
    b = len(conf) if b < 0 else b + 1
    sect = conf[a:b]
    for k, v in options.items():
        sect, n = re.subn(rf"^(\s*){k}\s*=.*$", rf"\g<1>{k} = {v}", sect, flags=re.M)
        if not n:  # insert after the module's key = line
            sect, n = re.subn(r"^(\s*)key = (.*kdc\.key)$", rf"\g<0>\n\g<1>{k} = {v}", sect,
                              count=1, flags=re.M)
            if not n:
                raise kmpc_realm.RealmError("no key = line in kdc.conf [kdcmpc]")
    conf = conf[:a] + sect + conf[b:]
    with open(r.kdc_conf, "w") as f:
        f.write(conf)
    r.start()
    target.watch["krb5kdc"] = r.kdc_proc.pid


BATCH_RE = re.compile(
    r"kdcmpc: batch #(\d+): (\d+) jobs \((\d+) failed\), (\d+) AES blocks \((\d+) requested\), "
    r"queued ([\d.]+) ms, run ([\d.]+) ms(?: \(servers: queue ([\d.]+) ms, compute ([\d.]+) ms, "
    r"(\d+) ring messages\))?, finalize ([\d.]+) ms, total ([\d.]+) ms")


def set_kdc_debug(target, on):
    """[logging] debug = true|false in kdc.conf (the module's per-batch
    LOG_DEBUG lines reach the KDC log only with it)."""
    r = target.realm
    with open(r.kdc_conf) as f:
        conf = f.read()
    conf = conf.replace("[logging]\n    debug = true\n", "[logging]\n")
    if on:
        conf = conf.replace("[logging]\n", "[logging]\n    debug = true\n", 1)
    with open(r.kdc_conf, "w") as f:
        f.write(conf)


def out_crit(trimmed):
    return ("heap bytes in use (malloc_info, all arenas and mmapped chunks) after the soak "
            "vs after the warm-up run, both idle; raw RSS keeps the allocator's freed pages "
            "(high-water mark of any backlog) and is reported beside" if trimmed else
            "raw RSS (no gdb for malloc_info): second-half max vs the first 10 s")


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def batch_breakdown(log_text):
    """Medians of the module's per-batch debug lines, split into batches
    without a Finalize (the pre-auth DECRYPT + CHECKSUM round, with the
    speculative keystreams), FINALIZE only (ticket and reply whose keystream
    the speculation gave: no AES blocks) and both (ticket and reply
    ENCRYPT without speculation)."""
    rows = [m.groups() for m in BATCH_RE.finditer(log_text)]
    out = {}
    for kind, sel in (("run_only", lambda f, b: f == 0.0),
                      ("finalize_only", lambda f, b: f > 0.0 and b == 0),
                      ("with_finalize", lambda f, b: f > 0.0 and b > 0)):
        rs = [r for r in rows if sel(float(r[10]), int(r[3]))]
        if not rs:
            continue
        col = lambda i, t=float: [t(r[i]) for r in rs if r[i] is not None]  # noqa: E731
        out[kind] = {
            "batches": len(rs), "jobs_median": median(col(1, int)),
            "aes_blocks_median": median(col(3, int)),
            "queued_ms_median": median(col(5)), "run_ms_median": median(col(6)),
            "servers_queue_ms_median": median(col(7)),
            "servers_compute_ms_median": median(col(8)),
            "ring_messages_median": median(col(9, int)),
            "finalize_ms_median": median(col(10)), "total_ms_median": median(col(11)),
        }
    return out


def breakdown_run(target, label, outdir, argv, options):
    """Restart the KDC with these module options and per-batch debug lines,
    run the storm, and return its figures with the batches' breakdown."""
    set_kdc_debug(target, True)
    try:
        restart_kdc_with(target, {**options, "debug": "true"})
        log_path = target.realm.kdc_log
        off = os.path.getsize(log_path)
        res = storm_bench.run_storm(target, argv, label, outdir)
        with open(log_path, errors="replace") as f:
            f.seek(off)
            text = f.read()
    finally:
        set_kdc_debug(target, False)
    lat = res["latency_us"]
    return {"logins_per_s": res["logins_per_s"], "p50_ms": lat["p50"] / 1e3,
            "p99_ms": lat["p99"] / 1e3, "failed": res["failed_all_phases"],
            "cpu": res["cpu"], "batches": batch_breakdown(text)}


def one_client(target, label, outdir, dur):
    storm_bench.run_storm(target, ["-c", 1, "-d", 1], label + "-warm", outdir)
    res = storm_bench.run_storm(target, ["-c", 1, "-d", dur, "-w", 0.5], label, outdir,
                                check=True)
    lat = res["latency_us"]
    return {"p50_ms": lat["p50"] / 1e3, "p90_ms": lat["p90"] / 1e3,
            "p99_ms": lat["p99"] / 1e3, "max_ms": lat["max"] / 1e3,
            "logins": res["ok"], "failed": res["failed_all_phases"],
            "cpu": res["cpu"], "mpc": res.get("mpc")}


def _f(v):
    return "-" if v is None else f"{v:.1f}"


def describe(bd):
    parts = [f"login p50 {bd['p50_ms']:.2f} ms p99 {bd['p99_ms']:.2f} ms"]
    for kind, b in bd["batches"].items():
        parts.append(f"{kind}: {b['jobs_median']} jobs, {b['aes_blocks_median']} blocks, "
                     f"queued {_f(b['queued_ms_median'])} ms, run {_f(b['run_ms_median'])} ms "
                     f"(servers: queue {_f(b['servers_queue_ms_median'])}, compute "
                     f"{_f(b['servers_compute_ms_median'])} ms, {b['ring_messages_median']} "
                     f"ring msgs), finalize {_f(b['finalize_ms_median'])} ms, total "
                     f"{_f(b['total_ms_median'])} ms")
    return "; ".join(parts)


def breakdown(target, out, outdir, rate, log):
    # Where a login's time goes: the module's per-batch lines (one
    # client with early flush; 90% of peak with the 100 ms window).
    bd = breakdown_run(target, "breakdown-one-client-early-flush", outdir,
                       ["-c", 1, "-d", 3, "-w", 0.5], {"early_flush": "true"})
    out["breakdown_one_client_early_flush"] = bd
    log("  where the time goes, one client, early flush (medians per batch): "
        + describe(bd))
    bd = breakdown_run(target, "breakdown-90pct-window100", outdir,
                       ["-r", rate, "-d", 4, "-w", 2, "--timeout", target.timeout_s,
                        "--max-inflight", target.max_inflight,
                        "--max-errors", 1000000],
                       {"early_flush": "false"})
    out["breakdown_90pct_window_100ms"] = bd
    log(f"  where the time goes, {rate}/s with the 100 ms window (medians per "
        "batch): " + describe(bd))
    restart_kdc_with(target, {"early_flush": "true", "debug": "false"})


def peak_from_storm_json(path):
    try:
        with open(path) as f:
            d = json.load(f)
        return d["kmpc"]["settings"]["headline"]["peak_logins_per_s"] or None
    except (OSError, ValueError, KeyError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=60.0, help="measured soak seconds")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=None,
                    help="offered logins/s (default: 90%% of kmpc/headline peak in storm.json)")
    ap.add_argument("--storm-json", default=os.path.join(BENCH_DIR, "storm.json"))
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--one-client-s", type=float, default=4.0)
    ap.add_argument("--rss-slack-kib", type=int, default=2048,
                    help="RSS above the warm-up level still counted as no growth "
                         "(allocator noise)")
    ap.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                    help="skip the per-batch timing runs (KDC debug log)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "soak.json"))
    args = ap.parse_args()

    def log(msg):
        print(msg, flush=True)

    peak = peak_from_storm_json(args.storm_json)
    rate = args.rate or (0.9 * peak if peak else 500.0)
    rate = round(rate)
    os.makedirs(BENCH_DIR, exist_ok=True)
    outdir = os.path.join(BENCH_DIR, "storm", "kmpc-soak")
    os.makedirs(outdir, exist_ok=True)
    import tempfile
    import shutil
    work = tempfile.mkdtemp(prefix="soak-", dir=BENCH_DIR)
    t0 = time.time()
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cores": os.cpu_count(), "loadavg_start": os.getloadavg()[0]},
           "settings": "headline", "peak_from_storm_json": peak,
           "rate_basis": "90% of kmpc/headline peak" if (peak and not args.rate)
           else ("--rate" if args.rate else "no storm.json: 500/s")}
    log(f"== kmpc soak: {rate}/s for {args.duration:.0f} s (+{args.warmup:.0f} s warm-up), "
        f"{out['rate_basis']}; load average {os.getloadavg()[0]:.2f}")
    target = None
    try:
        target = storm_bench.kmpc_factory(os.path.join(work, "realm"), "headline", args.users)
        out["setup_s"] = round(time.time() - t0, 1)
        one = one_client(target, "one-client-window100", outdir, args.one_client_s)
        out["one_client_window_100ms"] = one
        log(f"  one client, batch_window_ms = 100: p50 {one['p50_ms']:.2f} ms, "
            f"p99 {one['p99_ms']:.2f} ms")

        # ---- the soak -------------------------------------------------
        samples = {n: [] for n in target.watch}
        samples["kmpc-storm"] = []
        result = {}

        # Warm-up at the soak's rate (caches, the KDC's lookaside cache of
        # replies, allocator arenas), then what each process holds.
        wu = storm_bench.run_storm(
            target, ["-r", rate, "-d", args.warmup, "-w", 1, "--timeout", target.timeout_s,
                     "--max-inflight", target.max_inflight, "--max-errors", 1000000],
            "soak-warmup", outdir, timeout=args.warmup + 120)
        mem_warm = malloc_state(target.watch)
        raw_after_warm = {n: rss_kib(pid) for n, pid in target.watch.items()}

        def storm():
            try:
                result["res"] = storm_bench.run_storm(
                    target, ["-r", rate, "-d", args.duration, "-w", 2,
                             "--timeout", target.timeout_s, "--max-inflight",
                             target.max_inflight, "--max-errors", 1000000,
                             "--time-limit", args.duration + 60],
                    "soak", outdir, timeout=args.duration + 120)
            except BaseException as e:  # reported below
                result["exc"] = e

        th = threading.Thread(target=storm, daemon=True)
        ts = time.time()
        th.start()
        gen_pid = None
        while th.is_alive():
            t = time.time() - ts
            for n, pid in target.watch.items():
                r = rss_kib(pid)
                if r is not None:
                    samples[n].append((round(t, 2), r))
            if gen_pid is None:
                gen_pid = find_child(os.getpid(), "kmpc-storm")
            if gen_pid:
                r = rss_kib(gen_pid)
                if r is not None:
                    samples["kmpc-storm"].append((round(t, 2), r))
            th.join(1.0)
        if "exc" in result:
            raise result["exc"]
        res = result["res"]
        mem_end = malloc_state(target.watch)
        t_warm = min(10.0, args.duration / 4)
        rss = {n: rss_summary(s, t_warm) for n, s in samples.items() if s}
        errors = res["failed_all_phases"] + res["dropped"] + wu["failed_all_phases"]
        trimmed = all(mem_warm.get(n) and mem_end.get(n) for n in target.watch)
        held = {n: {"raw_rss_after_warmup_kib": raw_after_warm.get(n),
                    "after_warmup": mem_warm.get(n), "after_soak": mem_end.get(n),
                    "in_use_growth_kib": (mem_end[n]["in_use_kib"] - mem_warm[n]["in_use_kib"])
                    if trimmed else None,
                    "rss_trimmed_growth_kib": (mem_end[n]["rss_trimmed_kib"]
                                               - mem_warm[n]["rss_trimmed_kib"])
                    if trimmed else None}
                for n in target.watch}
        if trimmed:
            grown = {n: v["in_use_growth_kib"] for n, v in held.items()
                     if v["in_use_growth_kib"] > args.rss_slack_kib}
        else:
            grown = {n: v["growth_over_warmup_kib"] for n, v in rss.items()
                     if v and n != "kmpc-storm"
                     and v["growth_over_warmup_kib"] > args.rss_slack_kib}
        lat = res["latency_us"]
        out["soak"] = {
            "offered": rate, "duration_s": args.duration, "warmup_s": args.warmup,
            "logins_per_s": res["logins_per_s"], "logins": res["ok"],
            "failed": res["failed_all_phases"], "dropped": res["dropped"],
            "retransmits": res["retransmits"], "errors": errors,
            "errors_by_code": res["errors"],
            **{k + "_ms": v / 1e3 for k, v in lat.items()
               if k in ("p50", "p90", "p99", "p999", "max")},
            "cpu": res["cpu"], "mpc": res.get("mpc"),
            "machine_steal_cores": res.get("machine_steal_cores"),
            "warmup_run": {"logins": wu["ok"], "failed": wu["failed_all_phases"],
                           "dropped": wu["dropped"]},
            "memory_criterion": out_crit(trimmed),
            "held_after_trim": held,
            "rss_warmup_level_until_s": t_warm, "rss_slack_kib": args.rss_slack_kib,
            "rss": rss, "rss_grown": grown,
            "rss_samples": {n: s for n, s in samples.items()},
            "pass": errors == 0 and not grown and res["logins_per_s"] >= 0.97 * rate,
        }
        s = out["soak"]
        log(f"  soak: {s['logins_per_s']:.0f}/s achieved of {rate}, {s['logins']} logins, "
            f"errors {errors} (failed {s['failed']}, dropped {s['dropped']}), "
            f"p50 {s['p50_ms']:.1f} ms p99 {s['p99_ms']:.1f} ms max {s['max_ms']:.1f} ms, "
            f"host steal {s['machine_steal_cores'] or 0:.3f} cores")
        for n, v in rss.items():
            if v:
                h = held.get(n)
                kept = (f"; malloc in use {h['after_warmup']['in_use_kib'] / 1024:.1f} -> "
                        f"{h['after_soak']['in_use_kib'] / 1024:.1f} MiB "
                        f"({h['in_use_growth_kib']:+d} KiB), RSS after malloc_trim "
                        f"{h['after_warmup']['rss_trimmed_kib'] / 1024:.1f} -> "
                        f"{h['after_soak']['rss_trimmed_kib'] / 1024:.1f} MiB"
                        if h and h["in_use_growth_kib"] is not None else "")
                log(f"    RSS {n:13s} first 10 s {v['warmup_level_kib'] / 1024:7.1f} MiB, "
                    f"max {v['max_kib'] / 1024:7.1f}, end {v['end_kib'] / 1024:7.1f} "
                    f"({v['growth_over_warmup_kib']:+d} KiB, 2nd-half slope "
                    f"{v['second_half_slope_kib_per_s']:+.1f} KiB/s){kept}")
        log(f"  memory judged on: {out_crit(trimmed)}")
        log(f"  soak {'PASSED' if s['pass'] else 'FAILED'}: zero errors "
            f"{'yes' if errors == 0 else 'NO'}, memory growth beyond warm-up "
            f"{'none' if not grown else grown}")

        save(args.out, out)  # the soak's figures, whatever happens below

        # ---- early flush ----------------------------------------------
        restart_kdc_with(target, {"early_flush": "true"})
        one = one_client(target, "one-client-early-flush", outdir, args.one_client_s)
        out["one_client_early_flush"] = one
        log(f"  one client, early_flush = true: p50 {one['p50_ms']:.2f} ms, "
            f"p99 {one['p99_ms']:.2f} ms")
        if args.breakdown:
            try:
                breakdown(target, out, outdir, rate, log)
            except Exception as e:  # figures above still count
                log(f"  breakdown runs failed: {e!r}")
                out["breakdown_error"] = repr(e)
                if not target.alive():
                    raise
        if peak:
            r50 = round(0.5 * peak)
            res = storm_bench.run_storm(
                target, ["-r", r50, "-d", 4, "-w", 2, "--timeout", target.timeout_s,
                         "--max-inflight", target.max_inflight, "--max-errors", 1000000],
                "early-flush-open-50pct", outdir)
            lat = res["latency_us"]
            out["early_flush_at_50pct_of_peak"] = {
                "offered": r50, "logins_per_s": res["logins_per_s"],
                "failed": res["failed_all_phases"], "dropped": res["dropped"],
                **{k + "_ms": v / 1e3 for k, v in lat.items() if k in ("p50", "p90", "p99")},
                "mpc": res.get("mpc")}
            e = out["early_flush_at_50pct_of_peak"]
            log(f"  early flush, open loop {r50}/s: {e['logins_per_s']:.0f}/s p50 "
                f"{e['p50_ms']:.1f} ms p99 {e['p99_ms']:.1f} ms failed {e['failed']} "
                f"dropped {e['dropped']}")
    except Exception:
        if target is not None:
            sys.stderr.write(target.logs()[-5000:] + "\n")
        raise
    finally:
        if target is not None:
            target.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["loadavg_end"] = os.getloadavg()[0]
    out["elapsed_s"] = round(time.time() - t0, 1)
    save(args.out, out)
    log(f"written: {args.out} ({out['elapsed_s']:.0f} s)")
    return 0 if out["soak"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
