# kmpc-storm: the login-storm load generator (storm/).  Linked against the
# patched krb5 of the private prefix only, with a RUNPATH to it (as
# krb5-patches/tests/CMakeLists.txt): the system's libkrb5 must never be
# loaded next to it.  Needs nothing else but threads.
set(KMPC_STORM_KRB5_LIBDIR "${KRB5_PREFIX}/lib")
add_executable(kmpc-storm
  ${CMAKE_CURRENT_LIST_DIR}/storm/main.cc
  ${CMAKE_CURRENT_LIST_DIR}/storm/run.cc
  ${CMAKE_CURRENT_LIST_DIR}/storm/async.cc)
target_include_directories(kmpc-storm PRIVATE "${KRB5_PREFIX}/include")
target_compile_options(kmpc-storm PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_link_libraries(kmpc-storm PRIVATE
  "${KMPC_STORM_KRB5_LIBDIR}/libkrb5.so" "${KMPC_STORM_KRB5_LIBDIR}/libk5crypto.so"
  "${KMPC_STORM_KRB5_LIBDIR}/libcom_err.so" "${KMPC_STORM_KRB5_LIBDIR}/libkrb5support.so"
  Threads::Threads)
set_target_properties(kmpc-storm PROPERTIES
  BUILD_RPATH "${KMPC_STORM_KRB5_LIBDIR}" INSTALL_RPATH "${KMPC_STORM_KRB5_LIBDIR}"
  SKIP_BUILD_RPATH OFF LINK_FLAGS "-Wl,--enable-new-dtags")

# Unit test of the latency histogram (no krb5 needed).
if(TARGET GTest::gtest_main)
  add_executable(kmpc_storm_histogram_test ${CMAKE_CURRENT_LIST_DIR}/storm/histogram_test.cc)
  target_link_libraries(kmpc_storm_histogram_test PRIVATE GTest::gtest_main)
  add_test(NAME kmpc_storm_histogram_test COMMAND kmpc_storm_histogram_test)
endif()
