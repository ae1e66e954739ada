# One call per backend (SOCI style):
#
#   distlock_backend_option(<name> <out-var>)
#       declares DISTLOCK_BACKEND_<NAME>=AUTO|ON|OFF and sets <out-var> to TRUE
#       unless it is OFF (look for the dependency only then).
#   distlock_add_layer(<name> SOURCES ... [LIBRARIES ...])
#       code shared by several backends (backends/<name>/, e.g. the SQL strategy
#       layer, the HTTP layer), defined by the layer's own CMakeLists.txt
#       (added by the top level before the backends: DISTLOCK_LAYER_DIRS) or by
#       a backend folder before it names the layer; a second call is a no-op.
#       Compiled into libdistlock once, and only when a backend names it in
#       LAYERS. The LIBRARIES must be visible where those backends are (found by
#       the top level, imported GLOBAL, or library files).
#   distlock_add_backend(<name> FOUND <bool> MISSING "<what to install>" SCHEMES <scheme>...
#                        SOURCES ... [LAYERS ...] [LIBRARIES ...] [INCLUDES ...] [DEFINITIONS ...]
#                        [EMBEDDED])
#       AUTO + not found: a status line, the backend is left out.
#       ON + not found:   a configure error.
#       found:            the sources are compiled into libdistlock, the
#                         libraries linked PRIVATE (never in a public header), and
#                         distlock::backends::<name>::register_backend() is called
#                         by the generated register_builtin_backends().
#       found, with DISTLOCK_BACKEND_MODULES=ON and not EMBEDDED: the sources,
#                         with those of its layers, make the module
#                         libdistlock-<name>.so instead (linked to libdistlock and
#                         the libraries), which libdistlock opens on the first
#                         connect() to one of the SCHEMES (core/modules.cpp). The
#                         SCHEMES are what register_backend() adds, exactly: the
#                         loader refuses a module that registers others.
set(DISTLOCK_BACKEND_CHOICES AUTO ON OFF)

function(distlock_backend_option name out)
  string(TOUPPER "${name}" up)
  string(REPLACE "-" "_" up "${up}")
  set(DISTLOCK_BACKEND_${up} AUTO CACHE STRING "Build the ${name} backend (AUTO|ON|OFF)")
  set_property(CACHE DISTLOCK_BACKEND_${up} PROPERTY STRINGS ${DISTLOCK_BACKEND_CHOICES})
  if(NOT DISTLOCK_BACKEND_${up} IN_LIST DISTLOCK_BACKEND_CHOICES)
    message(FATAL_ERROR "DISTLOCK_BACKEND_${up} must be AUTO, ON or OFF (is '${DISTLOCK_BACKEND_${up}}')")
  endif()
  if(DISTLOCK_BACKEND_${up} STREQUAL "OFF")
    message(STATUS "distlock: backend ${name} disabled (DISTLOCK_BACKEND_${up}=OFF)")
    set(${out} FALSE PARENT_SCOPE)
  else()
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()

# The objects of `obj` go into libdistlock, and into distlock_internal (the
# white-box tests' static copy of the same objects) when the tests are built.
function(distlock_library_objects obj)
  target_sources(distlock PRIVATE $<TARGET_OBJECTS:${obj}>)
  if(TARGET distlock_internal)
    target_sources(distlock_internal PRIVATE $<TARGET_OBJECTS:${obj}>)
  endif()
endfunction()

# The objects of a backend module, in distlock_internal only (a modules build).
function(distlock_internal_objects obj)
  if(TARGET distlock_internal)
    target_sources(distlock_internal PRIVATE $<TARGET_OBJECTS:${obj}>)
  endif()
endfunction()

function(distlock_internal_link)
  if(TARGET distlock_internal)
    target_link_libraries(distlock_internal PUBLIC ${ARGN})
  endif()
endfunction()

# Libraries those objects need: libdistlock links them privately,
# distlock_internal passes them on (it is a static library). Called from the
# directory that found them (imported targets are visible there only).
function(distlock_library_link)
  target_link_libraries(distlock PRIVATE ${ARGN})
  if(TARGET distlock_internal)
    target_link_libraries(distlock_internal PUBLIC ${ARGN})
  endif()
endfunction()

