# kmpc front door.  `make demo` and `make test` are all a fresh Debian 12
# machine needs; every target installs its own prerequisites via `make deps`.
SHELL       := /bin/bash
.SHELLFLAGS := -eo pipefail -c
ROOT        := $(CURDIR)
BUILD       := $(ROOT)/build
KRB5_PREFIX := $(BUILD)/krb5
CMAKE_BUILD := $(BUILD)/cmake
PYTHON      := /usr/bin/python3
JOBS        ?= $(shell nproc)
export KMPC_ROOT := $(ROOT)
export KMPC_BUILD := $(BUILD)
export KRB5_PREFIX

.PHONY: all deps krb5 build test test-crypto test-unit test-integration test-mit-kmpc \
        demo demo-stop bench bench-mpc bench-storm bench-soak bench-netns bench-kpasswd \
        bench-replicas bench-cts bench-tgs bench-pkinit \
        bench-results clean distclean help

all: build

help:
	@echo "make deps     install the Debian packages kmpc needs (apt-get)"
	@echo "make krb5     fetch, patch and build MIT krb5 1.21.3 into build/krb5"
	@echo "make build    build the C++ parts (CMake, build/cmake)"
	@echo "make test     everything above, then all tests"
	@echo "make test-mit-kmpc [MODE=krbtgt|users|users-ctr-mpc|all|stock] [MIT_TESTS=\"tests/t_renew ...\"]"
	@echo "              MIT krb5's own KDC tests with their realms' keys in MPC clusters"
	@echo "make deb [DIST=trixie|bookworm]  Debian packages: patched krb5 and kmpc's"
	@echo "make test-packages [DIST=trixie|bookworm]  install them in a clean root and log in"
	@echo "make test-upgrades  from the 1.20.1-based packages: in place, and rolling through iprop"
	@echo "make demo     a realm on loopback, a login, a short storm"
	@echo "make demo-stop  stop the demo's KDC and MPC servers"
	@echo "make bench    benchmarks that print figures (build/bench/results.json)"
	@echo "make bench-netns  kmpc storms across network namespaces, then kinit at 0.1-2 ms between servers (root)"
	@echo "make bench-kpasswd  kpasswd through the cluster against MIT's kadmind (p50)"
	@echo "make bench-replicas  storms at a primary and a replica KDC against one cluster"
	@echo "make bench-cts  users with MPC-held aes256-cts keys: Debian's kinit and storms, both modes"
	@echo "make bench-tgs  Debian's kvno to a service whose aes256-cts key the cluster holds, both modes"
	@echo "make bench-pkinit  certificate, anonymous and anonymously armored logins: kmpc beside stock"

deps:
	@bash deploy/install-deps.sh

krb5: deps
	@JOBS=$(JOBS) bash krb5-patches/build-krb5.sh $(BUILD)

# KRB5_PREFIX=DIR on the command line (a patched krb5 installed elsewhere,
# e.g. another worktree's build/krb5): build and the targets after it use
# it and build no krb5 of their own.
KRB5_DEP := $(if $(filter $(BUILD)/krb5,$(KRB5_PREFIX)),krb5,)
# -g1: line tables and function names (backtraces, perf, valgrind) without
# the full DWARF of -g, which is ~30% of this tree's compile time (gRPC,
# protobuf, gtest templates). The Debian packages keep dpkg-buildflags' -g.
DEBUG_FLAGS ?= -g1
build: deps $(KRB5_DEP)
	@cmake -S . -B $(CMAKE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_FLAGS) -DNDEBUG" \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(DEBUG_FLAGS) -DNDEBUG" \
	  -DKRB5_PREFIX=$(KRB5_PREFIX) >/dev/null
	@cmake --build $(CMAKE_BUILD) -j $(JOBS)

# MIT's own crypto test suite on the patched tree.
test-crypto: krb5
	@echo "== MIT make check (src/lib/crypto) =="
	@flock $(BUILD)/.krb5.lock $(MAKE) -s -C $(BUILD)/krb5-obj/lib/crypto check > $(BUILD)/krb5-crypto-check.log 2>&1 \
	  || { tail -n 60 $(BUILD)/krb5-crypto-check.log; echo "MIT crypto make check FAILED"; exit 1; }
	@echo "MIT crypto make check passed (log: build/krb5-crypto-check.log)"

