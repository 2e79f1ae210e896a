# Third-party dependencies, all from Debian packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 CONFIG QUIET)

# Distributed execution (src/dist/) over MPI: AUTO builds it when MPI is found (Debian: libopenmpi-dev),
# ON requires it, OFF leaves it out. Without it distributed.communication_backend accepts only `none`.
# zstd (libzstd-dev) adds distributed.compression: zstd.
set(NERVE_WITH_MPI AUTO CACHE STRING "Build the MPI transport of the distributed runtime: AUTO, ON or OFF")
set_property(CACHE NERVE_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(NERVE_MPI_ENABLED OFF)
if(NOT NERVE_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(NERVE_MPI_ENABLED ON)
  elseif(NERVE_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "NERVE_WITH_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
pkg_check_modules(ZSTD QUIET IMPORTED_TARGET libzstd)
set(NERVE_ZSTD_ENABLED ${ZSTD_FOUND})
find_program(NERVE_MPIEXEC NAMES mpirun mpiexec)
message(STATUS "nerve: MPI transport ${NERVE_MPI_ENABLED}, zstd compression ${NERVE_ZSTD_ENABLED}")
