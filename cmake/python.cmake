# BPT_PYTHON: the Python 3 interpreter that runs the Python binding's tests and example, one that has NumPy.
# The first of -DBPT_PYTHON=..., the Python3 package's interpreter and /usr/bin/python3 (Debian's, with
# python3-numpy) that imports numpy; empty when none does (the tests then skip and say why).
find_package(Python3 COMPONENTS Interpreter QUIET)
set(BPT_PYTHON "" CACHE FILEPATH "Python 3 interpreter with NumPy for the binding's tests (empty: search)")
if(NOT BPT_PYTHON)
  set(bpt_python_found "")
  foreach(candidate ${Python3_EXECUTABLE} /usr/bin/python3)
    if(EXISTS "${candidate}")
      execute_process(COMMAND ${candidate} -c "import numpy" RESULT_VARIABLE bpt_numpy_missing OUTPUT_QUIET
                      ERROR_QUIET)
      if(bpt_numpy_missing EQUAL 0)
        set(bpt_python_found ${candidate})
        break()
      endif()
    endif()
  endforeach()
  set(BPT_PYTHON_NUMPY "${bpt_python_found}")
else()
  set(BPT_PYTHON_NUMPY "${BPT_PYTHON}")
endif()
get_property(bpt_python_reported GLOBAL PROPERTY BPT_PYTHON_REPORTED)  # included twice: say it once
if(NOT bpt_python_reported AND BPT_PYTHON_NUMPY)
  message(STATUS "bptrain: Python binding tests run with ${BPT_PYTHON_NUMPY}")
elseif(NOT bpt_python_reported)
  message(STATUS "bptrain: no Python 3 with NumPy found (apt-get install python3-numpy): Python tests will skip")
endif()
set_property(GLOBAL PROPERTY BPT_PYTHON_REPORTED 1)
set(BPT_PYTHON_ENVIRONMENT "BPTRAIN_LIBRARY=$<TARGET_FILE:bptrain>;PYTHONPATH=${CMAKE_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")

# bpt_add_python_test(NAME script [ENVIRONMENT ...]): runs tests/python/<script> with BPT_PYTHON, or reports
# the skip (exit 77) when there is no interpreter with NumPy.
function(bpt_add_python_test name script)
  if(BPT_PYTHON_NUMPY)
    add_test(NAME ${name} COMMAND ${BPT_PYTHON_NUMPY} ${CMAKE_SOURCE_DIR}/tests/python/${script})
  else()
    add_test(NAME ${name} COMMAND sh -c "echo 'SKIP: no Python 3 with NumPy (apt-get install python3-numpy)'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${BPT_PYTHON_ENVIRONMENT};${ARGN}" SKIP_RETURN_CODE 77)
endfunction()
