# The SQL strategy layer is shared by the mysql and postgres backends, whose
# object files all go into libdistlock: its sources must be compiled once only.
# distlock_sql_layer_sources(<out> <found>) sets <out> to the layer's sources for
# the first backend that is built, and to nothing for the next one.
function(distlock_sql_layer_sources out found)
  set(${out} "" PARENT_SCOPE)
  get_property(_done GLOBAL PROPERTY DISTLOCK_SQL_LAYER_ADDED)
  if(found AND NOT _done)
    set_property(GLOBAL PROPERTY DISTLOCK_SQL_LAYER_ADDED TRUE)
    set(${out} ${PROJECT_SOURCE_DIR}/backends/sql/strategies.cpp ${PROJECT_SOURCE_DIR}/backends/sql/stock.cpp
        PARENT_SCOPE)
  endif()
endfunction()
