# Keeps the version in its five places equal (the bump rule is in docs/abi.md, "Which number changes"):
# project(VERSION) and BPT_ABI_VERSION in CMakeLists.txt (the shared library's file names and SONAME), the
# BPT_VERSION_* and BPT_ABI_VERSION macros of include/bptrain/common.h, the top entry of CHANGELOG.md, whose
# heading reads "## <Unreleased or date> (X.Y.Z, ABI N)", and the Python package's python/bptrain/_version.py
# (read by python/pyproject.toml). Run as cmake -DSOURCE_DIR=... -P check_version.cmake.
file(STRINGS ${SOURCE_DIR}/CMakeLists.txt project_line REGEX "^project\\(bptrain VERSION ")
string(REGEX MATCH "VERSION ([0-9]+)\\.([0-9]+)\\.([0-9]+)" _ "${project_line}")
set(cmake_version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
file(STRINGS ${SOURCE_DIR}/CMakeLists.txt abi_line REGEX "^set\\(BPT_ABI_VERSION [0-9]+\\)")
string(REGEX MATCH "[0-9]+" cmake_abi "${abi_line}")

file(READ ${SOURCE_DIR}/include/bptrain/common.h header)
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "#define BPT_VERSION_${part} ([0-9]+)" _ "${header}")
  list(APPEND header_parts ${CMAKE_MATCH_1})
endforeach()
list(JOIN header_parts "." header_version)
string(REGEX MATCH "#define BPT_ABI_VERSION ([0-9]+)" _ "${header}")
set(header_abi "${CMAKE_MATCH_1}")

# The first second-level heading is the newest entry.
file(STRINGS ${SOURCE_DIR}/CHANGELOG.md changelog_headings REGEX "^## ")
list(GET changelog_headings 0 changelog_top)
string(REGEX MATCH "\\(([0-9]+\\.[0-9]+\\.[0-9]+), ABI ([0-9]+)\\)" _ "${changelog_top}")
set(changelog_version "${CMAKE_MATCH_1}")
set(changelog_abi "${CMAKE_MATCH_2}")

if(cmake_version STREQUAL ".." OR cmake_abi STREQUAL "")
  message(FATAL_ERROR "check_version: cannot read project(VERSION) or BPT_ABI_VERSION from CMakeLists.txt")
endif()
if(NOT cmake_version STREQUAL header_version OR NOT cmake_abi STREQUAL header_abi)
  message(FATAL_ERROR "check_version: CMakeLists.txt says ${cmake_version} (ABI ${cmake_abi}), "
                      "include/bptrain/common.h ${header_version} (ABI ${header_abi})")
endif()
if(NOT cmake_version STREQUAL changelog_version OR NOT cmake_abi STREQUAL changelog_abi)
  message(FATAL_ERROR "check_version: CMakeLists.txt says ${cmake_version} (ABI ${cmake_abi}), but the top entry of "
                      "CHANGELOG.md is '${changelog_top}' (expected '## ... (${cmake_version}, ABI ${cmake_abi})')")
endif()
file(STRINGS ${SOURCE_DIR}/python/bptrain/_version.py python_line REGEX "^__version__ = ")
string(REGEX MATCH "\"([0-9.]+)\"" _ "${python_line}")
if(NOT CMAKE_MATCH_1 STREQUAL cmake_version)
  message(FATAL_ERROR "check_version: CMakeLists.txt says ${cmake_version}, python/bptrain/_version.py '${CMAKE_MATCH_1}'")
endif()
message(STATUS "check_version: ${header_version}, ABI ${header_abi} in CMakeLists.txt, include/bptrain/common.h, "
               "CHANGELOG.md and python/bptrain/_version.py")
