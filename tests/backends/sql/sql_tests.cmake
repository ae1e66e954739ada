# distlock_add_sql_tests(<dialect> STRATEGIES ...)
#   For tests/backends/<dialect>/: the conformance suite for each strategy
#   (URL from DISTLOCK_TEST_<DIALECT>_<STRATEGY>_URL), and distlock-<dialect>-tests:
#   the SQL layer's shared cases (sql_test.cpp here) with the dialect's facts and
#   own cases (<dialect>_test.cpp there). The clock-skew shim and the probe they
#   start are defined by tests/backends/sql/CMakeLists.txt.
function(distlock_add_sql_tests dialect)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "STRATEGIES")
  string(TOUPPER ${dialect} up)
  foreach(strategy IN LISTS arg_STRATEGIES)
    string(TOUPPER ${strategy} var)
    string(REPLACE "-" "_" var ${var})
    distlock_add_conformance(${dialect}.${strategy} URL_ENV DISTLOCK_TEST_${up}_${var}_URL)
  endforeach()
  set(target distlock-${dialect}-tests)
  distlock_add_test_program(${target} SOURCES ${dialect}_test.cpp ${PROJECT_SOURCE_DIR}/tests/backends/sql/sql_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/round_trip_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/storage_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/primitives_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/inspect_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/tls_test.cpp
                            ${PROJECT_SOURCE_DIR}/tests/backends/sql/crash_test.cpp
                            URL_ENV DISTLOCK_TEST_${up}_URL TIMEOUT 300)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/backends/sql
                             ${PROJECT_SOURCE_DIR}/backends/sql ${PROJECT_SOURCE_DIR}/backends/${dialect})
  target_compile_definitions(${target} PRIVATE
    DISTLOCK_SQL_SKEW_SHIM="$<TARGET_FILE:distlock_sql_clock_skew>"
    DISTLOCK_SQL_PROBE="$<TARGET_FILE:distlock-sql-lock-probe>")
  add_dependencies(${target} distlock_sql_clock_skew distlock-sql-lock-probe)
  # Over TLS (integration/servers/<dialect>-tls.sh): the hidden [.tls] cases, when its URL is set.
  add_test(NAME ${target}.tls COMMAND ${target} --require-env DISTLOCK_TEST_${up}_TLS_URL "[.tls]")
  set_tests_properties(${target}.tls PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
  # Tokens across a server crash: the hidden [.crash] case kills and restarts the
  # server every other test uses, so it runs alone (RUN_SERIAL).
  add_test(NAME ${target}.crash COMMAND ${target} --require-env DISTLOCK_TEST_SERVERS_CTL "[.crash]")
  set_tests_properties(${target}.crash PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 RUN_SERIAL TRUE)
endfunction()
