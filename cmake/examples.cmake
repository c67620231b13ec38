# Extras for the examples: every C example links the metrics/plot/profile helpers
# (examples/common/example_metrics.c), and each examples/cpp/*.cpp builds as C++11 with -pedantic -Werror to
# show that the public headers are clean C++.
foreach(source ${BPT_EXAMPLES})
  get_filename_component(name ${source} NAME_WE)
  target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/examples/common/example_metrics.c)
endforeach()

include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX)
  file(GLOB BPT_CXX_EXAMPLES CONFIGURE_DEPENDS examples/cpp/*.cpp)
  foreach(source ${BPT_CXX_EXAMPLES})
    get_filename_component(name ${source} NAME_WE)
    set(target ${name}_cpp)
    add_executable(${target} ${source} examples/common/example_metrics.c)
    set_target_properties(${target} PROPERTIES OUTPUT_NAME ${name}_cpp CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                                               CXX_EXTENSIONS OFF)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-pedantic -Werror>)
    target_include_directories(${target} PRIVATE examples/common)
    target_link_libraries(${target} PRIVATE bptrain m)
  endforeach()
else()
  message(STATUS "bptrain: no C++ compiler, skipping examples/cpp")
endif()

# The progress bar's rate from the library's epoch clock (tests/examples/test_example_progress.c, issue 29).
if(BPT_BUILD_TESTS)
  add_executable(test_example_progress tests/examples/test_example_progress.c examples/common/example_util.c)
  target_include_directories(test_example_progress PRIVATE examples/common)
  target_link_libraries(test_example_progress PRIVATE bptrain m)
  add_test(NAME test_example_progress COMMAND test_example_progress)
  set_tests_properties(test_example_progress PROPERTIES LABELS "example")
endif()

# Short training runs of the C++ and Python examples with every observation option (tests/examples/).
if(BPT_BUILD_TESTS AND TARGET mnist_mlp_cpp)
  add_test(NAME example_cpp_mnist_mlp
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_example.sh ${CMAKE_BINARY_DIR}/example-cpp 70
                   $<TARGET_FILE:mnist_mlp_cpp> --epochs 1 --limit 4000 --batch 100 --threads 1)
  set_tests_properties(example_cpp_mnist_mlp PROPERTIES LABELS "package;example" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
include(${CMAKE_CURRENT_SOURCE_DIR}/cmake/python.cmake)
if(BPT_BUILD_TESTS AND BPT_PYTHON_NUMPY AND NOT BPT_SANITIZE)
  add_test(NAME example_python_mnist_mlp
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_example.sh ${CMAKE_BINARY_DIR}/example-python 70
                   ${BPT_PYTHON_NUMPY} ${CMAKE_CURRENT_SOURCE_DIR}/examples/python/mnist_mlp.py --epochs 1
                   --limit 4000 --batch 100 --threads 1)
  set_tests_properties(example_python_mnist_mlp PROPERTIES LABELS "package;example" SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "BPTRAIN_LIBRARY=$<TARGET_FILE:bptrain>;PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
endif()
# The --plot picture (three panels, padded axes, no gnuplot warning) from C and, where the binding loads (not
# in a sanitizer build, whose library a plain interpreter cannot load), from Python, on the same files.
if(BPT_BUILD_TESTS AND (BPT_PYTHON_NUMPY OR Python3_FOUND))
  add_executable(plot_metrics_tool tests/examples/plot_metrics_tool.c examples/common/example_metrics.c)
  target_include_directories(plot_metrics_tool PRIVATE examples/common)
  target_link_libraries(plot_metrics_tool PRIVATE bptrain m)
  if(BPT_PYTHON_NUMPY AND NOT BPT_SANITIZE)
    add_test(NAME check_example_plot COMMAND ${BPT_PYTHON_NUMPY} ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_plot.py
                                             $<TARGET_FILE:plot_metrics_tool>)
    set_tests_properties(check_example_plot PROPERTIES ENVIRONMENT "${BPT_PYTHON_ENVIRONMENT}")
  else()
    add_test(NAME check_example_plot COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_plot.py
                                             $<TARGET_FILE:plot_metrics_tool> --c-only)
  endif()
  set_tests_properties(check_example_plot PROPERTIES LABELS "example" SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()
# The Python examples' command lines: output paths checked before training, one "error:" line, no traceback.
if(BPT_BUILD_TESTS AND BPT_PYTHON_NUMPY AND NOT BPT_SANITIZE)
  add_test(NAME check_python_example_arguments
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_example_arguments.sh
                   ${CMAKE_BINARY_DIR}/python-example-arguments ${CMAKE_BINARY_DIR} ${BPT_PYTHON_NUMPY}
                   ${CMAKE_CURRENT_SOURCE_DIR}/examples/python)
  set_tests_properties(check_python_example_arguments PROPERTIES LABELS "package;example" TIMEOUT 300
    ENVIRONMENT "BPTRAIN_LIBRARY=$<TARGET_FILE:bptrain>;PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
endif()
# The checkpoint as the examples' one model file: --save, --eval, another model's file, an old BPTPARAM file.
if(BPT_BUILD_TESTS AND TARGET mnist_cnn AND TARGET checkpoint_resume AND Python3_FOUND AND NOT BPT_SANITIZE)
  add_test(NAME example_model_file
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_model_file.sh ${CMAKE_BINARY_DIR}/example-model-file
                   $<TARGET_FILE:mnist_cnn> $<TARGET_FILE:checkpoint_resume>)
  set_tests_properties(example_model_file PROPERTIES LABELS "example" SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
# One model file from three languages and ONNX (the README's "One model file" section).
if(BPT_BUILD_TESTS AND TARGET mnist_mlp AND TARGET mnist_mlp_cpp AND BPT_PYTHON_NUMPY AND NOT BPT_SANITIZE)
  add_test(NAME example_model_languages
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/examples/check_model_languages.sh
                   ${CMAKE_BINARY_DIR}/example-model-languages $<TARGET_FILE:mnist_mlp> $<TARGET_FILE:mnist_mlp_cpp>
                   ${BPT_PYTHON_NUMPY})
  set_tests_properties(example_model_languages PROPERTIES LABELS "example" SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "BPTRAIN_LIBRARY=$<TARGET_FILE:bptrain>;PYTHONPATH=${CMAKE_CURRENT_SOURCE_DIR}/python;PYTHONDONTWRITEBYTECODE=1")
endif()
# --plot without gnuplot: training still completes and the message says how to get gnuplot.
if(BPT_BUILD_TESTS AND TARGET mnist_mlp_cpp)
  add_test(NAME example_plot_without_gnuplot
           COMMAND sh -c "test -d /usr/share/datasets/fashion-mnist || { echo 'skipped: no Fashion-MNIST'; exit 0; }
                          BPT_GNUPLOT=/nonexistent/gnuplot \"$0\" --epochs 1 --limit 200 --batch 100 --threads 1 --plot \"$1\" 2>&1"
                   $<TARGET_FILE:mnist_mlp_cpp> ${CMAKE_BINARY_DIR}/example-no-gnuplot.png)
  set_tests_properties(example_plot_without_gnuplot PROPERTIES LABELS "package;example"
    PASS_REGULAR_EXPRESSION "gnuplot not found.*apt-get install gnuplot-nox"
    SKIP_REGULAR_EXPRESSION "skipped: no Fashion-MNIST")
endif()

# The examples' helpers (option parsing, progress bar, --metrics/--plot/--profile) are meant to be copied into
# programs of one's own, so they are installed with the examples that use them.
if(DEFINED CMAKE_INSTALL_DATADIR)
  file(GLOB BPT_EXAMPLE_HELPERS ${CMAKE_CURRENT_SOURCE_DIR}/examples/common/*.[ch])
  install(FILES ${BPT_EXAMPLE_HELPERS} DESTINATION ${CMAKE_INSTALL_DATADIR}/bptrain/examples/common)
  install(FILES ${BPT_EXAMPLES} DESTINATION ${CMAKE_INSTALL_DATADIR}/bptrain/examples)
endif()
