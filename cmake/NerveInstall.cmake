# Installation and the exported packages: the CMake package `nerve` (nerve::nerve, nerve::nerve_static)
# and the pkg-config module `nerve`. tests/install/ builds a consumer against both after installing to a
# temporary prefix.
#
# Layout (GNUInstallDirs): headers in include/nerve/, libnerve.so* and libnerve.a in the libdir,
# <libdir>/cmake/nerve/ for the CMake package, <libdir>/pkgconfig/nerve.pc, tools in bin/.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(NERVE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/nerve"
  CACHE STRING "Where the nerve CMake package files are installed, relative to the prefix")

# Libraries. Their link interfaces are exported as written in src/CMakeLists.txt; for the static library
# the private dependencies appear as $<LINK_ONLY:...> entries (PkgConfig::HWLOC, yaml-cpp, fmt::fmt, and
# OpenCL::OpenCL when the OpenCL backend is built),
# which nerveConfig.cmake recreates in the consumer before it loads nerveTargets.cmake.
install(TARGETS nerve nerve_static
  EXPORT nerveTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The targets' include directory is $<INSTALL_INTERFACE:include> (src/CMakeLists.txt).
# Public headers only: include/nerve/ is the API (include/nerve/detail/ included, src/ never).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nerve
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

install(EXPORT nerveTargets
  NAMESPACE nerve::
  FILE nerveTargets.cmake
  DESTINATION ${NERVE_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/nerveConfig.cmake.in
  ${PROJECT_BINARY_DIR}/nerveConfig.cmake
  INSTALL_DESTINATION ${NERVE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nerveConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/nerveConfig.cmake ${PROJECT_BINARY_DIR}/nerveConfigVersion.cmake
  DESTINATION ${NERVE_INSTALL_CMAKEDIR})

# pkg-config: the file names the prefix it is installed to, which `cmake --install --prefix` may
# change after configuration, so it is configured when it is installed (the install script's
# CMAKE_INSTALL_PREFIX is the final one; DESTDIR is, correctly, not part of it).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(nerve_pc_libdir "${CMAKE_INSTALL_LIBDIR}")
else()
  set(nerve_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(nerve_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(nerve_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
if(NERVE_HAVE_OPENCL)
  set(nerve_pc_extra_libs "-lOpenCL ")
else()
  set(nerve_pc_extra_libs "")
endif()
# The C++ runtime and libm, which a C compiler driver does not add (src/CMakeLists.txt).
set(nerve_pc_system_libs "")
if(NERVE_CXX_RUNTIME_LIBRARY)
  set(nerve_pc_system_libs " -l${NERVE_CXX_RUNTIME_LIBRARY} -lm")
endif()
# The distributed runtime's optional libraries (cmake/NerveDependencies.cmake).
set(nerve_pc_requires_extra "")
if(NERVE_MPI_PC_MODULE)
  string(APPEND nerve_pc_requires_extra " ${NERVE_MPI_PC_MODULE}")
endif()
if(NERVE_ZSTD_ENABLED)
  string(APPEND nerve_pc_requires_extra " libzstd")
endif()
install(CODE "
  set(NERVE_PC_EXTRA_LIBS \"${nerve_pc_extra_libs}\")
  set(NERVE_PC_SYSTEM_LIBS \"${nerve_pc_system_libs}\")
  set(NERVE_PC_REQUIRES_EXTRA \"${nerve_pc_requires_extra}\")
  set(NERVE_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(NERVE_PC_LIBDIR [[${nerve_pc_libdir}]])
  set(NERVE_PC_INCLUDEDIR [[${nerve_pc_includedir}]])
  set(NERVE_PC_DESCRIPTION \"${PROJECT_DESCRIPTION}\")
  set(NERVE_PC_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/nerve.pc.in\" \"${PROJECT_BINARY_DIR}/pkgconfig/nerve.pc\" @ONLY)
")
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/nerve.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Tools, when this build has them. They carry the library's code (nerve_internal, static): they need
# no run path to libnerve.so.
foreach(tool nerve-info nerve-run openclaw-benchmark)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
