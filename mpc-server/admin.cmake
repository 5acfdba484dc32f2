# kmpc-admin (admin/): shares principals' long-term keys into the MPC cluster
# and replaces them in the KDB by key handles.  Runs on the KDC host like
# kadmin.local: it links the patched krb5 of the private prefix (kadm5 server
# API, libkdb5, libk5crypto for string-to-key) with a RUNPATH to it, never
# the system's krb5, plus the cluster client library (client.cmake:
# kmpc_cluster_admin, the dealing and the Admin service). The key dealer
# in kadmind (kdc-plugin/dealer/CMakeLists.txt) links kmpc_admin_cluster.
if(TARGET kmpc_cluster_admin)
  set(KMPC_ADMIN_KRB5_LIBDIR "${KRB5_PREFIX}/lib")
  # kadmin's server library and what it needs, for kmpc-admin and its tests.
  set(KMPC_ADMIN_KRB5_LIBS
    "${KMPC_ADMIN_KRB5_LIBDIR}/libkadm5srv_mit.so"
    "${KMPC_ADMIN_KRB5_LIBDIR}/libkdb5.so"
    "${KMPC_ADMIN_KRB5_LIBDIR}/libkrb5.so"
    "${KMPC_ADMIN_KRB5_LIBDIR}/libk5crypto.so"
    "${KMPC_ADMIN_KRB5_LIBDIR}/libcom_err.so"
    "${KMPC_ADMIN_KRB5_LIBDIR}/libkrb5support.so")
  # kmpc_admin_cluster: what kmpc-admin and the key dealer share, the
  # admin config file (admin/config.cc) and the clusters it names
  # (admin/cluster.cc: connect, PutKey and DeleteKey on every cluster), the
  # record of KDB rewrites due (admin/rewrite_due.cc). No
  # krb5 library: position-independent and with hidden visibility, so that
  # the dealer, a krb5 plugin, links it like its other static libraries
  # (local to the module, --exclude-libs).
  add_library(kmpc_admin_cluster STATIC
    ${CMAKE_CURRENT_LIST_DIR}/admin/cluster.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/config.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/rewrite_due.cc)
  target_include_directories(kmpc_admin_cluster PUBLIC "${CMAKE_CURRENT_LIST_DIR}")
  target_compile_options(kmpc_admin_cluster PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(kmpc_admin_cluster PUBLIC
    kmpc_cluster_admin absl::strings absl::status absl::statusor)
  set_target_properties(kmpc_admin_cluster PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

  # kmpc-admin's command line: CLI11, header-only (Debian's libcli11-dev).
  find_path(KMPC_CLI11_INCLUDE_DIR CLI/CLI.hpp)
  if(NOT KMPC_CLI11_INCLUDE_DIR)
    message(FATAL_ERROR "kmpc-admin needs CLI11's headers (Debian: libcli11-dev)")
  endif()

  # kmpc_admin_tool: kmpc-admin but its main(): the dispatcher
  # (admin/dispatch.cc), the table of subcommands (admin/cmd_*.cc, one file
  # each) and the KDB side; kmpc-admin and its dispatcher's test link it.
  add_library(kmpc_admin_tool STATIC
    ${CMAKE_CURRENT_LIST_DIR}/admin/command.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/dispatch.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_share.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_status.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_purge_unreferenced.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_refresh.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_rewrite_kdb.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_drop_user_ctr.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_breaker_reset.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_set_kind.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/cmd_rebuild_party.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb_handles.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb_rewrite.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/refresh.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/user_ctr.cc)
  target_include_directories(kmpc_admin_tool PUBLIC
    "${CMAKE_CURRENT_LIST_DIR}" "${KRB5_PREFIX}/include")
  target_include_directories(kmpc_admin_tool SYSTEM PRIVATE "${KMPC_CLI11_INCLUDE_DIR}")
  target_compile_options(kmpc_admin_tool PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # kdc.conf's place when KRB5_KDC_PROFILE is unset (MIT's default for
  # the prefix; admin/kdb.cc). The Debian packages (deploy/debian/rules)
  # set Debian's /etc/krb5kdc/kdc.conf and /etc/krb5.conf.
  if(NOT DEFINED KMPC_DEFAULT_KDC_PROFILE)
    set(KMPC_DEFAULT_KDC_PROFILE "${KRB5_PREFIX}/var/krb5kdc/kdc.conf")
  endif()
  if(NOT DEFINED KMPC_DEFAULT_KRB5_CONFIG)
    set(KMPC_DEFAULT_KRB5_CONFIG "/etc/krb5.conf:${KRB5_PREFIX}/etc/krb5.conf")
  endif()
  # The kdb5_util that rewrites the KDB after a move (admin/kdb_rewrite.h):
  # the prefix's, whose libkdb5 is the one kmpc-admin links.
  if(NOT DEFINED KMPC_DEFAULT_KDB5_UTIL)
    set(KMPC_DEFAULT_KDB5_UTIL "${KRB5_PREFIX}/sbin/kdb5_util")
  endif()
  target_compile_definitions(kmpc_admin_tool PRIVATE
    KMPC_DEFAULT_KDC_PROFILE="${KMPC_DEFAULT_KDC_PROFILE}"
    KMPC_DEFAULT_KRB5_CONFIG="${KMPC_DEFAULT_KRB5_CONFIG}"
    KMPC_DEFAULT_KDB5_UTIL="${KMPC_DEFAULT_KDB5_UTIL}")
  target_link_libraries(kmpc_admin_tool PUBLIC
    kmpc_admin_cluster kmpc_cluster_admin absl::strings absl::str_format absl::status
    absl::statusor OpenSSL::Crypto
    ${KMPC_ADMIN_KRB5_LIBS})

  add_executable(kmpc-admin ${CMAKE_CURRENT_LIST_DIR}/admin/main.cc)
  target_compile_options(kmpc-admin PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(kmpc-admin PRIVATE kmpc_admin_tool)
  set_target_properties(kmpc-admin PROPERTIES
    BUILD_RPATH "${KMPC_ADMIN_KRB5_LIBDIR}"
    INSTALL_RPATH "${KMPC_ADMIN_KRB5_LIBDIR}"
    SKIP_BUILD_RPATH OFF LINK_FLAGS "-Wl,--enable-new-dtags")

  # The dispatcher without a cluster or a KDB: every subcommand refuses
  # the options of the others, before anything runs.
  add_executable(kmpc_admin_dispatch_test
    ${CMAKE_CURRENT_LIST_DIR}/admin/dispatch_test.cc)
  target_link_libraries(kmpc_admin_dispatch_test PRIVATE
    kmpc_admin_tool GTest::gtest_main)
  set_target_properties(kmpc_admin_dispatch_test PROPERTIES
    BUILD_RPATH "${KMPC_ADMIN_KRB5_LIBDIR}" SKIP_BUILD_RPATH OFF)
  gtest_discover_tests(kmpc_admin_dispatch_test TEST_PREFIX "admin."
    DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 60)

  # kmpc-admin's pieces without a cluster or a KDB: its clusters against
  # in-process Admin servers over mTLS (mpc-server/test/server/
  # fake_admin.h), the KDB side's refusals and helpers, the refresh's
  # key-id lineage (refresh.cc and kdb.cc need the prefix's krb5).
  add_executable(kmpc_admin_cluster_test
    ${CMAKE_CURRENT_LIST_DIR}/admin/cluster_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/refresh_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/refresh.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb.cc
    ${CMAKE_CURRENT_LIST_DIR}/admin/kdb_handles.cc)
  target_include_directories(kmpc_admin_cluster_test PRIVATE
    "${CMAKE_CURRENT_LIST_DIR}/test/server" "${KRB5_PREFIX}/include")
  target_compile_definitions(kmpc_admin_cluster_test PRIVATE
    KMPC_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    KMPC_DEFAULT_KDC_PROFILE="${KMPC_DEFAULT_KDC_PROFILE}"
    KMPC_DEFAULT_KRB5_CONFIG="${KMPC_DEFAULT_KRB5_CONFIG}")
  target_link_libraries(kmpc_admin_cluster_test PRIVATE
    kmpc_admin_cluster GTest::gtest_main OpenSSL::Crypto
    ${KMPC_ADMIN_KRB5_LIBS})
  set_target_properties(kmpc_admin_cluster_test PROPERTIES
    BUILD_RPATH "${KMPC_ADMIN_KRB5_LIBDIR}" SKIP_BUILD_RPATH OFF)
  gtest_discover_tests(kmpc_admin_cluster_test TEST_PREFIX "admin."
    DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120)

  # Config parsing (no krb5, no servers); the rest is tested end to end by
  # integration-tests/test_admin.py.
  add_executable(kmpc_admin_config_test
    ${CMAKE_CURRENT_LIST_DIR}/admin/config_test.cc)
  target_link_libraries(kmpc_admin_config_test PRIVATE
    kmpc_admin_cluster GTest::gtest_main)
  add_test(NAME kmpc_admin_config_test COMMAND kmpc_admin_config_test)
  set_tests_properties(kmpc_admin_config_test PROPERTIES TIMEOUT 60)
else()
  message(STATUS "mpc-server: kmpc_cluster_admin missing; no kmpc-admin")
endif()
