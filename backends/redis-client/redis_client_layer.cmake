# The Redis client layer shared by redis:// and redlock:// (backends/redis-client:
# hiredis, Debian libhiredis-dev; the endpoint from the URL). Sets <found> and,
# when found, adds the layer (compiled once however many backends call this).
function(distlock_redis_client_layer found)
  set(_hiredis_found FALSE)
  set(_hiredis_libs "")
  set(_hiredis_includes "")
  # Debian's HiredisConfig.cmake (0.14: variables, no target; its version file
  # needs a requested version), else pkg-config's hiredis.pc (a GLOBAL target:
  # the layer is used from the folder of each backend).
  find_package(Hiredis 0.14 QUIET)
  if(Hiredis_FOUND AND HIREDIS_LIB_HIREDIS AND HIREDIS_INCLUDE_DIRS)
    set(_hiredis_found TRUE)
    set(_hiredis_libs ${HIREDIS_LIBRARIES})
    set(_hiredis_includes ${HIREDIS_INCLUDE_DIRS})
  else()
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
      pkg_check_modules(HIREDIS_PC QUIET IMPORTED_TARGET GLOBAL hiredis)
      if(HIREDIS_PC_FOUND)
        set(_hiredis_found TRUE)
        set(_hiredis_libs PkgConfig::HIREDIS_PC)
      endif()
    endif()
  endif()
  if(_hiredis_found AND NOT TARGET distlock_layer_redis-client)
    set(_dir ${PROJECT_SOURCE_DIR}/backends/redis-client)
    distlock_add_layer(redis-client SOURCES ${_dir}/redis_client.cpp ${_dir}/subscriber.cpp
                       LIBRARIES ${_hiredis_libs} OpenSSL::Crypto)
    if(_hiredis_includes)
      target_include_directories(distlock_layer_redis-client PUBLIC ${_hiredis_includes})
    endif()
  endif()
  set(${found} ${_hiredis_found} PARENT_SCOPE)
endfunction()
