# kmpc_cluster_client: what every client of the three servers shares
# (kmpc-admin, kmpc-mpc-client, the KDC module): reveal with the share-copy
# check and recombination.
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
