# kmpc_cts: the standard enctypes aes128/aes256-cts-hmac-sha1-96 (RFC 3961,
# 3962) on replicated shares: a bitsliced boolean-circuit layer over an
# abstract AND engine (clear or Rep3), SHA-1 / HMAC with low-depth adders,
# AES both ways, CBC-CTS, and the dealer's per-usage material, and the
# engine's aes*-cts jobs over them.
# Part of kmpc_core: the engine runs these circuits as the aes*-cts jobs
# (engine/cts_jobs.h) and the dealer deals their material (key_shares.cc).
target_sources(kmpc_core PRIVATE
  ${KMPC_CORE_ROOT}/src/cts/circuit.cc
  ${KMPC_CORE_ROOT}/src/cts/sha1.cc
  ${KMPC_CORE_ROOT}/src/cts/aes_circuit.cc
  ${KMPC_CORE_ROOT}/src/cts/cts.cc
  ${KMPC_CORE_ROOT}/src/engine/cts_jobs.cc
  ${KMPC_CORE_ROOT}/src/engine/cts_program_cache.cc
)
add_library(kmpc_cts INTERFACE)
target_link_libraries(kmpc_cts INTERFACE kmpc_core)

# ---- tests (test/cts/) ----
foreach(t circuit_test sha1_test aes_circuit_test cts_test dealer_test)
  add_executable(kmpc_cts_${t} ${KMPC_CORE_ROOT}/test/cts/${t}.cc)
  target_include_directories(kmpc_cts_${t} PRIVATE ${KMPC_CORE_ROOT}/test/core)
  target_link_libraries(kmpc_cts_${t} PRIVATE kmpc_cts GTest::gtest GTest::gtest_main)
  gtest_discover_tests(kmpc_cts_${t} TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)
endforeach()

# The dealer's clear SHA-1 compression, on kmpc_deal alone (what the key
# dealer links).
add_executable(kmpc_cts_sha1_clear_test ${KMPC_CORE_ROOT}/test/cts/sha1_clear_test.cc)
target_link_libraries(kmpc_cts_sha1_clear_test PRIVATE kmpc_deal GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_sha1_clear_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)

# MIT krb5's own aes*-cts-hmac-sha1-96 (the patched prefix's libk5crypto)
# against the circuits: krb5_c_decrypt of the circuits' ciphertexts, the
# circuits' decryption of krb5_c_encrypt's.
if(KRB5_PREFIX AND EXISTS "${KRB5_PREFIX}/lib/libk5crypto.so")
  add_executable(kmpc_cts_krb5_test ${KMPC_CORE_ROOT}/test/cts/krb5_interop_test.cc)
  target_include_directories(kmpc_cts_krb5_test PRIVATE
    ${KMPC_CORE_ROOT}/test/core "${KRB5_PREFIX}/include")
  target_link_libraries(kmpc_cts_krb5_test PRIVATE kmpc_cts GTest::gtest GTest::gtest_main
    "${KRB5_PREFIX}/lib/libkrb5.so" "${KRB5_PREFIX}/lib/libk5crypto.so"
    "${KRB5_PREFIX}/lib/libcom_err.so" "${KRB5_PREFIX}/lib/libkrb5support.so")
  set_target_properties(kmpc_cts_krb5_test PROPERTIES BUILD_RPATH "${KRB5_PREFIX}/lib")
  gtest_discover_tests(kmpc_cts_krb5_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)
endif()

# Figures and wall time of the circuits among three in-process parties.
add_executable(kmpc_cts_bench ${KMPC_CORE_ROOT}/test/cts/cts_bench.cc)
target_include_directories(kmpc_cts_bench PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_bench PRIVATE kmpc_cts GTest::gtest)

# The engine's aes*-cts jobs on three in-process parties (engine/cts_jobs.h).
add_executable(kmpc_cts_jobs_test ${KMPC_CORE_ROOT}/test/core/cts_jobs_test.cc)
target_include_directories(kmpc_cts_jobs_test PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_jobs_test PRIVATE kmpc_core GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_jobs_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)
add_executable(kmpc_cts_program_cache_test ${KMPC_CORE_ROOT}/test/core/cts_program_cache_test.cc)
target_link_libraries(kmpc_cts_program_cache_test PRIVATE kmpc_core GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_program_cache_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)

# No buffer of the aes*-cts jobs is freed holding a share of the dealt
# material or of a message (free() hooked, as request_wipe_test does).
add_executable(kmpc_cts_jobs_wipe_test ${KMPC_CORE_ROOT}/test/core/cts_jobs_wipe_test.cc)
target_include_directories(kmpc_cts_jobs_wipe_test PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_jobs_wipe_test PRIVATE kmpc_core GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_jobs_wipe_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)

# The round study: circuits re-mapped into k-input gates over masked wires
# (cts/lut_map.h; docs/design/cts-circuits.md, "Fewer rounds").
# The engine runs the mapped programs (cts/masked.h), so they are part of
# kmpc_core; kmpc_lut_map names them for the tests and the study.
target_sources(kmpc_core PRIVATE
  ${KMPC_CORE_ROOT}/src/cts/lut_map.cc
  ${KMPC_CORE_ROOT}/src/cts/rank_first.cc
  ${KMPC_CORE_ROOT}/src/cts/masked_compile.cc
  ${KMPC_CORE_ROOT}/src/cts/masked_eval.cc
  ${KMPC_CORE_ROOT}/src/cts/masked_lane0.cc
)
target_link_libraries(kmpc_core PUBLIC absl::flat_hash_map absl::flat_hash_set absl::hash)
add_library(kmpc_lut_map INTERFACE)
target_link_libraries(kmpc_lut_map INTERFACE kmpc_cts)
add_executable(kmpc_cts_lut_map_test ${KMPC_CORE_ROOT}/test/cts/lut_map_test.cc)
target_include_directories(kmpc_cts_lut_map_test PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_lut_map_test PRIVATE kmpc_lut_map GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_lut_map_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 120)
# The truth tables' helpers (cts/truth_table.h) against their definitions.
add_executable(kmpc_cts_truth_table_test ${KMPC_CORE_ROOT}/test/cts/truth_table_test.cc)
target_link_libraries(kmpc_cts_truth_table_test PRIVATE kmpc_lut_map GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_truth_table_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)
add_executable(kmpc_cts_rank_first_test ${KMPC_CORE_ROOT}/test/cts/rank_first_test.cc)
target_link_libraries(kmpc_cts_rank_first_test PRIVATE kmpc_lut_map GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_rank_first_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 60)
# Mapped circuits run over masked wires on three in-process parties.
add_executable(kmpc_cts_masked_test ${KMPC_CORE_ROOT}/test/cts/masked_test.cc)
target_include_directories(kmpc_cts_masked_test PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_masked_test PRIVATE kmpc_lut_map GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_masked_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 120)
add_executable(kmpc_cts_round_study ${KMPC_CORE_ROOT}/test/cts/round_study.cc)
target_link_libraries(kmpc_cts_round_study PRIVATE kmpc_lut_map)

add_executable(kmpc_cts_masked_lane0_test ${KMPC_CORE_ROOT}/test/cts/masked_lane0_test.cc)
target_include_directories(kmpc_cts_masked_lane0_test PRIVATE ${KMPC_CORE_ROOT}/test/core)
target_link_libraries(kmpc_cts_masked_lane0_test PRIVATE kmpc_lut_map GTest::gtest GTest::gtest_main)
gtest_discover_tests(kmpc_cts_masked_lane0_test TEST_PREFIX "cts." DISCOVERY_TIMEOUT 120)
