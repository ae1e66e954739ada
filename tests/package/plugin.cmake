# ctest driver: install the built distlock into a prefix, build the example
# backend of plugin/ against it (find_package, the public registration, the
# installed conformance suite) and run the suite on it with CTest.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CTEST_COMMAND)
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
build_against_prefix(${SOURCE_DIR}/plugin ${WORK_DIR}/build)
step(${CTEST_COMMAND} --test-dir ${WORK_DIR}/build --output-on-failure)
