#!/usr/bin/env python3
"""Latency against throughput from the storm sweep CSV (integration-tests/bench/storm_bench.py),
in the manner of Figure 5 of Araki, Furukawa, Lindell, Nof, Ohara (CCS 2016):
one curve per target and KDC setting, p50 solid and p99 dashed; hollow
markers are offered rates the KDC did not sustain (achieved < 97% of
offered, a failed or dropped login, or p99 over the target's bound).

Usage: plot_storm.py SWEEP.csv OUT.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    series = defaultdict(list)
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            if r.get("superseded") in ("1", "True"):
                continue  # a point that was run again: the re-run counts
            series[(r["target"], r["settings"])].append(r)
    if not series:
        sys.stderr.write("plot_storm: no rows in %s\n" % sys.argv[1])
        return 1
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((target, settings), rows) in enumerate(sorted(series.items())):
        rows.sort(key=lambda r: float(r["offered"]))
        c = colors[i % len(colors)]
        x = [float(r["offered"]) for r in rows]
        for col, style, what in (("p50_ms", "-", "p50"), ("p99_ms", "--", "p99")):
            y = [max(float(r[col]), 1e-3) for r in rows]
            ax.plot(x, y, style, color=c, label=f"{target} / {settings}, {what}")
            for xi, yi, r in zip(x, y, rows):
                ok = r["sustained"] in ("1", "True", "true")
                ax.plot([xi], [yi], "o", color=c, markersize=5,
                        markerfacecolor=c if ok else "none")
    ax.set_yscale("log")
    ax.set_xlabel("offered logins/s, open loop (AS exchange with encrypted timestamp)")
    ax.set_ylabel("login latency (ms, from the time the login was due)")
    ax.set_title("Login storm: latency vs throughput (cf. CCS 2016, Figure 5)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    print(f"plot: {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
