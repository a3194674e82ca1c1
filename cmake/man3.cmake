# man3 pages of the C API, generated from hilock.h by scripts/gen-man3.py
# (one page per group of declarations, .so links for the others, hilock(3)
# for the conventions and types) and installed with the header.
option(HILOCK_MAN3 "Generate and install the man3 pages (needs python3)" ON)
if(HILOCK_MAN3)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    set(_man3_dir ${PROJECT_BINARY_DIR}/man/man3)
    set(_man3_stamp ${PROJECT_BINARY_DIR}/man/man3.stamp)
    add_custom_command(OUTPUT ${_man3_stamp}
      COMMAND ${CMAKE_COMMAND} -E rm -rf ${_man3_dir}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-man3.py
              ${PROJECT_SOURCE_DIR}/libcore/include/hilock.h ${_man3_dir} ${PROJECT_VERSION}
      COMMAND ${CMAKE_COMMAND} -E touch ${_man3_stamp}
      DEPENDS ${PROJECT_SOURCE_DIR}/libcore/include/hilock.h ${PROJECT_SOURCE_DIR}/scripts/gen-man3.py
      COMMENT "man3 pages from hilock.h" VERBATIM)
    add_custom_target(hilock_man3 ALL DEPENDS ${_man3_stamp})
    install(DIRECTORY ${_man3_dir}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man3 COMPONENT dev)
  else()
    message(STATUS "hilock: no python3, no man3 pages")
  endif()
endif()
