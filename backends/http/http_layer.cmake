# The HTTP/JSON layer shared by etcd:// and consul:// (libcurl, found by the top
# level, and nlohmann-json, Debian nlohmann-json3-dev). Sets <found> and, when
# found, adds the layer (compiled once however many backends call this).
function(distlock_http_layer found)
  find_package(nlohmann_json 3 CONFIG QUIET)
  if(nlohmann_json_FOUND AND TARGET CURL::libcurl)
    set(_dir ${PROJECT_SOURCE_DIR}/backends/http)
    distlock_add_layer(http SOURCES ${_dir}/http_options.cpp ${_dir}/http_transfer.cpp ${_dir}/http_easy.cpp
                                    ${_dir}/http_pool.cpp ${_dir}/http_multi.cpp ${_dir}/http_monitor.cpp
                                    ${_dir}/http_codec.cpp
                       LIBRARIES CURL::libcurl nlohmann_json::nlohmann_json)
    set(${found} TRUE PARENT_SCOPE)
  else()
    set(${found} FALSE PARENT_SCOPE)
  endif()
endfunction()
