# kmpc_deal: what dealing a key takes, in the clear, and nothing else:
# randomness and replicated sharing, AES key expansion, GF(2^128)
# products (H's powers), the aes*-cts per-usage material with the clear
# SHA-1 compression (cts/dealer.h, cts/sha1_clear.h), and the key views'
# encoding (engine/key_shares.h). The key dealer inside kadmind
# (kdc-plugin/dealer/) and the admin tools link it through the Admin
# client (client.cmake); no AND engine, proof (DZKP) or AES kernel is in
# it (kdc-plugin/test/check_dealer_links.sh checks the dealer's .so).
# kmpc_core: shares, PRSS, AND layers, GF(2^128), bitsliced AES, the job
# engine and the in-memory ring over kmpc_deal. Pure computation, no gRPC.
find_package(PkgConfig REQUIRED)

set(KMPC_CORE_ROOT "${CMAKE_CURRENT_LIST_DIR}")
set(KMPC_CORE_DIR "${KMPC_CORE_ROOT}/src")

add_library(kmpc_deal STATIC
  ${KMPC_CORE_ROOT}/src/share/replicated.cc
  ${KMPC_CORE_ROOT}/src/protocol/gf128.cc
  ${KMPC_CORE_ROOT}/src/aes/key_expansion.cc
  ${KMPC_CORE_ROOT}/src/cts/dealer.cc
  ${KMPC_CORE_ROOT}/src/cts/sha1_clear.cc
  ${KMPC_CORE_ROOT}/src/engine/key_shares.cc
)
target_include_directories(kmpc_deal PUBLIC "${KMPC_CORE_DIR}")
target_compile_options(kmpc_deal PRIVATE -Wall -Wextra -Wno-unused-parameter)
# Baseline: AES-NI, PCLMULQDQ, SSSE3/SSE4.1 (every x86-64 of the last
# decade; gf128.h's products use PCLMULQDQ).
target_compile_options(kmpc_deal PUBLIC -maes -mpclmul -mssse3 -msse4.1)
target_link_libraries(kmpc_deal PUBLIC kmpc_proto_msgs kmpc_contract
  absl::status absl::statusor absl::strings absl::span OpenSSL::Crypto)

add_library(kmpc_core STATIC
  ${KMPC_CORE_ROOT}/src/protocol/prf.cc
  ${KMPC_CORE_ROOT}/src/protocol/prss.cc
  ${KMPC_CORE_ROOT}/src/protocol/rep3.cc
  ${KMPC_CORE_ROOT}/src/protocol/dzkp.cc
  ${KMPC_CORE_ROOT}/src/protocol/dzkp_first_level.cc
  ${KMPC_CORE_ROOT}/src/protocol/dzkp_rounds.cc
  ${KMPC_CORE_ROOT}/src/protocol/sha256.cc
  ${KMPC_CORE_ROOT}/src/protocol/mul_log.cc
  ${KMPC_CORE_ROOT}/src/protocol/verify.cc
  ${KMPC_CORE_ROOT}/src/aes/aes.cc
  ${KMPC_CORE_ROOT}/src/aes/kernel_avx2.cc
  ${KMPC_CORE_ROOT}/src/aes/kernel_avx512.cc
  ${KMPC_CORE_ROOT}/src/engine/agreement.cc
  ${KMPC_CORE_ROOT}/src/engine/batch_state.cc
  ${KMPC_CORE_ROOT}/src/engine/keys.cc
  ${KMPC_CORE_ROOT}/src/engine/batch_agreement.cc
  ${KMPC_CORE_ROOT}/src/engine/pads.cc
  ${KMPC_CORE_ROOT}/src/engine/cts_plan.cc
  ${KMPC_CORE_ROOT}/src/engine/aes_phase.cc
  ${KMPC_CORE_ROOT}/src/engine/tags.cc
  ${KMPC_CORE_ROOT}/src/engine/collect.cc
  ${KMPC_CORE_ROOT}/src/engine/engine.cc
  ${KMPC_CORE_ROOT}/src/engine/ride.cc
  ${KMPC_CORE_ROOT}/src/engine/gate_budget.cc
  ${KMPC_CORE_ROOT}/src/engine/refresh.cc
  ${KMPC_CORE_ROOT}/src/engine/refresh_agreement.cc
  ${KMPC_CORE_ROOT}/src/engine/refresh_components.cc
  ${KMPC_CORE_ROOT}/src/engine/rebuild.cc
  ${KMPC_CORE_ROOT}/src/engine/refresh_check.cc
  ${KMPC_CORE_ROOT}/src/engine/sign.cc
  ${KMPC_CORE_ROOT}/src/engine/user_key_rule.cc
  ${KMPC_CORE_ROOT}/src/net/memory_ring.cc
)
target_include_directories(kmpc_core PUBLIC "${KMPC_CORE_DIR}")
# Baseline: AES-NI, PCLMULQDQ, SSSE3/SSE4.1 (every x86-64 of the last
# decade). Wider kernels are compiled per file and picked at run time.
target_compile_options(kmpc_core PRIVATE -maes -mpclmul -mssse3 -msse4.1
  -Wall -Wextra -Wno-unused-parameter)