test-unit: build
	@echo "== C++ unit tests (ctest) =="
	@cd $(CMAKE_BUILD) && ctest --output-on-failure -j $(JOBS)

# The integration tests mostly wait on their daemons (~0.3 of a core each):
# PYTEST_WORKERS files run at once (pytest-xdist, a test file's tests in
# order on one worker: their module fixtures hold a realm), then the files
# marked serial (storms, latencies: conftest.py) one by one; 1: all in one
# run, one by one.
PYTEST_WORKERS ?= 3
PYTEST := KMPC_CMAKE_BUILD=$(CMAKE_BUILD) $(PYTHON) -m pytest -q -ra --durations=25
test-integration: build
	@echo "== integration tests (pytest, real processes) =="
	@$(if $(filter 1,$(PYTEST_WORKERS)),$(PYTEST) integration-tests, \
	  rc=0; $(PYTEST) -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" integration-tests || rc=$$?; \
	  echo "== integration tests that need the machine to themselves (serial) =="; \
	  $(PYTEST) -m serial integration-tests || rc=$$?; exit $$rc)

# MIT's own KDC-facing Python tests (src/tests/t_*.py ...) on MIT's k5test
# harness in its kmpc mode (krb5's k5test kmpc-mode patch): every realm a test creates
# gets three MPC servers and its krbtgt key (MODE=krbtgt), or also its
# password principals' keys (MODE=users: as aes*-cts-hmac-sha1-96 handles,
# clients unchanged; MODE=users-ctr-mpc: as aes*-ctr-mpc keys), in them;
# MODE=all: every key but K/M's (services' and kadmind's too);
# MODE=stock runs them unchanged. Logs and summary in build/mit-kmpc/MODE.
# MIT_TESTS: a subset ("tests/t_renew tests/t_u2u"); MIT_OUT: another log
# directory; MIT_NO_BUILD=1: use the trees as they are (the pytest in
# integration-tests/test_mit_kmpc.py, which runs after the build).
MODE      ?= krbtgt
MIT_TESTS ?=
MIT_OUT   ?=
test-mit-kmpc: $(if $(MIT_NO_BUILD),,build)
	@KMPC_BUILD=$(BUILD) KMPC_CMAKE_BUILD=$(CMAKE_BUILD) $(PYTHON) integration-tests/mit_kmpc.py \
	  --mode $(MODE) $(if $(MIT_TESTS),--tests "$(MIT_TESTS)") $(if $(MIT_OUT),--out "$(MIT_OUT)")

test: deps krb5 build
	@$(MAKE) -s --no-print-directory test-crypto
	@$(MAKE) -s --no-print-directory test-unit
	@$(MAKE) -s --no-print-directory test-integration

demo: build
	@KMPC_CMAKE_BUILD=$(CMAKE_BUILD) KMPC_MPC_BIN_DIR=$(CMAKE_BUILD)/mpc-server $(PYTHON) integration-tests/demo.py

demo-stop:
	@$(PYTHON) integration-tests/kmpc_harness/cluster.py stop $(BUILD)/demo

bench-mpc: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_MPC)

# Login storms (kmpc-storm) against the stock KDC and against kmpc, then
# the same sweep against kmpc with its servers in --security=malicious, same
# machine, same run: figures, JSON and the latency/throughput plot in build/bench.
bench-storm: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_STORM)

# Soaks at 90% of kmpc's peak (from storm.json, or BENCH_SOAK_RATE logins/s):
# BENCH_SOAK_RUNS runs of BENCH_SOAK_S seconds one after another in the same
# processes, each clean only with zero errors and the anonymous memory of the
# KDC and of each MPC server flat (read from /proc, nothing attached to
# them); then kmpc's one-client latency with the 100 ms window and with
# early flush.  `make bench-soak BENCH_SOAK_S=600`: one 10-minute soak.
BENCH_SOAK_S    ?= 60
BENCH_SOAK_RUNS ?= 1
BENCH_SOAK_RATE ?=
bench-soak: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_SOAK)

# Password changes (kpasswd through kadmind) with the key dealer against the
# same kadmind writing keys to the KDB: 100 alternating runs each.
bench-kpasswd: build
	@mkdir -p $(BUILD)/bench
	@KMPC_CMAKE_BUILD=$(CMAKE_BUILD) $(PYTHON) integration-tests/bench/kpasswd_bench.py --early-flush \
	  --json $(BUILD)/bench/kpasswd.json

