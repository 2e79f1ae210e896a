# Writes OUTPUT (a header defining NERVE_GIT_COMMIT) from `git rev-parse` in SOURCE_DIR; "unknown"
# when git or the repository is missing. Rewrites the file only when its content changes.
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE out RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(status EQUAL 0 AND out)
    set(commit "${out}")
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                    OUTPUT_VARIABLE dirty RESULT_VARIABLE status ERROR_QUIET)
    if(status EQUAL 0 AND dirty)
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
set(content "#pragma once\n#define NERVE_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
