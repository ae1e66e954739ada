# Debian packages of a modules build (docs/packaging.md), made by CPack's DEB
# generator from the installed tree: `cpack -G DEB` in the build directory
# (scripts/package.sh builds, lints and tests them).
#
#   libdistlock<major>           libdistlock.so.<major>: the core, memory:// and file://
#   libdistlock<major>-<name>    one per backend module (libdistlock-<name>.so)
#   libdistlock-dev              headers, CMake package, pkg-config, the conformance library
#   distlock-tools               the distlock tool, its man page and bash completion
#   distlock-tools-<db>          the tool's plugin for flash-sale --strategy optimistic
#                                over that database (distlock-tool-<db>.so)
#
# Each package's Depends are dpkg-shlibdeps's (the client libraries its files
# link), and a module's also its own libdistlock<major> of the same version.
set(DISTLOCK_CORE_PACKAGE libdistlock${PROJECT_VERSION_MAJOR})
set(DISTLOCK_PACKAGE_MAINTAINER "distlock maintainers <maintainers@distlock.invalid>")

# /usr/share/doc/<package>/{copyright,changelog.gz}, which Debian requires of
# every binary package. The changelog is a native package's, in Debian's
# format; the project's own is CHANGELOG.md, in libdistlock-dev.
function(distlock_package_docs package)
  set(dir ${PROJECT_BINARY_DIR}/package-docs/${package})
  file(MAKE_DIRECTORY ${dir})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/package/copyright ${dir}/copyright COPYONLY)
  string(TIMESTAMP _date "%a, %d %b %Y %H:%M:%S +0000" UTC)  # SOURCE_DATE_EPOCH's when set
  file(WRITE ${dir}/changelog
       "distlock (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
       "  * Release ${PROJECT_VERSION}: see /usr/share/doc/libdistlock-dev/CHANGELOG.md.gz.\n\n"
       " -- ${DISTLOCK_PACKAGE_MAINTAINER}  ${_date}\n")
  execute_process(COMMAND gzip -9nf ${dir}/changelog RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "distlock: gzip failed on ${dir}/changelog")
  endif()
  install(FILES ${dir}/copyright ${dir}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          COMPONENT ${package})
endfunction()

set(_packages ${DISTLOCK_CORE_PACKAGE} libdistlock-dev)
set(_tool_plugin_packages "")
if(TARGET distlock-cli)
  list(APPEND _packages distlock-tools)
  get_property(_tool_plugins GLOBAL PROPERTY DISTLOCK_TOOL_PLUGINS)
  foreach(_name IN LISTS _tool_plugins)
    list(APPEND _tool_plugin_packages distlock-tools-${_name})
  endforeach()
endif()
get_property(_module_targets GLOBAL PROPERTY DISTLOCK_MODULE_TARGETS)
set(_module_packages "")
foreach(_t IN LISTS _module_targets)
  string(REGEX REPLACE "^distlock_module_" "" _name ${_t})
  distlock_module_package(${_name} _p)
  list(APPEND _module_packages ${_p})
endforeach()
foreach(_p IN LISTS _packages _tool_plugin_packages _module_packages)
  distlock_package_docs(${_p})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/libdistlock-dev
        COMPONENT libdistlock-dev)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME distlock)
set(CPACK_PACKAGE_VENDOR "distlock")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${DISTLOCK_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES TRUE)  # lintian: no unstripped binaries (the debug info is the build tree's)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${_packages} ${_tool_plugin_packages} ${_module_packages})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# DEBIAN/shlibs of libdistlock0 (the one library with a SONAME): programs built
# against it depend on libdistlock0 (= this version).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# dpkg-shlibdeps finds libdistlock.so.<major> in the build tree (it belongs to
# no installed package: its missing information is skipped); a module's
# dependency on it is its DEPENDS below, with the exact version.
if(CMAKE_LIBRARY_OUTPUT_DIRECTORY)  # where libdistlock is built (no generator expression here)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_LIBRARY_OUTPUT_DIRECTORY})
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
endif()
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://distlock.invalid/")

string(TOUPPER ${DISTLOCK_CORE_PACKAGE} _CORE)
set(CPACK_DEBIAN_${_CORE}_PACKAGE_NAME ${DISTLOCK_CORE_PACKAGE})
set(CPACK_DEBIAN_${_CORE}_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/package/triggers)
set(CPACK_DEBIAN_${_CORE}_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_${_CORE}_DESCRIPTION "one lock interface over many coordination backends (library)\ndistlock gives a program one lock interface (mutexes, read-write locks,\nsemaphores, elections) over many coordination backends, chosen by a URL.\nThis package holds the library with its embedded backends (memory://,\nfile://); each server backend is a package of its own.")
set(CPACK_DEBIAN_LIBDISTLOCK-DEV_PACKAGE_NAME libdistlock-dev)
set(CPACK_DEBIAN_LIBDISTLOCK-DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_LIBDISTLOCK-DEV_DEPENDS ${DISTLOCK_CORE_PACKAGE})
set(CPACK_COMPONENT_LIBDISTLOCK-DEV_DESCRIPTION "one lock interface over many coordination backends (development files)\nThe C++20 headers of distlock, its CMake package and pkg-config file, and\nthe conformance suite for backends written outside distlock.")
set(CPACK_DEBIAN_DISTLOCK-TOOLS_PACKAGE_NAME distlock-tools)
set(CPACK_DEBIAN_DISTLOCK-TOOLS_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_DISTLOCK-TOOLS_DEPENDS ${DISTLOCK_CORE_PACKAGE})
set(CPACK_COMPONENT_DISTLOCK-TOOLS_DESCRIPTION "one lock interface over many coordination backends (command-line tool)\ndistlock run runs a command only while holding a lock, distlock hold holds\none, distlock status shows its holder, distlock bench and flash-sale measure\na backend. Install the backend packages (libdistlock0-redis, ...) of the\nservers it should talk to.")
foreach(_p IN LISTS _tool_plugin_packages)
  string(TOUPPER ${_p} _P)
  string(REGEX REPLACE "^distlock-tools-" "" _name ${_p})
  set(CPACK_DEBIAN_${_P}_PACKAGE_NAME ${_p})
  set(CPACK_DEBIAN_${_P}_PACKAGE_SECTION utils)
  set(CPACK_COMPONENT_${_P}_DEPENDS distlock-tools)
  set(CPACK_COMPONENT_${_P}_DESCRIPTION "one lock interface over many coordination backends (tool plugin, ${_name})\nThe plugin of the distlock tool (distlock-tool-${_name}.so) that runs\ndistlock flash-sale --strategy optimistic, the lock-free comparison\npoint, over ${_name}: a small client of its own of that database.")
endforeach()
foreach(_p IN LISTS _module_packages)
  string(TOUPPER ${_p} _P)
  string(REGEX REPLACE "^${DISTLOCK_CORE_PACKAGE}-" "" _name ${_p})
  set(CPACK_DEBIAN_${_P}_PACKAGE_NAME ${_p})
  set(CPACK_COMPONENT_${_P}_DEPENDS ${DISTLOCK_CORE_PACKAGE})
  set(CPACK_COMPONENT_${_P}_DESCRIPTION "one lock interface over many coordination backends (${_name} backend)\nThe ${_name} backend module of distlock (libdistlock-${_name}.so), which\nlibdistlock loads on the first connect() to one of its URL schemes.")
endforeach()
include(CPack)
