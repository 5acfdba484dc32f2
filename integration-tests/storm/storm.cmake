# kmpc-storm: the login-storm load generator (integration-tests/storm/): a
# Kerberos client that never talks to an MPC server, used by the tests and
# benchmarks. Included from the top-level CMakeLists.txt. Linked against
# the patched krb5 of the private prefix only, with a RUNPATH to it (as
# krb5-patches/tests/CMakeLists.txt): the system's libkrb5 must never be
# loaded next to it. Needs nothing else but threads.
#
# The binary is built as <build>/mpc-server/kmpc-storm, where the scripts
# and the benchmarks' snapshot take it from (integration-tests/bench/
# storm_bench.py find_storm, the Makefile's BENCH_SNAPSHOT).
set(KMPC_STORM_DIR "${CMAKE_CURRENT_LIST_DIR}")
set(KMPC_STORM_KRB5_LIBDIR "${KRB5_PREFIX}/lib")
add_executable(kmpc-storm
  ${KMPC_STORM_DIR}/main.cc
  ${KMPC_STORM_DIR}/run.cc
  ${KMPC_STORM_DIR}/async.cc)
target_include_directories(kmpc-storm PRIVATE "${KRB5_PREFIX}/include")
target_compile_options(kmpc-storm PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_libraries(kmpc-storm PRIVATE
  "${KMPC_STORM_KRB5_LIBDIR}/libkrb5.so" "${KMPC_STORM_KRB5_LIBDIR}/libk5crypto.so"
  "${KMPC_STORM_KRB5_LIBDIR}/libcom_err.so" "${KMPC_STORM_KRB5_LIBDIR}/libkrb5support.so"
  Threads::Threads)
set_target_properties(kmpc-storm PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/mpc-server"
  BUILD_RPATH "${KMPC_STORM_KRB5_LIBDIR}" INSTALL_RPATH "${KMPC_STORM_KRB5_LIBDIR}"
  SKIP_BUILD_RPATH OFF LINK_FLAGS "-Wl,--enable-new-dtags")

# Unit test of the latency histogram (no krb5 needed).
if(TARGET GTest::gtest_main)
  add_executable(kmpc_storm_histogram_test ${KMPC_STORM_DIR}/histogram_test.cc)
  target_link_libraries(kmpc_storm_histogram_test PRIVATE GTest::gtest_main)
  add_test(NAME kmpc_storm_histogram_test COMMAND kmpc_storm_histogram_test)
endif()
