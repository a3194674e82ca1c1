# Check that the first ```c block of README.md is examples/basic.c, verbatim,
# so the example the README shows is the one the test suite builds and runs.
# Usage: cmake -DREADME=README.md -DEXAMPLE=examples/basic.c -P readme_example.cmake
file(READ "${README}" readme)
file(READ "${EXAMPLE}" example)
string(FIND "${readme}" "```c\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no ```c block")
endif()
math(EXPR start "${start} + 5")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" stop)
string(SUBSTRING "${rest}" 0 ${stop} block)
if(NOT block STREQUAL example)
  message(FATAL_ERROR "the README's C example differs from ${EXAMPLE}; paste the file into README.md")
endif()
message(STATUS "README C example = ${EXAMPLE}")
