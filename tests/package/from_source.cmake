# ctest driver: build a consumer project that takes distlock from its source
# tree (MODE subdir: add_subdirectory; fetch: FetchContent), and run it. The
# server backends are left out: what is tested is the embedding, and each
# consumer builds libdistlock again.
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
require_vars(DISTLOCK_SOURCE MODE WORK_DIR GENERATOR)
set(off "")
foreach(b REDIS REDLOCK MYSQL POSTGRES ZOOKEEPER ETCD CONSUL)
  list(APPEND off -DDISTLOCK_BACKEND_${b}=OFF)
endforeach()
step(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/${MODE} -B ${WORK_DIR} -G ${GENERATOR}
     -DDISTLOCK_SOURCE=${DISTLOCK_SOURCE} ${off} "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
step(${CMAKE_COMMAND} --build ${WORK_DIR})
step(${WORK_DIR}/consumer)
