# Checks on the library as users see it: the ABI against its baseline, a downstream consumer of the
# installed package, the Python binding and the API reference (exported symbols: tests/CMakeLists.txt). Included from
# tests/CMakeLists.txt; each check is a CTest test labelled "package" (ctest -L package runs them alone).
set(BPT_CHECKS_ENVIRONMENT "BPT_SOURCE_DIR=${CMAKE_SOURCE_DIR};BPT_BINARY_DIR=${CMAKE_BINARY_DIR}")

# The ABI check builds its own debug-info copy of the library (scripts/abi-dump.sh), so it holds for any
# build type and set of optional dependencies.
find_program(BPT_ABIDIFF abidiff)
if(BPT_ABIDIFF)
  add_test(NAME check_abi COMMAND ${CMAKE_SOURCE_DIR}/scripts/check-abi.sh ${CMAKE_BINARY_DIR}/abi-reference
                                  ${CMAKE_BINARY_DIR})
else()
  add_test(NAME check_abi COMMAND sh -c "echo 'abidiff not found: install abigail-tools'; exit 77")
endif()

# Sanitizer builds need the sanitizer runtime first in every consumer, which a plain consumer does not have.
if(NOT BPT_SANITIZE)
  add_test(NAME check_downstream
           COMMAND ${CMAKE_SOURCE_DIR}/tests/downstream/check_downstream.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_BINARY_DIR}/downstream)
  set_tests_properties(check_downstream PROPERTIES ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
  # The core without its modules: NEEDED entries, an install with the modules deleted, the Python import.
  add_test(NAME check_modules COMMAND ${CMAKE_SOURCE_DIR}/tests/check_modules.sh ${CMAKE_BINARY_DIR}
                                      ${CMAKE_BINARY_DIR}/check-modules)
endif()

# The Python binding (tests/python/): its API against known values, LeNet from Python with the C example's
# checkpoints, and its object lifetimes. In the sanitizer build only the lifetimes run: the interpreter is
# not instrumented, so the ASan runtime is preloaded ahead of it; the interpreter's own allocations would read
# as leaks, so leak checking is off there (use-after-free and overflows still abort the test).
include(${CMAKE_SOURCE_DIR}/cmake/python.cmake)
if(NOT BPT_SANITIZE)
  bpt_add_python_test(check_python test_bptrain.py)
  bpt_add_python_test(check_python_api test_api.py)
  bpt_add_python_test(check_python_misuse test_misuse.py "OMP_WAIT_POLICY=passive")
  bpt_add_python_test(check_python_fit test_fit.py "OMP_WAIT_POLICY=passive")
  # docs/python.md's Install and Quick start as written, in a fresh venv (issue 29): fetches scikit-build-core
  # and NumPy from PyPI and builds the library once more; `ctest -LE network` leaves it out offline, and it
  # skips (77) by itself when PyPI is unreachable.
  add_test(NAME check_pip_install COMMAND bash ${CMAKE_SOURCE_DIR}/tests/python/check_pip_install.sh
                                          ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/pip-install)
  set_tests_properties(check_pip_install PROPERTIES TIMEOUT 1800 SKIP_RETURN_CODE 77 LABELS "network;python")
  if(TARGET mnist_cnn)
    bpt_add_python_test(check_python_lenet test_lenet.py "BPT_MNIST_CNN=$<TARGET_FILE:mnist_cnn>"
                        "OMP_WAIT_POLICY=passive")
    # docs/python.md's LeNet snippet, as written on a data slice, and mnist_cnn read each other's checkpoints.
    bpt_add_python_test(check_python_docs_lenet test_docs_lenet.py "BPT_MNIST_CNN=$<TARGET_FILE:mnist_cnn>"
                        "OMP_WAIT_POLICY=passive")
    set_tests_properties(check_python_docs_lenet PROPERTIES TIMEOUT 600)
  endif()
endif()
set(BPT_LIFETIME_ENVIRONMENT "")
if(BPT_SANITIZE)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(bpt_asan_name libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so)
  else()
    set(bpt_asan_name libasan.so)
  endif()
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=${bpt_asan_name} OUTPUT_VARIABLE bpt_asan_runtime
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT EXISTS "${bpt_asan_runtime}")
    message(FATAL_ERROR "BPT_SANITIZE: cannot find the ASan runtime ${bpt_asan_name} to preload into Python")
  endif()
  list(APPEND BPT_LIFETIME_ENVIRONMENT "LD_PRELOAD=${bpt_asan_runtime}"
       "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:allocator_may_return_null=1"
       "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
endif()
bpt_add_python_test(check_python_lifetimes test_lifetimes.py ${BPT_LIFETIME_ENVIRONMENT})
set_tests_properties(check_python_lifetimes PROPERTIES FAIL_REGULAR_EXPRESSION "AddressSanitizer|runtime error")

find_program(BPT_DOXYGEN doxygen)
if(BPT_DOXYGEN)
  # The Doxyfile's own output folder is for manual runs; the test writes into the build tree instead.
  add_test(NAME check_doxygen
           COMMAND sh -c "(cat docs/Doxyfile && echo 'OUTPUT_DIRECTORY = ${CMAKE_BINARY_DIR}/api') | '${BPT_DOXYGEN}' -"
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
else()
  add_test(NAME check_doxygen COMMAND sh -c "echo 'doxygen not found: install doxygen'; exit 77")
endif()

# The installed documentation is self-contained and docs/api.md lists every public header (issue 17).
if(Python3_FOUND)
  add_test(NAME check_installed_docs
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/check_installed_docs.py ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/installed-docs)
else()
  add_test(NAME check_installed_docs COMMAND sh -c "echo 'python3 not found: install python3'; exit 77")
endif()

# The cluster scaling and local SGD models' arithmetic against hand-worked cases (bench/cluster_model.py,
# bench/local_sgd_model.py; issue 31).
if(Python3_FOUND)
  add_test(NAME check_cluster_model
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/cluster_model.py --self-test)
  add_test(NAME check_local_sgd_model
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/local_sgd_model.py --self-test)
endif()

get_property(BPT_CHECK_TESTS DIRECTORY PROPERTY TESTS)
foreach(test check_abi check_downstream check_modules check_python check_python_api check_python_misuse
             check_python_lenet check_python_lifetimes check_doxygen check_installed_docs)
  if(test IN_LIST BPT_CHECK_TESTS)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${BPT_CHECKS_ENVIRONMENT})
    set_tests_properties(${test} PROPERTIES LABELS package TIMEOUT 600 SKIP_RETURN_CODE 77)
  endif()
endforeach()
# These install the build tree (cmake --install writes install_manifest.txt into it): one at a time.
foreach(test check_downstream check_modules check_installed_docs)
  if(test IN_LIST BPT_CHECK_TESTS)
    set_tests_properties(${test} PROPERTIES RESOURCE_LOCK build_tree_install)
  endif()
endforeach()
