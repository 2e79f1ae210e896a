# Third-party dependencies, all from Debian packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 CONFIG QUIET)
# OpenCL (optional): the ICD loader and headers (ocl-icd-opencl-dev, opencl-headers). When found, the
# OpenCL backend is built (NERVE_HAVE_OPENCL); without it everything else builds and runs.
option(NERVE_ENABLE_OPENCL "Build the OpenCL backend when OpenCL is found" ON)
set(NERVE_HAVE_OPENCL OFF)
if(NERVE_ENABLE_OPENCL)
  find_package(OpenCL QUIET)
  if(OpenCL_FOUND)
    set(NERVE_HAVE_OPENCL ON)
    message(STATUS "nerve: OpenCL ${OpenCL_VERSION_STRING} found: building the OpenCL backend")
  else()
    message(STATUS "nerve: OpenCL not found (install ocl-icd-opencl-dev opencl-headers): no OpenCL backend")
  endif()
endif()

# CUDA (src/backend/cuda/): AUTO builds the CUDA backend when the toolkit is found (FindCUDAToolkit:
# /usr/local/cuda, or CUDAToolkit_ROOT), ON requires it, OFF leaves it out. The library does not link
# CUDA: it needs the toolkit's headers at build time and loads libcudart at run time (cudart_driver.cpp),
# so it builds and runs everywhere, GPU or not. The examples and GPU benchmarks with .cu files need
# nvcc (enable_language(CUDA)); CMAKE_CUDA_ARCHITECTURES defaults to 90 (Hopper) — CI compiles .cu
# files for one architecture only, to keep its time.
set(NERVE_WITH_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (when the toolkit is found), ON or OFF")
set_property(CACHE NERVE_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(NERVE_HAVE_CUDA OFF)
set(NERVE_HAVE_CUDA_COMPILER OFF)
if(NOT NERVE_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(NERVE_HAVE_CUDA ON)
    set(NERVE_CUDART_SONAME "libcudart.so.${CUDAToolkit_VERSION_MAJOR}")
    message(STATUS "nerve: CUDA toolkit ${CUDAToolkit_VERSION} found: building the CUDA backend (loads ${NERVE_CUDART_SONAME})")
    if(NERVE_BUILD_EXAMPLES OR NERVE_BUILD_BENCH)
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES 90)
      endif()
      if(NOT CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_BIN_DIR}/nvcc")
        set(CMAKE_CUDA_COMPILER "${CUDAToolkit_BIN_DIR}/nvcc")
      endif()
      include(CheckLanguage)
      check_language(CUDA)
      if(CMAKE_CUDA_COMPILER)
        enable_language(CUDA)
        # nerve's targets require C++20 (cxx_std_20), which CMake turns into CUDA20 for .cu files of
        # programs linking them; CMake 3.25 predates nvcc's C++20 support and knows no flag for it.
        if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
          set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
          set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
        endif()
        # One libcudart per process: the library loads the shared one, so programs link it too.
        set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
        set(NERVE_HAVE_CUDA_COMPILER ON)
      endif()
    endif()
  elseif(NERVE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "NERVE_WITH_CUDA=ON but no CUDA toolkit was found (set CUDAToolkit_ROOT)")
  else()
    message(STATUS "nerve: CUDA toolkit not found: no CUDA backend")
  endif()
endif()

# Distributed execution (src/dist/) over MPI: AUTO builds it when MPI is found (Debian: libopenmpi-dev),
# ON requires it, OFF leaves it out. Without it distributed.communication_backend accepts only `none`.
# zstd (libzstd-dev) adds distributed.compression: zstd.
set(NERVE_WITH_MPI AUTO CACHE STRING "Build the MPI transport of the distributed runtime: AUTO, ON or OFF")
set_property(CACHE NERVE_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
# The library links MPI through its pkg-config module when there is one (Open MPI: ompi-c, MPICH:
# mpich), so that the installed package can recreate the target in a consumer whatever languages the
# consumer enables (FindMPI's MPI::MPI_C needs C enabled); FindMPI otherwise.
set(NERVE_MPI_ENABLED OFF)
set(NERVE_MPI_PC_MODULE "")
if(NOT NERVE_WITH_MPI STREQUAL "OFF")
  foreach(module ompi-c mpich)
    pkg_check_modules(NERVE_MPI_PC QUIET IMPORTED_TARGET ${module})
    if(NERVE_MPI_PC_FOUND)
      set(NERVE_MPI_PC_MODULE ${module})
      break()
    endif()
  endforeach()
  if(NERVE_MPI_PC_FOUND)
    set(NERVE_MPI_ENABLED ON)
    set(NERVE_MPI_TARGET PkgConfig::NERVE_MPI_PC)
  else()
    find_package(MPI COMPONENTS C QUIET)
    if(MPI_C_FOUND)
      set(NERVE_MPI_ENABLED ON)
      set(NERVE_MPI_TARGET MPI::MPI_C)
    endif()
  endif()
  if(NOT NERVE_MPI_ENABLED AND NERVE_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "NERVE_WITH_MPI=ON but no MPI was found (Debian: apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
pkg_check_modules(ZSTD QUIET IMPORTED_TARGET libzstd)
set(NERVE_ZSTD_ENABLED ${ZSTD_FOUND})
find_program(NERVE_MPIEXEC NAMES mpirun mpiexec)
message(STATUS "nerve: MPI transport ${NERVE_MPI_ENABLED}, zstd compression ${NERVE_ZSTD_ENABLED}")
