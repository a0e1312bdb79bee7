# Writes OUT (a header defining MOX_BUILD_COMMIT) from `git describe` of SRC at build time, and
# only when the text changes, so a commit re-stamps mox bench/calibrate without rebuilding the rest.
execute_process(COMMAND git describe --always --dirty --tags WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT describe)
  set(describe unknown)
endif()
set(text "#pragma once\n#define MOX_BUILD_COMMIT \"${describe}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