function(distlock_add_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LIBRARIES")
  set(obj distlock_layer_${name})
  if(TARGET ${obj})
    return()
  endif()
  # Not built by itself: only as part of libdistlock, once a backend uses it.
  add_library(${obj} OBJECT EXCLUDE_FROM_ALL ${arg_SOURCES})
  set_target_properties(${obj} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${obj} PRIVATE -Wall -Wextra -Wpedantic -Werror=switch)
  target_include_directories(${obj} PUBLIC ${PROJECT_SOURCE_DIR}/backends/${name}
                             PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated/include)
  if(arg_LIBRARIES)
    target_link_libraries(${obj} PUBLIC ${arg_LIBRARIES})
  endif()
  set_target_properties(${obj} PROPERTIES DISTLOCK_LAYER_LIBRARIES "${arg_LIBRARIES}" DISTLOCK_LAYER_USED FALSE)
endfunction()

# The layer's objects and libraries into libdistlock, on its first user's call.
function(_distlock_use_layer layer)
  set(obj distlock_layer_${layer})
  get_target_property(used ${obj} DISTLOCK_LAYER_USED)
  if(used)
    return()
  endif()
  get_target_property(libs ${obj} DISTLOCK_LAYER_LIBRARIES)
  if(DISTLOCK_BACKEND_MODULES)  # in each module that names it, and the tests' copy
    if(libs)
      distlock_internal_link(${libs})
    endif()
    distlock_internal_objects(${obj})
  else()
    if(libs)
      distlock_library_link(${libs})
    endif()
    distlock_library_objects(${obj})
  endif()
  set_target_properties(${obj} PROPERTIES DISTLOCK_LAYER_USED TRUE)
endfunction()

function(distlock_add_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "EMBEDDED" "FOUND;MISSING" "SOURCES;LAYERS;LIBRARIES;INCLUDES;DEFINITIONS;SCHEMES")
  if(NOT arg_SCHEMES)
    message(FATAL_ERROR "backend ${name}: SCHEMES (what its register_backend() adds) is required")
  endif()
  set(as_module FALSE)
  if(DISTLOCK_BACKEND_MODULES AND NOT arg_EMBEDDED)
    set(as_module TRUE)
  endif()
  string(TOUPPER "${name}" up)
  string(REPLACE "-" "_" up "${up}")
  if(NOT arg_FOUND)
    if(DISTLOCK_BACKEND_${up} STREQUAL "ON")
      message(FATAL_ERROR "distlock: backend ${name} requested (DISTLOCK_BACKEND_${up}=ON) but ${arg_MISSING} was not found")
    endif()
    message(STATUS "distlock: backend ${name} left out: ${arg_MISSING} not found (AUTO)")
    return()
  endif()
  set(obj distlock_backend_${name})
  add_library(${obj} OBJECT ${arg_SOURCES})
  set_target_properties(${obj} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_options(${obj} PRIVATE -Wall -Wextra -Wpedantic -Werror=switch)
  # A layer's headers are named with their folder: "sql/sql.hpp", "http/http_pool.hpp".
  target_include_directories(${obj} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated/include
                             ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/backends ${arg_INCLUDES})
  if(arg_DEFINITIONS)
    target_compile_definitions(${obj} PRIVATE ${arg_DEFINITIONS})
  endif()
  if(arg_LIBRARIES)
    target_link_libraries(${obj} PRIVATE ${arg_LIBRARIES})
    if(as_module)
      distlock_internal_link(${arg_LIBRARIES})
    else()
      distlock_library_link(${arg_LIBRARIES})
    endif()
  endif()
  foreach(layer IN LISTS arg_LAYERS)
    if(NOT TARGET distlock_layer_${layer})
      message(FATAL_ERROR "backend ${name}: the layer ${layer} is not defined (distlock_add_layer(${layer} ...) "
                          "comes first: in a folder of DISTLOCK_LAYER_DIRS, or earlier in this one)")
    endif()
    _distlock_use_layer(${layer})
    # The layer's usage requirements, not its objects (its headers: through
    # backends/, with the folder).
    target_link_libraries(${obj} PRIVATE $<TARGET_PROPERTY:distlock_layer_${layer},INTERFACE_LINK_LIBRARIES>)
  endforeach()
  set_property(GLOBAL APPEND PROPERTY DISTLOCK_ENABLED_BACKENDS ${name})
  if(as_module)
    distlock_internal_objects(${obj})
    _distlock_add_module(${name} ${obj} "${arg_LAYERS}" "${arg_LIBRARIES}" "${arg_SCHEMES}")
  else()
    distlock_library_objects(${obj})
    set_property(GLOBAL APPEND PROPERTY DISTLOCK_BUILTIN_BACKENDS ${name})
  endif()
endfunction()

# The Debian package of a backend module (docs/packaging.md).
function(distlock_module_package name out)
  set(${out} "libdistlock${PROJECT_VERSION_MAJOR}-${name}" PARENT_SCOPE)
endfunction()

# libdistlock-<name>.so: the backend's objects and its layers', its entry point
# (DISTLOCK_DEFINE_MODULE), linked to libdistlock and its libraries, built
# beside libdistlock (<its directory>/distlock/modules, where the loader
# looks, as in the installed tree).
function(_distlock_add_module name obj layers libraries schemes)
  string(REPLACE "-" "_" id "${name}")
  set(entry ${PROJECT_BINARY_DIR}/generated/module_${id}.cpp)
  file(CONFIGURE OUTPUT ${entry} CONTENT
"// Generated by cmake/DistlockBackend.cmake: the entry point of libdistlock-${name}.so.
#include \"distlock/spi/module.hpp\"

namespace distlock::backends::${id} {
void register_backend(distlock::spi::registry& r);
}

DISTLOCK_DEFINE_MODULE(\"${name}\", distlock::backends::${id}::register_backend)
" @ONLY)
  set(mod distlock_module_${name})
  add_library(${mod} MODULE ${entry} $<TARGET_OBJECTS:${obj}>)
  target_include_directories(${mod} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated/include)
  target_link_libraries(${mod} PRIVATE distlock ${libraries})
  foreach(layer IN LISTS layers)
    target_sources(${mod} PRIVATE $<TARGET_OBJECTS:distlock_layer_${layer}>)
    get_target_property(layer_libs distlock_layer_${layer} DISTLOCK_LAYER_LIBRARIES)
    if(layer_libs)
      target_link_libraries(${mod} PRIVATE ${layer_libs})
    endif()
  endforeach()
  set_target_properties(${mod} PROPERTIES OUTPUT_NAME distlock-${name} PREFIX lib
                        LIBRARY_OUTPUT_DIRECTORY $<TARGET_FILE_DIR:distlock>/distlock/modules
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        # No run-time search path, in the tree or installed: the
                        # libdistlock that loads it is already in the process
                        # (found by its SONAME), the client libraries are the system's.
                        SKIP_BUILD_RPATH ON INSTALL_RPATH "")
  # Every symbol resolved at link time (libdistlock's exported SPI, the client
  # libraries): a module that needs a hidden one fails here, not at dlopen.
  target_link_options(${mod} PRIVATE LINKER:--no-undefined LINKER:--as-needed)
  distlock_module_package(${name} package)
  if(DISTLOCK_INSTALL)
    install(TARGETS ${mod} LIBRARY DESTINATION ${DISTLOCK_MODULE_INSTALL_DIR} COMPONENT ${package}
            PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()
  string(JOIN "\", \"" quoted ${schemes})
  set_property(GLOBAL APPEND PROPERTY DISTLOCK_MODULE_ENTRIES "{\"${name}\", \"${package}\", {\"${quoted}\"}}")
  set_property(GLOBAL APPEND PROPERTY DISTLOCK_MODULE_TARGETS ${mod})
endfunction()

# Writes register_builtin_backends(): one explicit call per backend it
# registers, and build_modules(): the table of this build's backend modules.
# libdistlock registers what is compiled into it (every backend, or in a
# modules build the EMBEDDED ones, with the modules' table); distlock_internal
# (the white-box tests' static copy) always registers every backend, with no
# module.
function(_distlock_write_registration out names entries)
  set(decls "")
  set(calls "")
  foreach(n IN LISTS names)
    string(REPLACE "-" "_" id "${n}")
    string(APPEND decls "namespace distlock::backends::${id} { void register_backend(spi::registry&); }\n")
    string(APPEND calls "    distlock::backends::${id}::register_backend(r);\n")
  endforeach()
  list(JOIN entries ",\n        " table)
  file(CONFIGURE OUTPUT ${out} CONTENT
"// Generated by cmake/DistlockBackend.cmake: the backends of this build.
#include \"builtin.hpp\"
#include \"modules.hpp\"

using distlock::spi::registry;
namespace distlock { namespace spi {} }
namespace distlock::backends {}
using namespace distlock;
@decls@
void distlock::detail::register_builtin_backends(spi::registry& r) {
@calls@}

std::vector<distlock::detail::module_entry> distlock::detail::build_modules() {
    return {
        @table@
    };
}
" @ONLY)
endfunction()

function(distlock_generate_registration target)
  get_property(all GLOBAL PROPERTY DISTLOCK_ENABLED_BACKENDS)
  get_property(builtin GLOBAL PROPERTY DISTLOCK_BUILTIN_BACKENDS)
  get_property(entries GLOBAL PROPERTY DISTLOCK_MODULE_ENTRIES)
  set(every ${PROJECT_BINARY_DIR}/generated/builtin_backends.cpp)
  _distlock_write_registration(${every} "${all}" "")
  if(DISTLOCK_BACKEND_MODULES)
    set(own ${PROJECT_BINARY_DIR}/generated/builtin_backends_modules.cpp)
    _distlock_write_registration(${own} "${builtin}" "${entries}")
    target_sources(${target} PRIVATE ${own})
  else()
    target_sources(${target} PRIVATE ${every})
  endif()
  if(TARGET distlock_internal)
    target_sources(distlock_internal PRIVATE ${every})
  endif()
endfunction()
