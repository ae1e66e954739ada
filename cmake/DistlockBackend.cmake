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
#   distlock_add_backend(<name> FOUND <bool> MISSING "<what to install>"
#                        SOURCES ... [LAYERS ...] [LIBRARIES ...] [INCLUDES ...] [DEFINITIONS ...])
#       AUTO + not found: a status line, the backend is left out.
#       ON + not found:   a configure error.
#       found:            the sources are compiled into libdistlock, the
#                         libraries linked PRIVATE (never in a public header), and
#                         distlock::backends::<name>::register_backend() is called
#                         by the generated register_builtin_backends().
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
  if(libs)
    distlock_library_link(${libs})
  endif()
  distlock_library_objects(${obj})
  set_target_properties(${obj} PROPERTIES DISTLOCK_LAYER_USED TRUE)
endfunction()

function(distlock_add_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "FOUND;MISSING" "SOURCES;LAYERS;LIBRARIES;INCLUDES;DEFINITIONS")
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
    distlock_library_link(${arg_LIBRARIES})
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
  distlock_library_objects(${obj})
  set_property(GLOBAL APPEND PROPERTY DISTLOCK_ENABLED_BACKENDS ${name})
endfunction()

# Writes register_builtin_backends(): one explicit call per enabled backend.
function(distlock_generate_registration target)
  get_property(names GLOBAL PROPERTY DISTLOCK_ENABLED_BACKENDS)
  set(decls "")
  set(calls "")
  foreach(n IN LISTS names)
    string(REPLACE "-" "_" id "${n}")
    string(APPEND decls "namespace distlock::backends::${id} { void register_backend(spi::registry&); }\n")
    string(APPEND calls "    distlock::backends::${id}::register_backend(r);\n")
  endforeach()
  set(out ${PROJECT_BINARY_DIR}/generated/builtin_backends.cpp)
  file(CONFIGURE OUTPUT ${out} CONTENT
"// Generated by cmake/DistlockBackend.cmake: the backends of this build.
#include \"builtin.hpp\"

using distlock::spi::registry;
namespace distlock { namespace spi {} }
namespace distlock::backends {}
using namespace distlock;
@decls@
void distlock::detail::register_builtin_backends(spi::registry& r) {
@calls@}
" @ONLY)
  target_sources(${target} PRIVATE ${out})
  if(TARGET distlock_internal)
    target_sources(distlock_internal PRIVATE ${out})
  endif()
endfunction()