# A primary and a replica KDC against one cluster (integration-tests/kmpc_harness/replica.py):
# login storms at one KDC, then at both in parallel (build/bench/replicas.json).
bench-replicas: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_REPLICAS)

# Users whose aes256-cts-hmac-sha1-96 keys the cluster holds, servers
# with their defaults (malicious, small Runs over masked wires: half the
# rounds), the same on Rep3 ANDs ("rep3") and semi-honest: Debian's /usr/bin/kinit,
# one client, without and with FAST (kinit -T); BENCH_CTS_USERS users named
# as in a directory (2-40 characters, dotted, some with instances) against
# as many with names of one length, closed-loop storms with MIT's and
# Heimdal's clients, some sending addresses (integration-tests/bench/
# cts_realm.py: logins/s ratio, Runs per 1,000 logins, compiles, shapes,
# CPU per login); their peak sweep beside a storm of users whose keys are
# in the KDB (krbtgt-only), same realm (build/bench/cts.json, its target
# rows printed at the end; bench_results.py's "cts" section). Issue 48's acceptance
# realm: make bench-cts BENCH_CTS_USERS=2000.
BENCH_CTS_USERS ?= 200
bench-cts: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_CTS)
	@$(BENCH_RESULTS) --cts-rows

# TGS exchanges to a service whose aes256-cts key the cluster holds (moved
# with kmpc-admin share --from-existing --service), servers malicious then
# semi-honest: Debian's /usr/bin/kvno -k, one client (clients of varied
# name lengths in turn; cold first tickets apart), beside a service whose
# key is in the KDB; Runs, ANDs, AND rounds and each server's CPU per TGS;
# the login+TGS mix with either service (build/bench/tgs.json, targets
# judged here and in results.json; 4-5 minutes on a loaded host).
bench-tgs: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_TGS)

# PKINIT with Debian's kinit and krb5-pkinit, one client: a certificate
# login (kinit -X), anonymous PKINIT (kinit -n) and a password login armored
# with an anonymous ccache (kinit -T), stock MIT's KDC (every key in the
# KDB) beside a kmpc realm (servers malicious, krbtgt and users' aes256-cts
# keys in the cluster) in the same run, alternated; the module's Runs per
# login (build/bench/pkinit.json, bench_results.py's "pkinit" section;
# under 3 minutes).
bench-pkinit: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_PKINIT)

# The KDC, the three MPC servers and the clients in their own network
# namespaces (10.77.0.0/24 inside them only), netem delay and rate; then
# Debian's kinit, one client, NETNS_DELAY_LOGINS logins of an aes256-cts
# user and of a krbtgt-only user at each one-way delay of NETNS_RING_DELAYS
# (ms) between the MPC servers (netem, or a delaying relay on the ring's
# links where the kernel has no netem), beside rounds x delay
# (integration-tests/bench/ring_delay.py; NETNS_RING_DELAYS= skips it).
NETNS_RTT_MS ?= 0.13
NETNS_RATE   ?= 10gbit
NETNS_RING_DELAYS  ?= 0.1,0.5,2
NETNS_DELAY_LOGINS ?= 15
bench-netns: build
	@$(BENCH_SNAPSHOT)
	@$(BENCH_NETNS)

# results.json and the table from what the steps above wrote.
bench-results:
	@$(BENCH_RESULTS)

# Every step uses a copy of this tree's binaries taken when it starts
# (build/bench/bin), not the most recently built copy among build/cmake*:
# other work may rebuild build/cmake during the run.
KMPC_BENCH_BUILD ?= $(BUILD)/bench/bin
BENCH_SNAPSHOT = rm -rf $(BUILD)/bench/bin && \
	mkdir -p $(BUILD)/bench/bin/mpc-server $(BUILD)/bench/bin/kdc-plugin && \
	cp -p $(addprefix $(CMAKE_BUILD)/mpc-server/,kmpc-mpc-server kmpc-admin kmpc-mpc-client kmpc-mpc-bench \
	  kmpc-storm) $(BUILD)/bench/bin/mpc-server/ && \
	cp -p $(CMAKE_BUILD)/kdc-plugin/libkmpc_kdc.so $(BUILD)/bench/bin/kdc-plugin/ && \
	{ cp -p $(CMAKE_BUILD)/kdc-plugin/kmpc-kdb-handle $(BUILD)/bench/bin/kdc-plugin/ \
	  2>/dev/null || true; } && \
	{ cp -p $(CMAKE_BUILD)/mpc-server/libkmpc_dealer.so $(BUILD)/bench/bin/mpc-server/ \
	  2>/dev/null || true; } && \
	{ cp -p $(CMAKE_BUILD)/mpc-server/kmpc-ring-relay $(BUILD)/bench/bin/mpc-server/ \
	  2>/dev/null || true; }
