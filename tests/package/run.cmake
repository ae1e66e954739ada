# ctest driver: install the built distlock into a prefix, build the consumer
# against it with find_package and with pkg-config, and run them.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(BUILD_DIR SOURCE_DIR WORK_DIR)
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
# Every public header is installed, as it is in the source tree (async.hpp,
# asio.hpp, detail/ ...).
get_filename_component(_include ${SOURCE_DIR}/../../include ABSOLUTE)
file(GLOB_RECURSE _headers RELATIVE ${_include} ${_include}/distlock/*.hpp)
foreach(_h distlock/asio.hpp distlock/async.hpp)  # (a script has no IN_LIST)
  list(FIND _headers ${_h} _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "no ${_h} under ${_include}")
  endif()
endforeach()
foreach(_h ${_headers})
  step(${CMAKE_COMMAND} -E compare_files ${_include}/${_h} ${WORK_DIR}/prefix/include/${_h})
endforeach()
# No installed file searches the current directory for libraries (an empty or
# relative RUNPATH element): check_rpath.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/check_rpath.cmake)
find_program(READELF NAMES readelf llvm-readelf REQUIRED)
set(_installed_cli "")
if(EXISTS ${WORK_DIR}/prefix/bin/distlock)
  set(_installed_cli ${WORK_DIR}/prefix/bin/distlock)
endif()
distlock_check_rpaths(${READELF} DIRS ${WORK_DIR}/prefix REQUIRED ${_installed_cli})
# The installed command-line tool runs from the prefix alone (its RPATH is
# relative to itself): no LD_LIBRARY_PATH, nothing from the build tree.
if(EXISTS ${WORK_DIR}/prefix/bin/distlock)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/prefix/bin/distlock schemes
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "memory")
    message(FATAL_ERROR "the installed CLI does not run (${rc}): ${out}${err}")
  endif()
  file(GLOB _libs ${WORK_DIR}/prefix/lib*/libdistlock.so.*)
  if(_libs)  # a shared build: it must load the installed library, not the build tree's
    execute_process(COMMAND ldd ${WORK_DIR}/prefix/bin/distlock OUTPUT_VARIABLE deps)
    if(NOT deps MATCHES "${WORK_DIR}/prefix/(bin/\\.\\./)?lib[^ ]*/libdistlock")
      message(FATAL_ERROR "the installed CLI loads libdistlock from outside the prefix:\n${deps}")
    endif()
  endif()
endif()
build_against_prefix(${SOURCE_DIR} ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
step(${WORK_DIR}/build/asio-consumer)  # <distlock/asio.hpp>, from the prefix

# The same consumer through pkg-config (distlock.pc): `--static` when the
# install is a static library (Libs.private then counts).
find_program(PKG_CONFIG pkg-config)
find_program(CXX_COMPILER NAMES c++ g++ clang++)
if(PKG_CONFIG AND CXX_COMPILER)
  file(GLOB _pc ${WORK_DIR}/prefix/lib*/pkgconfig/distlock.pc ${WORK_DIR}/prefix/lib/*/pkgconfig/distlock.pc)
  if(NOT _pc)
    message(FATAL_ERROR "no distlock.pc installed")
  endif()
  get_filename_component(_pcdir ${_pc} DIRECTORY)
  file(GLOB _static ${WORK_DIR}/prefix/lib*/libdistlock.a ${WORK_DIR}/prefix/lib/*/libdistlock.a)
  set(_pc_args --cflags --libs)
  if(_static)
    list(PREPEND _pc_args --static)
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${_pcdir} ${PKG_CONFIG} ${_pc_args} distlock
                  RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${_pc_args} distlock failed: ${err}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  separate_arguments(extra UNIX_COMMAND "${EXTRA_FLAGS}")
  # No rpath of the test's own, and no LD_LIBRARY_PATH: the .pc's Libs carry one.
  step(${CXX_COMPILER} -std=c++20 ${extra} ${SOURCE_DIR}/main.cpp -o ${WORK_DIR}/pkgconfig-consumer ${flags})
  step(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/pkgconfig-consumer)
endif()
