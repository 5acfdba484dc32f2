# What every client of the three servers shares (kmpc-admin,
# kmpc-mpc-client, the KDC module), in three layers so that each links only
# what it uses:
#   kmpc_cluster_client    reveal: share-copy check and recombination
#                          (protobuf messages only, no gRPC: the KDC
#                          module's core uses it);
#   kmpc_cluster_channels  the client's PEM files and the three mTLS
#                          channels pinned to their parties, and what names
#                          a failed call (gRPC; the KDC module's transport);
#   kmpc_cluster_admin     the Admin service: Health, ListKeys, Metrics,
#                          DeleteKey, and the all-or-nothing deal + PutKey
#                          (the dealing of kmpc_deal; kmpc-admin, the key
#                          dealer, kmpc-mpc-client and kmpc-mpc-bench).
add_library(kmpc_cluster_client STATIC
  ${CMAKE_CURRENT_LIST_DIR}/client/reveal.cc
)
target_include_directories(kmpc_cluster_client PUBLIC "${CMAKE_CURRENT_LIST_DIR}")
target_link_libraries(kmpc_cluster_client PUBLIC kmpc_proto_msgs
  absl::status absl::strings absl::span OpenSSL::Crypto)
target_compile_options(kmpc_cluster_client PRIVATE -Wall -Wextra)

add_executable(kmpc_cluster_client_test ${CMAKE_CURRENT_LIST_DIR}/client/reveal_test.cc)
target_link_libraries(kmpc_cluster_client_test PRIVATE kmpc_cluster_client
  GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cluster_client_test TEST_PREFIX "client." DISCOVERY_TIMEOUT 60)

if(TARGET kmpc_proto)
  add_library(kmpc_cluster_channels STATIC
    ${CMAKE_CURRENT_LIST_DIR}/client/channels.cc)
  target_link_libraries(kmpc_cluster_channels PUBLIC kmpc_cluster_client
    kmpc_proto absl::status absl::statusor absl::strings absl::time
    OpenSSL::Crypto)
  target_compile_options(kmpc_cluster_channels PRIVATE -Wall -Wextra)
endif()

if(TARGET kmpc_proto AND TARGET kmpc_deal AND TARGET kmpc_contract)
  # The dealing of PutKey is kmpc_deal's (core.cmake), not kmpc_core's: the
  # key dealer in kadmind links this library and no MPC engine.
  add_library(kmpc_cluster_admin STATIC
    ${CMAKE_CURRENT_LIST_DIR}/client/admin_client.cc)
  target_link_libraries(kmpc_cluster_admin PUBLIC kmpc_cluster_channels
    kmpc_deal kmpc_contract absl::status absl::statusor absl::strings)
  target_compile_options(kmpc_cluster_admin PRIVATE -Wall -Wextra)

  # In-process servers over mTLS (deploy/gen-certs.sh's certificates,
  # through the server tests' test_util.h): PEM errors, party pinning,
  # all-or-nothing PutKey.
  add_executable(kmpc_cluster_admin_test
    ${CMAKE_CURRENT_LIST_DIR}/client/admin_client_test.cc)
  target_include_directories(kmpc_cluster_admin_test PRIVATE
    "${CMAKE_CURRENT_LIST_DIR}/test/server")
  target_compile_definitions(kmpc_cluster_admin_test PRIVATE
    KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_link_libraries(kmpc_cluster_admin_test PRIVATE kmpc_cluster_admin
    GTest::gtest GTest::gtest_main)
  gtest_discover_tests(kmpc_cluster_admin_test TEST_PREFIX "client."
    DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)
endif()
