# kmpc's systemd units: deploy/systemd/<unit>.in with an installation's
# paths filled in by configure_file (@ONLY):
#   KMPC_UNIT_MPC_SERVER    the server binary (kmpc-mpc-server@.service)
#   KMPC_UNIT_KRB5_SBINDIR  krb5kdc, kpropd and kdb5_util of kmpc's krb5
#                           build (kmpc-krb5kdc.service, kmpc-kpropd.service)
#   KMPC_UNIT_DOC           THREE-HOSTS.md where the unit's component has it
# cmake/KmpcInstall.cmake fills in the install rules' paths. The
# installation without packages (deploy/THREE-HOSTS.md, "Appendix: without
# packages"; deploy/kmpc_deploy.py reads the units) uses
# deploy/systemd/<unit> as it is: the template with that installation's
# paths (KMPC_FROM_SOURCE_* below). After editing a template:
#   cmake -P cmake/KmpcUnits.cmake                        rewrite them
#   cmake -DKMPC_UNITS_CHECK_DIR=DIR -P cmake/KmpcUnits.cmake
#       fail if one is not its template's (ctest kmpc_units_from_source)

get_filename_component(KMPC_UNITS_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/../deploy/systemd"
  ABSOLUTE)
# Each unit and the component (Debian package) that installs it.
set(KMPC_UNITS
  "kmpc-mpc-server@.service:kmpc-mpc-server"
  "kmpc-krb5kdc.service:kmpc-kdc"
  "kmpc-kpropd.service:kmpc-kdc")

# The paths of the installation without packages (kmpc_deploy.py's BIN_DIR
# and KRB5_PREFIX).
set(KMPC_FROM_SOURCE_MPC_SERVER "/usr/local/bin/kmpc-mpc-server")
set(KMPC_FROM_SOURCE_KRB5_SBINDIR "/opt/kmpc/krb5/sbin")
set(KMPC_FROM_SOURCE_DOC "/usr/local/share/doc/kmpc/THREE-HOSTS.md")

# OUT_DIR/<unit> from deploy/systemd/<unit>.in with the caller's
# KMPC_UNIT_MPC_SERVER, KMPC_UNIT_KRB5_SBINDIR and KMPC_UNIT_DOC.
function(kmpc_configure_unit unit out_dir)
  foreach(_v KMPC_UNIT_MPC_SERVER KMPC_UNIT_KRB5_SBINDIR KMPC_UNIT_DOC)
    if(NOT IS_ABSOLUTE "${${_v}}")
      message(FATAL_ERROR "${_v} must be an absolute path, not '${${_v}}'")
    endif()
  endforeach()
  configure_file("${KMPC_UNITS_SOURCE_DIR}/${unit}.in" "${out_dir}/${unit}" @ONLY)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  set(KMPC_UNIT_MPC_SERVER "${KMPC_FROM_SOURCE_MPC_SERVER}")
  set(KMPC_UNIT_KRB5_SBINDIR "${KMPC_FROM_SOURCE_KRB5_SBINDIR}")
  set(KMPC_UNIT_DOC "${KMPC_FROM_SOURCE_DOC}")
  set(_out "${KMPC_UNITS_SOURCE_DIR}")
  if(DEFINED KMPC_UNITS_CHECK_DIR)
    set(_out "${KMPC_UNITS_CHECK_DIR}")
  endif()
  set(_stale "")
  foreach(_entry IN LISTS KMPC_UNITS)
    string(REGEX REPLACE ":.*" "" _unit "${_entry}")
    kmpc_configure_unit("${_unit}" "${_out}")
    file(READ "${_out}/${_unit}" _want)
    file(READ "${KMPC_UNITS_SOURCE_DIR}/${_unit}" _have)
    if(NOT _want STREQUAL _have)
      list(APPEND _stale "deploy/systemd/${_unit}")
    endif()
  endforeach()
  if(_stale)
    string(REPLACE ";" ", " _stale "${_stale}")
    message(FATAL_ERROR "${_stale}: not the template (.in) with the paths of the "
      "installation without packages; cmake -P cmake/KmpcUnits.cmake rewrites them")
  endif()
endif()