BENCH_ENV     = KMPC_CMAKE_BUILD=$(KMPC_BENCH_BUILD) \
                KMPC_MPC_BIN_DIR=$(KMPC_BENCH_BUILD)/mpc-server \
                KMPC_STORM=$(KMPC_BENCH_BUILD)/mpc-server/kmpc-storm
BENCH_MPC     = $(BENCH_ENV) bash integration-tests/bench/bench-mpc.sh
BENCH_STORM   = $(BENCH_ENV) $(PYTHON) integration-tests/bench/storm_bench.py --target stock,kmpc,kmpc-malicious
BENCH_SOAK    = $(BENCH_ENV) $(PYTHON) integration-tests/bench/storm_soak.py --duration $(BENCH_SOAK_S) \
                --runs $(BENCH_SOAK_RUNS) $(if $(BENCH_SOAK_RATE),--rate $(BENCH_SOAK_RATE))
BENCH_NETNS   = $(BENCH_ENV) $(PYTHON) integration-tests/bench/netns_bench.py --rtt-ms $(NETNS_RTT_MS) \
                --rate $(NETNS_RATE) --ring-delays "$(NETNS_RING_DELAYS)" \
                --delay-logins $(NETNS_DELAY_LOGINS)
BENCH_RESULTS = $(PYTHON) integration-tests/bench/bench_results.py
BENCH_REPLICAS = $(BENCH_ENV) $(PYTHON) integration-tests/bench/replica_bench.py
BENCH_CTS     = $(BENCH_ENV) $(PYTHON) integration-tests/bench/cts_bench.py --users $(BENCH_CTS_USERS)
BENCH_TGS     = $(BENCH_ENV) $(PYTHON) integration-tests/bench/tgs_bench.py
BENCH_PKINIT  = $(BENCH_ENV) $(PYTHON) integration-tests/bench/pkinit_bench.py

# All of it in one go after one build (the same binaries throughout; ~35 min
# on a 2-core machine, the build not counted), the soak three times in a row
# (BENCH_SOAK_RUNS = 3 here). A failed soak or netns step is reported and the results
# are still written; the netns step is skipped when the earlier steps took
# more than BENCH_NETNS_AFTER_S (they take ~2,000 s since the aes*-cts and
# TGS steps joined: run `make bench-netns` on its own, or raise it).
BENCH_NETNS_AFTER_S ?= 750
bench: BENCH_SOAK_RUNS = 3
bench: build
	@$(BENCH_SNAPSHOT)
	@start=$$(date +%s); \
	rm -f $(BUILD)/bench/soak.json $(BUILD)/bench/netns.json $(BUILD)/bench/cts.json \
	  $(BUILD)/bench/tgs.json $(BUILD)/bench/pkinit.json $(BUILD)/bench/results.json; \
	$(BENCH_MPC); \
	$(BENCH_STORM); \
	$(BENCH_SOAK) || echo "bench: the soak did not pass (above)"; \
	$(BENCH_REPLICAS) || echo "bench: the replicas step failed (above)"; \
	$(BENCH_CTS) || echo "bench: the aes256-cts step failed (above)"; \
	$(BENCH_TGS) || echo "bench: the TGS-to-a-cts-service step failed (above)"; \
	$(BENCH_PKINIT) || echo "bench: the PKINIT step failed (above)"; \
	el=$$(( $$(date +%s) - start )); \
	if [ $$el -lt $(BENCH_NETNS_AFTER_S) ]; then \
	  $(BENCH_NETNS) || echo "bench: the netns step failed (above)"; \
	else echo "bench: netns step skipped ($$el s used; run make bench-netns)"; fi; \
	$(BENCH_RESULTS); \
	echo "make bench: $$(( $$(date +%s) - start )) s (after the build)"