target_compile_options(kmpc_core PUBLIC -maes -mpclmul -mssse3 -msse4.1)
# The PRF (zero-shares: ~80 AES blocks per AES-128 block per party) and
# GF(2^128) inner loops: -O3 like the kernels.
# The two files using AVX-512 intrinsics (prf.cc's VAES path, the AVX-512
# kernel) also drop GCC 12's -W(maybe-)uninitialized: its avx512fintrin.h
# passes `__m512i __Y = __Y;` (_mm512_undefined_epi32) as the unused merge
# source of all-ones-mask builtins, which the warnings report once per
# inlined call, hundreds of lines a build (GCC bug 105593, fixed in GCC 13).
set(KMPC_AVX512_HEADER_WARNINGS "-Wno-maybe-uninitialized;-Wno-uninitialized")
set_source_files_properties(${KMPC_CORE_ROOT}/src/protocol/gf128.cc PROPERTIES
  COMPILE_OPTIONS "-O3")
# dzkp*.cc: VPCLMULQDQ paths in target("avx512f,...") functions
# (dzkp_simd.h), picked at run time.
set_source_files_properties(${KMPC_CORE_ROOT}/src/protocol/dzkp.cc
  ${KMPC_CORE_ROOT}/src/protocol/dzkp_first_level.cc
  ${KMPC_CORE_ROOT}/src/protocol/dzkp_rounds.cc PROPERTIES
  COMPILE_OPTIONS "-O3;${KMPC_AVX512_HEADER_WARNINGS}")
set_source_files_properties(${KMPC_CORE_ROOT}/src/protocol/prf.cc PROPERTIES
  COMPILE_OPTIONS "-O3;${KMPC_AVX512_HEADER_WARNINGS}")
