# Server half of mpc-server (see CMakeLists.txt): TLS ring, LMDB share
# store, gRPC services, the server binary, the client CLI and their tests.
pkg_check_modules(KMPC_LMDB REQUIRED IMPORTED_TARGET lmdb)
set(_srv "${CMAKE_CURRENT_SOURCE_DIR}")

# Ring over TLS and the server's logging (no gRPC here).
add_library(kmpc_net_tls STATIC
  src/net/frame.cc src/net/log.cc src/net/tls_conn.cc src/net/tls_ring.cc)
target_include_directories(kmpc_net_tls PUBLIC "${_srv}/src")
target_link_libraries(kmpc_net_tls PUBLIC
  absl::status absl::statusor absl::strings absl::time absl::span
  OpenSSL::SSL OpenSSL::Crypto Threads::Threads)

add_library(kmpc_store STATIC src/store/share_store.cc)
target_include_directories(kmpc_store PUBLIC "${_srv}/src")
target_link_libraries(kmpc_store PUBLIC
  absl::status absl::statusor absl::strings absl::span
  PkgConfig::KMPC_LMDB OpenSSL::Crypto)

# Unit tests of the parts without gRPC.
add_executable(kmpc_server_unit_test
  test/server/frame_test.cc test/server/share_store_test.cc
  test/server/tls_ring_test.cc)
target_link_libraries(kmpc_server_unit_test PRIVATE
  kmpc_net_tls kmpc_store GTest::gtest_main)
target_compile_definitions(kmpc_server_unit_test PRIVATE
  KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME kmpc_server_unit_test COMMAND kmpc_server_unit_test)
set_tests_properties(kmpc_server_unit_test PROPERTIES TIMEOUT 120)

if(TARGET kmpc_core AND TARGET kmpc_proto)
  add_library(kmpc_service STATIC
    src/service/scheduler.cc src/service/metrics.cc src/service/services.cc
    src/service/auth.cc)
  target_include_directories(kmpc_service PUBLIC "${_srv}/src")
  target_link_libraries(kmpc_service PUBLIC
    kmpc_core kmpc_proto kmpc_net_tls kmpc_store absl::synchronization)

  add_executable(kmpc-mpc-server src/main.cc)
  target_link_libraries(kmpc-mpc-server PRIVATE
    kmpc_service absl::flags absl::flags_parse)

  add_executable(kmpc-mpc-client tools/mpc_client.cc)
  target_link_libraries(kmpc-mpc-client PRIVATE
    kmpc_core kmpc_proto absl::flags absl::flags_parse absl::strings
    OpenSSL::Crypto)

  add_executable(kmpc_service_test test/server/service_test.cc)
  target_link_libraries(kmpc_service_test PRIVATE kmpc_service GTest::gtest_main)
  target_compile_definitions(kmpc_service_test PRIVATE
    KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME kmpc_service_test COMMAND kmpc_service_test)
  set_tests_properties(kmpc_service_test PROPERTIES TIMEOUT 180)

  # Client authorization over real gRPC+mTLS: CRL (revocation, reload) and
  # certificate pins (service/auth.h).
  add_executable(kmpc_auth_test test/server/auth_test.cc)
  target_link_libraries(kmpc_auth_test PRIVATE kmpc_service GTest::gtest_main)
  target_compile_definitions(kmpc_auth_test PRIVATE
    KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_test(NAME kmpc_auth_test COMMAND kmpc_auth_test)
  set_tests_properties(kmpc_auth_test PROPERTIES TIMEOUT 120)
else()
  message(STATUS "mpc-server: kmpc_core or kmpc_proto missing; "
                 "building the server without engine parts")
endif()
