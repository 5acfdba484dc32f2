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

.PHONY: all deps krb5 build test test-crypto test-unit test-integration \
        demo demo-stop bench bench-mpc bench-storm clean distclean help

all: build

help:
	@echo "make deps     install the Debian packages kmpc needs (apt-get)"
	@echo "make krb5     fetch, patch and build MIT krb5 1.20.1 into build/krb5"
	@echo "make build    build the C++ parts (CMake, build/cmake)"
	@echo "make test     everything above, then all tests"
	@echo "make demo     a realm on loopback, a login, a short storm"
	@echo "make demo-stop  stop the demo's KDC and MPC servers"
	@echo "make bench    benchmarks that print figures"

deps:
	@bash deploy/install-deps.sh

krb5: deps
	@JOBS=$(JOBS) bash krb5-patches/build-krb5.sh $(BUILD)

build: deps krb5
	@cmake -S . -B $(CMAKE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
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

test-integration: build
	@echo "== integration tests (pytest, real processes) =="
	@$(PYTHON) -m pytest -q -ra integration-tests

test: deps krb5 build
	@$(MAKE) -s --no-print-directory test-crypto
	@$(MAKE) -s --no-print-directory test-unit
	@$(MAKE) -s --no-print-directory test-integration

demo: build
	@bash deploy/demo.sh

demo-stop:
	@$(PYTHON) deploy/kmpc_cluster.py stop $(BUILD)/demo

bench-mpc: build
	@bash deploy/bench-mpc.sh

# Login storms (kmpc-storm) against the stock KDC and against kmpc, same
# machine, same run: figures, JSON and the latency/throughput plot in build/bench.
bench-storm: build
	@$(PYTHON) deploy/storm_bench.py --target stock,kmpc

bench: build
	@$(MAKE) -s --no-print-directory bench-mpc
	@$(MAKE) -s --no-print-directory bench-storm

clean:
	rm -rf $(CMAKE_BUILD)

distclean:
	rm -rf $(BUILD)
