# The loadable modules: the CUDA backend and the MPI and NCCL comm engines each become
# libbptrain-<name>.so.<ABI> in the library's directory, dlopened by the core on first use
# (src/modules/loader.c), so the core links none of CUDA, cuDNN, NCCL or MPI. A module compiles its own
# sources plus src/modules/module_services.c (the core helpers it calls, reached through the table the core
# hands it), links nothing of the core and exports only bpt_module_entry; shared code without state (the CUDA
# module's src/backends/backend_fail.c) is compiled in. BPT_MODULES lists those built.
set(BPT_MODULES)

function(bpt_add_module name)
  cmake_parse_arguments(PARSE_ARGV 1 module "" "" "SOURCES;LIBRARIES;INCLUDES;DEFINITIONS")
  set(target bptrain-${name})
  add_library(${target} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/src/modules/${name}_module.c
                               ${CMAKE_CURRENT_SOURCE_DIR}/src/modules/module_services.c ${module_SOURCES})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src
                                               ${module_INCLUDES})
  target_compile_definitions(${target} PRIVATE ${module_DEFINITIONS})
  target_link_libraries(${target} PRIVATE ${module_LIBRARIES})
  # The ABI suffix in the file name: a libbptrain.so.1 never picks up a module built for .so.0. Found in its
  # dependencies' directories after installation too (the toolkit is often outside the loader's path).
  set_target_properties(${target} PROPERTIES OUTPUT_NAME bptrain-${name} SUFFIX ".so.${BPT_ABI_VERSION}"
                        C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden INSTALL_RPATH_USE_LINK_PATH ON
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  # Self-contained: an undefined symbol fails the link here rather than the dlopen on a user's machine.
  # (Sanitizer runtimes come from the program, so that build leaves the check out.)
  if(NOT BPT_SANITIZE)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  list(APPEND BPT_MODULES ${name})
  set(BPT_MODULES ${BPT_MODULES} PARENT_SCOPE)
endfunction()

if(BPT_HAVE_CUDA)
  bpt_add_module(cuda SOURCES ${BPT_CUDA_SOURCES} ${bpt_cuda_table} ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/backend_fail.c
                 LIBRARIES ${BPT_CUDA_MODULE_LIBRARIES}
                 INCLUDES ${BPT_CUDA_MODULE_INCLUDES})
endif()
if(BPT_HAVE_MPI)
  bpt_add_module(mpi SOURCES ${BPT_MPI_MODULE_SOURCES} LIBRARIES ${BPT_MPI_MODULE_LIBRARIES})
endif()
if(BPT_HAVE_NCCL)
  bpt_add_module(nccl SOURCES ${BPT_NCCL_MODULE_SOURCES} LIBRARIES ${BPT_NCCL_MODULE_LIBRARIES}
                 INCLUDES ${BPT_NCCL_MODULE_INCLUDES} DEFINITIONS BPT_MODULE_DEFINES_NCCL_UNIQUE_ID)
endif()
# Targets that run programs from the build tree depend on this, so the modules are there when they run.
add_custom_target(bptrain_modules)
foreach(name ${BPT_MODULES})
  add_dependencies(bptrain_modules bptrain-${name})
endforeach()
message(STATUS "bptrain: modules ${BPT_MODULES}")
