# The run-time search paths (DT_RUNPATH, DT_RPATH) of the ELF files distlock
# builds and installs name only absolute directories or ones relative to the
# file itself ($ORIGIN). An empty element (a trailing ':', which CMake appends to
# the build-tree RPATH of a target it will rewrite at install) or a relative one
# is searched from the CURRENT directory by glibc's ld.so: whoever can write a
# `libgcc_s.so.1` into the directory someone runs build/bin/distlock from gets
# their code run as that user.
#
# include()d by run.cmake for the installed prefix, or run as a ctest script:
#   cmake -DREADELF=... -DDIRS="<dir>;..." [-DREQUIRED="<file>;..."] -P check_rpath.cmake
# DIRS are searched recursively; REQUIRED files must be among the ELF files
# checked (so that the check never passes on an empty or unbuilt directory).
cmake_policy(VERSION 3.25)

# distlock_check_rpaths(<readelf> DIRS <dir>... [REQUIRED <file>...])
function(distlock_check_rpaths readelf)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DIRS;REQUIRED")
  set(files "")
  foreach(dir IN LISTS arg_DIRS)
    file(GLOB_RECURSE found LIST_DIRECTORIES false ${dir}/*)
    list(APPEND files ${found})
  endforeach()
  set(checked "")
  set(bad "")
  foreach(f IN LISTS files)
    if(IS_SYMLINK ${f} OR f MATCHES "/CMakeFiles/")  # a versioned library's links; objects
      continue()
    endif()
    file(READ ${f} magic LIMIT 4 HEX)
    if(NOT magic STREQUAL "7f454c46")
      continue()
    endif()
    execute_process(COMMAND ${readelf} -d ${f} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${readelf} -d ${f} failed (${rc}): ${err}")
    endif()
    list(APPEND checked ${f})
    string(REGEX MATCHALL "\\((RPATH|RUNPATH)\\)[^\n]*\\[[^\n]*\\]" entries "${out}")
    foreach(entry IN LISTS entries)
      string(REGEX REPLACE "^\\(([A-Z]+)\\).*\\[(.*)\\]$" "\\1" tag "${entry}")
      string(REGEX REPLACE "^\\(([A-Z]+)\\).*\\[(.*)\\]$" "\\2" path "${entry}")
      string(REPLACE ":" ";" elements "${path}")
      foreach(element IN LISTS elements)  # IN LISTS keeps the empty elements
        if(element STREQUAL "")
          list(APPEND bad "${f}: ${tag} [${path}] has an empty element (the current directory)")
        elseif(NOT element MATCHES "^(/|\\$ORIGIN(/|$)|\\$\\{ORIGIN\\}(/|$))")
          list(APPEND bad "${f}: ${tag} [${path}] has the relative element '${element}'")
        endif()
      endforeach()
    endforeach()
  endforeach()
  foreach(f IN LISTS arg_REQUIRED)
    if(NOT f IN_LIST checked)
      list(APPEND bad "${f}: not found among the ELF files checked (not built?)")
    endif()
  endforeach()
  list(LENGTH checked n)
  if(bad)
    list(JOIN bad "\n  " bad)
    message(FATAL_ERROR "run-time search paths outside the file's own tree:\n  ${bad}")
  endif()
  message(STATUS "run-time search paths of ${n} ELF files: absolute or $ORIGIN-relative")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT READELF OR NOT DIRS)
    message(FATAL_ERROR "READELF and DIRS must be set")
  endif()
  distlock_check_rpaths(${READELF} DIRS ${DIRS} REQUIRED ${REQUIRED})
endif()
