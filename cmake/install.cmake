# Installation and the CMake package: `cmake --install build --prefix P` gives
#
#   P/include/tx/...                        the public headers of every layer
#   P/lib/libtx.so -> libtx.so.0 -> libtx.so.0.1.0   (SONAME libtx.so.0)
#   P/lib/cmake/tx/txConfig.cmake, txConfigVersion.cmake, txTargets*.cmake
#   P/lib/tx/libtx_repl_guard.so, P/bin/tx-repl       (clang-repl support)
#   P/lib/tx/tx-nvrtc-worker                          (NVRTC in a child process)
#
# so that another project does
#
#   find_package(tx CONFIG REQUIRED)       # CMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE tx::tx)
#
# The package is relocatable: nothing installed names the source tree, the
# build tree or the prefix itself. Included at the end of the top-level
# CMakeLists.txt, after the tx target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TX_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tx" CACHE STRING
    "Where txConfig.cmake is installed, relative to the prefix")
mark_as_advanced(TX_INSTALL_CMAKEDIR)

# ------------------------------------------------------- the library's interface
# The top level puts Boost's include directory (an absolute path of this
# machine) on tx's interface. Keep it for the build tree only: the installed
# txConfig.cmake finds Boost on the consumer's machine instead.
foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
  get_target_property(_tx_dirs tx ${prop})
  if(NOT _tx_dirs)
    continue()
  endif()
  set(_tx_fixed "")
  foreach(_d IN LISTS _tx_dirs)
    if(Boost_INCLUDE_DIRS AND _d IN_LIST Boost_INCLUDE_DIRS)
      list(APPEND _tx_fixed "$<BUILD_INTERFACE:${_d}>")
    else()
      list(APPEND _tx_fixed "${_d}")
    endif()
  endforeach()
  set_property(TARGET tx PROPERTY ${prop} "${_tx_fixed}")
endforeach()
unset(_tx_dirs)
unset(_tx_fixed)

# The installed libtx finds the libraries it links (libLLVM where it is not
# in the default search path, e.g. /usr/lib/llvm-19/lib) without
# LD_LIBRARY_PATH.
set_target_properties(tx PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)

# ------------------------------------------------------------- what is installed
install(TARGETS tx EXPORT txTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tx_runtime NAMELINK_COMPONENT tx_dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tx_runtime
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tx_dev)

# The compiler process (NVRTC in a child: docs/reliability.md), where libtx
# looks for it: lib/tx/tx-nvrtc-worker.
install(TARGETS tx_nvrtc_worker
  RUNTIME DESTINATION ${CMAKE_INSTALL_LIBDIR}/tx COMPONENT tx_runtime)

# Every layer's headers merge into one include/tx/ tree (their paths do not
# overlap: tx/*.hpp, tx/lowering/, tx/runtime/, tx/ops/).
foreach(_layer include dsl/include lowering/include runtime/include ops/include)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer}/tx)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_layer}/tx
      DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT tx_dev
      FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
  endif()
endforeach()

install(EXPORT txTargets NAMESPACE tx:: DESTINATION ${TX_INSTALL_CMAKEDIR} COMPONENT tx_dev)

# The Boost the package asks for: the top level's minimum.
set(TX_BOOST_MIN_VERSION 1.70)
set(TX_PACKAGE_HOST_JIT ${TX_BUILD_HOSTJIT})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/txConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/txConfig.cmake
  INSTALL_DESTINATION ${TX_INSTALL_CMAKEDIR}
  NO_SET_AND_CHECK_MACRO NO_CHECK_REQUIRED_COMPONENTS_MACRO)
# 0.x: minor versions may break the API, so 0.1 accepts 0.1.*.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/txConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/txConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/txConfigVersion.cmake
  DESTINATION ${TX_INSTALL_CMAKEDIR} COMPONENT tx_dev)

# ------------------------------------------------ clang-repl support (notebooks/)
# libtx_repl_guard (keeps a clang-repl session alive after an uncaught
# exception; makes %lib safe) and the tx-repl launcher, for the build tree
# and the install.
if(EXISTS ${PROJECT_SOURCE_DIR}/notebooks/repl/repl.cmake)
  include(${PROJECT_SOURCE_DIR}/notebooks/repl/repl.cmake)
endif()
