# The server (see CMakeLists.txt): TLS ring, LMDB share store, scheduler
# and gRPC services, the server binary, the client CLI and their tests.
pkg_check_modules(KMPC_LMDB REQUIRED IMPORTED_TARGET lmdb)
set(_srv "${CMAKE_CURRENT_SOURCE_DIR}")

# Ring over TLS and the server's logging (no gRPC here).
add_library(kmpc_net_tls STATIC
  src/net/frame.cc src/net/tls_conn.cc src/net/tls_ring.cc src/util/log.cc
  src/util/atomic_file.cc)
target_include_directories(kmpc_net_tls PUBLIC "${_srv}/src")
target_link_libraries(kmpc_net_tls PUBLIC
  absl::status absl::statusor absl::strings absl::time absl::span
  OpenSSL::SSL OpenSSL::Crypto Threads::Threads)

add_library(kmpc_store STATIC src/store/share_store.cc)
target_include_directories(kmpc_store PUBLIC "${_srv}/src")
target_link_libraries(kmpc_store PUBLIC
  absl::status absl::statusor absl::strings absl::span
  PkgConfig::KMPC_LMDB OpenSSL::Crypto)

# Process memory for Prometheus (mallinfo2, /proc/self/statm): the servers
# and the KDC module.
add_library(kmpc_process_metrics STATIC src/util/process_metrics.cc)
target_include_directories(kmpc_process_metrics PUBLIC "${_srv}/src")
target_link_libraries(kmpc_process_metrics PUBLIC prometheus-cpp::core)

# A GoogleTest program of the server, run by ctest:
#   kmpc_server_test(NAME TIMEOUT_S SOURCES... LIBS libs...)
function(kmpc_server_test name timeout)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout})
endfunction()

# Unit tests of the parts without gRPC.
kmpc_server_test(kmpc_server_unit_test 120
  SOURCES test/server/frame_test.cc test/server/share_store_test.cc
          test/server/tls_ring_test.cc test/server/tls_conn_test.cc
  LIBS kmpc_net_tls kmpc_store)

# The scheduler over a ring interface (ring.h: TLS, in memory), the key
# cache, the ENCRYPT states, the gRPC services and their authorization.
set(KMPC_SERVICE_SOURCES
  src/service/auth.cc src/service/breaker.cc src/service/key_cache.cc
  src/service/one_use_states.cc
  src/service/memory_scheduler_ring.cc src/service/metrics.cc
  src/service/scheduler.cc src/service/scheduler_queue.cc
  src/service/scheduler_control.cc src/service/services.cc
  src/service/keyops_service.cc src/service/admin_service.cc
  src/service/request_checks.cc
  src/service/tls_scheduler_ring.cc src/service/wipe_interceptor.cc
  src/service/request_wipe.cc)
set(KMPC_SERVICE_LIBS
  kmpc_core kmpc_proto kmpc_net_tls kmpc_store absl::synchronization
  kmpc_process_metrics prometheus-cpp::core)
add_library(kmpc_service STATIC ${KMPC_SERVICE_SOURCES})
target_include_directories(kmpc_service PUBLIC "${_srv}/src")
target_link_libraries(kmpc_service PUBLIC ${KMPC_SERVICE_LIBS})

# The server binary (src/main.cc) over a service library; its engine
# flags and the options they make (src/engine_flags.cc) apart, tested alone.
add_library(kmpc_engine_flags STATIC src/engine_flags.cc)
target_include_directories(kmpc_engine_flags PUBLIC "${_srv}/src")
target_link_libraries(kmpc_engine_flags PUBLIC kmpc_core kmpc_net_tls absl::flags)
set(KMPC_SERVER_MAIN_LIBS kmpc_engine_flags absl::flags absl::flags_parse prometheus-cpp::pull)
add_executable(kmpc-mpc-server src/main.cc)
target_link_libraries(kmpc-mpc-server PRIVATE kmpc_service ${KMPC_SERVER_MAIN_LIBS})

# Test-only: the server with the cheating-server harness (test/cheat.h;
# KMPC_CHEAT in scheduler.cc) for integration-tests/test_malicious.py. Built
# in the build tree, never installed or packaged.
add_library(kmpc_service_cheat STATIC ${KMPC_SERVICE_SOURCES})
target_include_directories(kmpc_service_cheat PUBLIC "${_srv}/src" "${_srv}/test")
target_compile_definitions(kmpc_service_cheat PRIVATE KMPC_CHEAT_HARNESS)
target_link_libraries(kmpc_service_cheat PUBLIC ${KMPC_SERVICE_LIBS})
add_executable(kmpc-mpc-server-cheat src/main.cc)
target_link_libraries(kmpc-mpc-server-cheat PRIVATE
  kmpc_service_cheat ${KMPC_SERVER_MAIN_LIBS})