# Debian packages (README.md, "Packages"): the kmpc build of Debian 13's
# krb5 1.21.3 source package (krb5-patches/series as quilt patches, version
# +kmpcN, "~deb12" on Debian 12: deploy/deb/build-krb5-debs.sh) and
# kmpc-mpc-server, kmpc-kdc, kmpc-admin, for the host's release in
# build/deb; lintian on kmpc's. DIST=trixie (or bookworm) builds them in a
# debootstrapped root of that release instead (build/DIST/deb, root kept in
# build/DIST/buildroot). integration-tests/test_packages.py installs them:
# `make test` for the host's release, `make test-packages DIST=...` for one.
HOST_DIST := $(shell . /etc/os-release && echo $$VERSION_CODENAME)
DIST      ?= $(HOST_DIST)
.PHONY: deb test-packages
deb: deps
	@if [ "$(DIST)" = "$(HOST_DIST)" ]; then bash deploy/deb/make-deb.sh $(BUILD); \
	else bash deploy/deb/make-deb-dist.sh $(DIST) $(BUILD); fi

test-packages: deps
	@$(if $(filter $(HOST_DIST),$(DIST)),,$(MAKE) -s --no-print-directory deb DIST=$(DIST) &&) \
	  KMPC_PKG_DIST=$(DIST) $(PYTHON) -m pytest -q -ra --durations=10 integration-tests/test_packages.py

# Upgrades from the 1.20.1-based packages (docs/admin-guide.md, "Upgrades";
# integration-tests/test_upgrades.py, root): in place, and rolling through
# iprop. The old packages are make deb's of UPG_FROM, the last 1.20.1-based
# main, built from git history (a clone of this repository checked out at
# it, in build/upgrade-from) once, into UPG_OLD_DEBS (any directory: keep it
# outside the tree to share it between checkouts). Not part of `make test`:
# the old build takes as long as a `make deb`.
UPG_FROM     ?= eae4f5c
UPG_OLD_DEBS ?= $(BUILD)/upgrade-from/debs
.PHONY: upgrade-old-debs test-upgrades
upgrade-old-debs: deps
	@if ls $(UPG_OLD_DEBS)/kmpc-kdc_*.deb $(UPG_OLD_DEBS)/krb5-kdc_1.20.1-*.deb >/dev/null 2>&1; then \
	  echo "[upgrades] 1.20.1-based packages of $(UPG_FROM) in $(UPG_OLD_DEBS)"; else \
	  git cat-file -e $(UPG_FROM)^{commit} 2>/dev/null || { echo "error: commit $(UPG_FROM) is not in" \
	    "this clone's history (git fetch --unshallow)" >&2; exit 1; }; \
	  rm -rf $(BUILD)/upgrade-from/src && mkdir -p $(BUILD)/upgrade-from $(UPG_OLD_DEBS) && \
	  git clone -q --no-checkout $(ROOT) $(BUILD)/upgrade-from/src && \
	  git -C $(BUILD)/upgrade-from/src checkout -q --detach $(UPG_FROM) && \
	  t0=$$(date +%s) && bash $(BUILD)/upgrade-from/src/deploy/deb/make-deb.sh $(BUILD)/upgrade-from/build && \
	  cp $$(ls $(BUILD)/upgrade-from/build/deb/*.deb | grep -v -- -dbgsym_) $(UPG_OLD_DEBS)/ && \
	  echo "[upgrades] built the packages of $(UPG_FROM) in $$(( $$(date +%s) - t0 )) s: $(UPG_OLD_DEBS)"; fi

test-upgrades: deps deb upgrade-old-debs
	@KMPC_UPG_OLD_DEBS=$(UPG_OLD_DEBS) $(PYTHON) -m pytest -q -ra --durations=10 \
	  integration-tests/test_upgrades.py

# krb5-patches/ regenerated from the kmpc branch of build/krb5-src, then
# checked (docs/krb5-patches.md): no patch may remove a line an earlier one
# added.  KRB5_BRANCH picks another branch.
.PHONY: krb5-series
krb5-series:
	@bash krb5-patches/export-series.sh -s $(BUILD)/krb5-src -b $(or $(KRB5_BRANCH),kmpc)
	@$(PYTHON) krb5-patches/check-series.py --src $(BUILD)/krb5-src

clean:
	rm -rf $(CMAKE_BUILD)

distclean:
	rm -rf $(BUILD)
