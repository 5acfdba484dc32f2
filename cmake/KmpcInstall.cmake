# What `cmake --install` installs, one component per Debian package
# (deploy/debian/rules installs each package's files with
# `cmake --install OBJ --component PACKAGE`):
#   kmpc-mpc-server  kmpc-mpc-server, kmpc-mpc-server@.service,
#                    party.flags.example
#   kmpc-kdc         the kdcmpc module kmpc.so, kmpc-krb5kdc.service,
#                    kmpc-kpropd.service, krb5.conf, kdc.conf and kdc.env
#                    examples
#   kmpc-admin       kmpc-admin, kmpc-kdb-handle, kmpc-mpc-client, the key
#                    dealer (mpcdealer) kmpc.so, admin.conf.example
# and each of them deploy/THREE-HOSTS.md. Nothing is installed outside
# these components (no install() without COMPONENT), and every file of
# them is one integration-tests/test_install.py expects: a new artefact is
# added here, there and, if it ships, to the packages' description in
# deploy/debian/control.
include(GNUInstallDirs)

set(KMPC_INSTALL_KDCMPC_DIR "${CMAKE_INSTALL_LIBDIR}/krb5/plugins/kdcmpc" CACHE STRING
  "the kdcmpc module kmpc.so (relative: to CMAKE_INSTALL_PREFIX)")
set(KMPC_INSTALL_MPCDEALER_DIR "${CMAKE_INSTALL_LIBDIR}/krb5/plugins/mpcdealer" CACHE STRING
  "the key dealer's module kmpc.so (relative: to CMAKE_INSTALL_PREFIX)")
set(KMPC_INSTALL_UNITDIR "lib/systemd/system" CACHE STRING
  "systemd system units (relative: to CMAKE_INSTALL_PREFIX; Debian 12: /lib/systemd/system)")
option(KMPC_INSTALL_DOC_PER_COMPONENT
  "each component's docs in DATAROOTDIR/doc/<component> (Debian's /usr/share/doc/<package>), not DOCDIR"
  OFF)
set(KMPC_UNIT_KRB5_SBINDIR "${KRB5_PREFIX}/sbin" CACHE PATH
  "where the units run krb5kdc, kpropd and kdb5_util of kmpc's krb5 build from")

# An install directory as an absolute path (what the units name).
function(kmpc_full_path out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

# The documentation directory of a component.
function(kmpc_doc_dir out component)
  if(KMPC_INSTALL_DOC_PER_COMPONENT)
    set(${out} "${CMAKE_INSTALL_DATAROOTDIR}/doc/${component}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_DOCDIR}" PARENT_SCOPE)
  endif()
endfunction()

set(_kmpc_0644 OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# Programs. The RUNPATH of those linking krb5 is the build's (KRB5_PREFIX's
# libraries) unless CMAKE_SKIP_RPATH: the packages have none (rules).
set_property(TARGET kmpc-kdb-handle PROPERTY INSTALL_RPATH "${KRB5_PREFIX}/lib")
install(TARGETS kmpc-mpc-server RUNTIME DESTINATION "${CMAKE_INSTALL_SBINDIR}"
  COMPONENT kmpc-mpc-server)
install(TARGETS kmpc-admin kmpc-kdb-handle RUNTIME DESTINATION "${CMAKE_INSTALL_SBINDIR}"
  COMPONENT kmpc-admin)
install(TARGETS kmpc-mpc-client RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  COMPONENT kmpc-admin)

# The krb5 modules, both named kmpc.so in their interface's directory
# (kdc.conf: module = kmpc:<dir>/kmpc.so); built as libkmpc_*.so, where the
# tests load them. Modules are not executables: 0644.
install(FILES "$<TARGET_FILE:kmpc_kdc>" DESTINATION "${KMPC_INSTALL_KDCMPC_DIR}"
  RENAME kmpc.so PERMISSIONS ${_kmpc_0644} COMPONENT kmpc-kdc)
install(FILES "$<TARGET_FILE:kmpc_dealer>" DESTINATION "${KMPC_INSTALL_MPCDEALER_DIR}"
  RENAME kmpc.so PERMISSIONS ${_kmpc_0644} COMPONENT kmpc-admin)

# Examples in SYSCONFDIR/kmpc (/etc/kmpc: the full path, which is /etc for
# the prefix /usr). The packages' examples are deploy/debian/examples'.
set(_kmpc_examples "${CMAKE_SOURCE_DIR}/deploy/debian/examples")
install(FILES "${_kmpc_examples}/party.flags.example"
  DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/kmpc" COMPONENT kmpc-mpc-server)
install(FILES "${_kmpc_examples}/krb5.conf.example" "${_kmpc_examples}/kdc.conf.example"
              "${_kmpc_examples}/kdc.env.example"
  DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/kmpc" COMPONENT kmpc-kdc)
install(FILES "${CMAKE_SOURCE_DIR}/deploy/kmpc-admin.conf.example"
  DESTINATION "${CMAKE_INSTALL_FULL_SYSCONFDIR}/kmpc" RENAME admin.conf.example
  COMPONENT kmpc-admin)

# The guide, in every component.
foreach(_c kmpc-mpc-server kmpc-kdc kmpc-admin)
  kmpc_doc_dir(_doc ${_c})
  install(FILES "${CMAKE_SOURCE_DIR}/deploy/THREE-HOSTS.md" DESTINATION "${_doc}"
    COMPONENT ${_c})
endforeach()

# The units (cmake/KmpcUnits.cmake) with the paths above, each pointing at
# its own component's copy of the guide.
include(${CMAKE_CURRENT_LIST_DIR}/KmpcUnits.cmake)
set(KMPC_UNIT_MPC_SERVER "${CMAKE_INSTALL_FULL_SBINDIR}/kmpc-mpc-server")
foreach(_entry IN LISTS KMPC_UNITS)
  string(REGEX REPLACE ":.*" "" _unit "${_entry}")
  string(REGEX REPLACE ".*:" "" _c "${_entry}")
  kmpc_doc_dir(_doc ${_c})
  kmpc_full_path(_doc "${_doc}")
  set(KMPC_UNIT_DOC "${_doc}/THREE-HOSTS.md")
  kmpc_configure_unit("${_unit}" "${CMAKE_BINARY_DIR}/deploy/systemd")
  install(FILES "${CMAKE_BINARY_DIR}/deploy/systemd/${_unit}"
    DESTINATION "${KMPC_INSTALL_UNITDIR}" COMPONENT ${_c})
endforeach()

# deploy/systemd/*.service are their templates with the paths of the
# installation without packages.
add_test(NAME kmpc_units_from_source
  COMMAND ${CMAKE_COMMAND} -DKMPC_UNITS_CHECK_DIR=${CMAKE_BINARY_DIR}/units-from-source
          -P ${CMAKE_CURRENT_LIST_DIR}/KmpcUnits.cmake)
set_tests_properties(kmpc_units_from_source PROPERTIES TIMEOUT 30)
