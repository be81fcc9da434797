# clang-repl support, included from cmake/install.cmake (Linux only):
#   libtx_repl_guard.so   LD_PRELOADed into clang-repl-19 (see tx_repl_guard.cpp)
#   tx_repl_supervisor.py runs clang-repl for tx-repl; restarts and replays a
#                         session whose JIT an earlier failed input poisoned
#   tx-repl               clang-repl-19 with the guard, -std=c++20 and tx's
#                         include paths: build/tx-repl uses this build tree,
#                         <prefix>/bin/tx-repl the install it sits in.
if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  return()
endif()

add_library(tx_repl_guard MODULE ${CMAKE_CURRENT_LIST_DIR}/tx_repl_guard.cpp)
target_link_libraries(tx_repl_guard PRIVATE ${CMAKE_DL_LIBS})
target_compile_options(tx_repl_guard PRIVATE ${TX_WARNINGS})
set_target_properties(tx_repl_guard PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
install(TARGETS tx_repl_guard LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/tx COMPONENT tx_repl)
install(PROGRAMS ${CMAKE_CURRENT_LIST_DIR}/tx_repl_supervisor.py
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/tx COMPONENT tx_repl)

# What the launcher passes to clang-repl besides the include paths: tx's
# interface definitions, Boost where it is not in the default search path,
# and the GCC whose libstdc++ headers built libtx (clang would pick the newest
# GCC installed; the same headers on both sides of the boundary keep
# libstdc++'s inline code and layouts identical).
set(TX_REPL_DEFINES "")
if(TX_BUILD_HOSTJIT)
  list(APPEND TX_REPL_DEFINES TX_HAVE_HOST_JIT=1)
endif()
list(JOIN TX_REPL_DEFINES " " TX_REPL_DEFINES)
set(TX_REPL_EXTRA_INCLUDES "")
foreach(d IN LISTS Boost_INCLUDE_DIRS)
  if(NOT d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    string(APPEND TX_REPL_EXTRA_INCLUDES " \"${d}\"")
  endif()
endforeach()
set(TX_REPL_GCC_INSTALL_DIR "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-libgcc-file-name
    OUTPUT_VARIABLE _tx_libgcc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_tx_libgcc AND EXISTS "${_tx_libgcc}")
    get_filename_component(TX_REPL_GCC_INSTALL_DIR "${_tx_libgcc}" DIRECTORY)
  endif()
endif()
set(TX_REPL_GUARD_NAME ${CMAKE_SHARED_MODULE_PREFIX}tx_repl_guard${CMAKE_SHARED_MODULE_SUFFIX})
set(TX_REPL_SONAME ${CMAKE_SHARED_LIBRARY_PREFIX}tx${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR})

# The build tree's launcher (generator expressions name the built files).
set(TX_REPL_MODE build)
set(TX_REPL_BUILD_LIB "$<TARGET_SONAME_FILE:tx>")
set(TX_REPL_BUILD_GUARD "$<TARGET_FILE:tx_repl_guard>")
set(TX_REPL_BUILD_SUPERVISOR "${CMAKE_CURRENT_LIST_DIR}/tx_repl_supervisor.py")
set(TX_REPL_BUILD_INCLUDES "")
foreach(layer include dsl/include lowering/include runtime/include ops/include
              notebooks/display/include)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${layer})
    string(APPEND TX_REPL_BUILD_INCLUDES " \"${PROJECT_SOURCE_DIR}/${layer}\"")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/tx-repl.in ${CMAKE_BINARY_DIR}/CMakeFiles/tx-repl.build @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/tx-repl INPUT ${CMAKE_BINARY_DIR}/CMakeFiles/tx-repl.build
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

# The installed launcher finds everything relative to its own location.
set(TX_REPL_MODE install)
set(TX_REPL_BUILD_LIB "")
set(TX_REPL_BUILD_GUARD "")
set(TX_REPL_BUILD_SUPERVISOR "")
set(TX_REPL_BUILD_INCLUDES "")
configure_file(${CMAKE_CURRENT_LIST_DIR}/tx-repl.in ${CMAKE_BINARY_DIR}/CMakeFiles/tx-repl.install @ONLY)
install(PROGRAMS ${CMAKE_BINARY_DIR}/CMakeFiles/tx-repl.install DESTINATION ${CMAKE_INSTALL_BINDIR}
  RENAME tx-repl COMPONENT tx_repl)