# The command-line tools on the cluster client library: kmpc-mpc-client
# (tools/mpc_client/, a file per command: admin commands, job batches,
# Sign, the fuzzer) and kmpc-mpc-bench (the keystream and aes*-cts
# benchmarks, which evaluate the RFC 3962 circuits in the clear:
# kmpc_core), over what both share (tools/cluster_tool.h).
add_library(kmpc_cluster_tool STATIC tools/cluster_tool.cc)
target_link_libraries(kmpc_cluster_tool PUBLIC
  kmpc_cluster_admin absl::flags absl::strings absl::time OpenSSL::Crypto)
target_compile_options(kmpc_cluster_tool PRIVATE -Wall -Wextra)
add_executable(kmpc-mpc-client tools/mpc_client/main.cc tools/mpc_client/cmd_keys.cc
  tools/mpc_client/cmd_jobs.cc tools/mpc_client/cmd_sign.cc tools/mpc_client/cmd_fuzz.cc)
target_link_libraries(kmpc-mpc-client PRIVATE
  kmpc_cluster_tool absl::flags absl::flags_parse absl::str_format)
target_compile_options(kmpc-mpc-client PRIVATE -Wall -Wextra)
add_executable(kmpc-mpc-bench tools/mpc_bench.cc)
target_link_libraries(kmpc-mpc-bench PRIVATE
  kmpc_cluster_tool kmpc_core absl::flags absl::flags_parse)
target_compile_options(kmpc-mpc-bench PRIVATE -Wall -Wextra)

# Tests of the service layer over kmpc_service: test/server/NAME_test.cc
# as kmpc_NAME_test, with its ctest timeout in seconds.
#   keyops_service         three parties' KeyOpsService end to end, no gRPC
#                          (test/server/services_testing.h)
#   admin_service          AdminService on those parties: SetKeyKind,
#                          DeleteKeys, ResetBreaker
#   services               the test-only request recorder, ToGrpcStatus
#   request_checks         the KeyOps and Admin requests' checks, alone
#   wipe_interceptor       KeyOps responses' shares wiped once serialized
#   request_wipe           received requests: no freed block holds a byte of
#                          their shares (service/request_wipe.h; free() hooked)
#   scheduler              three Schedulers over the in-memory ring
#   scheduler_queue        one Scheduler's queue: timeouts, admission, stop
#   scheduler_control      the scheduler's control messages
#   auth                   client authorization over real gRPC+mTLS: CRL
#                          (revocation, reload) and certificate pins
#   one_use_states         the one-use ENCRYPT and PAD states
#   key_cache              the key cache over a real share store
#   metrics                the server's Prometheus metrics
#   breaker                the deviation breaker: window, trip, reset,
#                          persistence; the scheduler refusing while open
#   memory_scheduler_ring  the in-process ring of the scheduler and service
#                          tests (service/memory_scheduler_ring.cc)
#   tls_scheduler_ring     the TLS ring as the scheduler's ring
foreach(_test IN ITEMS keyops_service:180 admin_service:120 services:60
                       request_checks:30 wipe_interceptor:60 request_wipe:60
                       scheduler:120 scheduler_queue:60 scheduler_control:30
                       auth:120
                       one_use_states:60 key_cache:60 metrics:60 breaker:60
                       memory_scheduler_ring:60 tls_scheduler_ring:60)
  string(REPLACE ":" ";" _test "${_test}")
  list(GET _test 0 _name)
  list(GET _test 1 _timeout)
  kmpc_server_test(kmpc_${_name}_test ${_timeout}
    SOURCES test/server/${_name}_test.cc LIBS kmpc_service)
endforeach()

# The engine flags' options, defaults and refusals (src/engine_flags.cc).
kmpc_server_test(kmpc_engine_flags_test 30
  SOURCES test/server/engine_flags_test.cc LIBS kmpc_engine_flags GTest::gmock)

# main.cc through the built binary: flags, refusals, --flagfile, exit codes.
kmpc_server_test(kmpc_main_test 120
  SOURCES test/server/main_test.cc LIBS absl::strings GTest::gmock)
target_compile_definitions(kmpc_main_test PRIVATE
  KMPC_MPC_SERVER="$<TARGET_FILE:kmpc-mpc-server>")
add_dependencies(kmpc_main_test kmpc-mpc-server)

# The log line format and KMPC_VLOG's gate (util/log.cc).
kmpc_server_test(kmpc_log_test 30
  SOURCES test/server/log_test.cc LIBS kmpc_net_tls)

# State files written whole or not at all (util/atomic_file.cc).
kmpc_server_test(kmpc_atomic_file_test 30
  SOURCES test/server/atomic_file_test.cc LIBS kmpc_net_tls)

# Hex decoding that refuses bad input (util/hex.h).
kmpc_server_test(kmpc_hex_test 30
  SOURCES test/server/hex_test.cc LIBS kmpc_net_tls)

# The process memory gauges (util/process_metrics.cc).
kmpc_server_test(kmpc_process_metrics_test 30
  SOURCES test/server/process_metrics_test.cc LIBS kmpc_process_metrics)