set_source_files_properties(${KMPC_CORE_ROOT}/src/aes/kernel_avx2.cc PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mbmi2;-O3")
set_source_files_properties(${KMPC_CORE_ROOT}/src/aes/kernel_avx512.cc PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mbmi2;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mprefer-vector-width=512;-O3;${KMPC_AVX512_HEADER_WARNINGS}")
# The job types and the job contract (proto/contract.h): protobuf messages
# only, no gRPC.
target_link_libraries(kmpc_core PUBLIC kmpc_deal kmpc_proto_msgs kmpc_contract
  absl::status absl::statusor absl::strings absl::cord absl::span absl::str_format
  OpenSSL::Crypto Threads::Threads)

# ---- tests ----
include(GoogleTest)
# The repository's copy of ../shared/vectors/enctype-vectors.json
# (integration-tests/test_enctype.py checks it matches the shared original).
set(KMPC_VECTORS "${CMAKE_SOURCE_DIR}/krb5-patches/tests/enctype-vectors.json")

foreach(t replicated_test gf128_test dzkp_test dzkp_simd_test dzkp_first_level_test
    dzkp_rounds_test sha256_test mul_log_test verify_test prss_test prf_test rep3_test
    memory_ring_test aes_test agreement_test key_shares_test sign_test engine_test
    refresh_test refresh_check_test key_expansion_test transpose_test user_key_rule_test gate_budget_test
    batch_state_test keys_test batch_agreement_test pads_test cts_plan_test aes_phase_test
    tags_test collect_test refresh_components_test refresh_agreement_test rebuild_test
    ride_test)
  add_executable(kmpc_core_${t} ${KMPC_CORE_ROOT}/test/core/${t}.cc)
  target_link_libraries(kmpc_core_${t} PRIVATE kmpc_core GTest::gtest GTest::gtest_main)
  target_compile_definitions(kmpc_core_${t} PRIVATE
    KMPC_VECTORS_PATH="${KMPC_VECTORS}")
  gtest_discover_tests(kmpc_core_${t} TEST_PREFIX "core." DISCOVERY_TIMEOUT 60)
endforeach()

add_executable(kmpc_core_bench ${KMPC_CORE_ROOT}/test/core/core_bench.cc)
target_link_libraries(kmpc_core_bench PRIVATE kmpc_core)

# Tests of the check built twice: kmpc_core_NAME against kmpc_core as it
# is, and kmpc_core_VARIANT_NAME against a copy of verify.cc compiled with
# DEFINE (a weakened or hooked check), from the test sources given after
# DEFINE; an empty NAME builds the variant only. That copy's objects precede kmpc_core
# on the link line, so the library's verify.cc is never pulled in; only the
# variant binary is built with the switch, never a library or a server.
function(kmpc_core_check_test name variant define)
  if(NOT "${name}" STREQUAL "")
    add_executable(kmpc_core_${name} ${KMPC_CORE_ROOT}/test/core/${name}.cc)
    target_link_libraries(kmpc_core_${name} PRIVATE kmpc_core GTest::gtest GTest::gtest_main)
    gtest_discover_tests(kmpc_core_${name} TEST_PREFIX "core." DISCOVERY_TIMEOUT 60)
  endif()
  add_executable(kmpc_core_${variant}_test ${ARGN} ${KMPC_CORE_ROOT}/src/protocol/verify.cc)
  target_link_libraries(kmpc_core_${variant}_test PRIVATE
    kmpc_core GTest::gtest GTest::gtest_main)
  target_compile_definitions(kmpc_core_${variant}_test PRIVATE ${define})
  gtest_discover_tests(kmpc_core_${variant}_test TEST_PREFIX "core.${variant}."
    DISCOVERY_TIMEOUT 60)
endfunction()

# The coin ordering against an adaptive read-ahead cheater
# (test/core/readahead_test.cc); the variant opens coins without the
# acknowledgement round (KMPC_TEST_ONE_ROUND_COIN), which the test expects
# the attack to beat.
kmpc_core_check_test(readahead_test readahead_oneround KMPC_TEST_ONE_ROUND_COIN
  ${KMPC_CORE_ROOT}/test/core/readahead_test.cc)
# No message depends on an unconfirmed opening (test/core/openings_test.cc)
# and the end-to-end H-recovery (test/core/hrecovery_test.cc); the variants
# hash the acknowledgements without comparing them
# (KMPC_TEST_UNCONFIRMED_OPENINGS): the openings leak and the attack
# recovers H.
kmpc_core_check_test(openings_test openings_unconfirmed KMPC_TEST_UNCONFIRMED_OPENINGS
  ${KMPC_CORE_ROOT}/test/core/openings_test.cc)
kmpc_core_check_test(hrecovery_test hrecovery_unconfirmed KMPC_TEST_UNCONFIRMED_OPENINGS
  ${KMPC_CORE_ROOT}/test/core/hrecovery_test.cc)
# The check's coin redraw (test/core/coin_redraw_test.cc): its hooks
# (KMPC_TEST_COIN_HOOK) let the test force a coin onto an interpolation
# node; it has no unhooked build.
kmpc_core_check_test("" coin_redraw KMPC_TEST_COIN_HOOK
  ${KMPC_CORE_ROOT}/test/core/coin_redraw_test.cc)

# The depth-3 S-box: tools/sbox3_gen.py checks its circuit against the AES
# S-box on all 256 inputs and fails if src/aes/sbox3.inc is not what it
# generates.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME core.sbox3_gen_check
  COMMAND Python3::Interpreter ${KMPC_CORE_ROOT}/tools/sbox3_gen.py
    --verify ${KMPC_CORE_ROOT}/src/aes/sbox3.inc)
