# What the package test drivers share: the variables each needs are set, a fresh
# WORK_DIR, step(COMMAND...) that stops the test when a command fails, and
# build_against_prefix() for the projects built against the installed package.
macro(require_vars)
  foreach(var ${ARGN})
    if(NOT ${var})
      message(FATAL_ERROR "${var} not set")
    endif()
  endforeach()
  file(REMOVE_RECURSE ${WORK_DIR})
endmacro()
macro(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endmacro()
# Configures the project in SOURCE (in BUILD) against the package installed in
# WORK_DIR/prefix, with EXTRA_FLAGS (sanitizers), and builds it.
macro(build_against_prefix source build)
  step(${CMAKE_COMMAND} -S ${source} -B ${build} -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
       "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
  step(${CMAKE_COMMAND} --build ${build})
endmacro()
