# configure_without_cuda.cmake — configures nerve with NERVE_WITH_CUDA=OFF (library only) and checks that
# it succeeds, builds no CUDA backend and enables no CUDA language. Run by CTest with -P.
file(REMOVE_RECURSE ${BINARY})
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BINARY} -G ${GENERATOR} -DNERVE_WITH_CUDA=OFF -DNERVE_BUILD_TESTS=OFF
          -DNERVE_BUILD_BENCH=OFF -DNERVE_BUILD_EXAMPLES=OFF -DNERVE_BUILD_TOOLS=OFF
  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "configuring with NERVE_WITH_CUDA=OFF failed:\n${output}\n${errors}")
endif()
if(output MATCHES "building the CUDA backend" OR output MATCHES "CUDA compiler identification")
  message(FATAL_ERROR "NERVE_WITH_CUDA=OFF still configured CUDA:\n${output}")
endif()
set(cuda_driver "")
if(EXISTS ${BINARY}/build.ninja)
  file(STRINGS ${BINARY}/build.ninja cuda_driver REGEX "cudart_driver")
endif()
if(cuda_driver)
  message(FATAL_ERROR "NERVE_WITH_CUDA=OFF still compiles cudart_driver.cpp")
endif()
file(REMOVE_RECURSE ${BINARY})
message(STATUS "NERVE_WITH_CUDA=OFF configures without CUDA")
