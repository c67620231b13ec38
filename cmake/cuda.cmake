# The CUDA backend: nvcc, cuBLAS (+Lt) and cuDNN 9. BPT_WITH_CUDA=AUTO turns it on when all are found.
# nvcc is looked for on PATH, through CMAKE_CUDA_COMPILER / CUDAToolkit_ROOT, and at /usr/local/cuda;
# cuDNN next to the toolkit or under CUDNN_ROOT (a folder with include/cudnn.h and lib/libcudnn.so).
set(BPT_CUDA_FOUND FALSE)
if(NOT BPT_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(CMAKE_CUDA_COMPILER AND NOT CUDAToolkit_ROOT)
    get_filename_component(CUDAToolkit_ROOT "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(CUDAToolkit_ROOT "${CUDAToolkit_ROOT}" DIRECTORY)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    find_path(BPT_CUDNN_INCLUDE_DIR cudnn.h
      HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(BPT_CUDNN_LIBRARY cudnn
      HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
    endif()
    if(BPT_CUDNN_INCLUDE_DIR AND BPT_CUDNN_LIBRARY AND EXISTS "${CMAKE_CUDA_COMPILER}")
      set(BPT_CUDA_FOUND TRUE)
    endif()
  endif()
endif()
if(NOT BPT_WITH_CUDA STREQUAL "OFF" AND NOT BPT_CUDA_FOUND)
  set(bpt_cublas_found NO)
  if(TARGET CUDA::cublasLt)
    set(bpt_cublas_found YES)
  endif()
  message(STATUS "bptrain: CUDA backend needs nvcc, cuBLAS and cuDNN: nvcc ${CMAKE_CUDA_COMPILER}, toolkit ${CUDAToolkit_FOUND} "
                 "(${CUDAToolkit_ROOT}), cuBLAS ${bpt_cublas_found}, cudnn.h ${BPT_CUDNN_INCLUDE_DIR}, "
                 "libcudnn ${BPT_CUDNN_LIBRARY}")
endif()
bpt_resolve_option(${BPT_WITH_CUDA} BPT_CUDA_FOUND BPT_HAVE_CUDA)

if(BPT_HAVE_CUDA)
  # A100 (sm_80) and H100/H200 (sm_90) machine code, plus compute_90 PTX for newer chips.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(Threads REQUIRED)
  # nvcc does not take gcc's warning flags itself: hand the project's options to the host compiler for
  # .cu files and keep them as they are for C. Device code warnings are errors too.
  get_directory_property(bpt_options COMPILE_OPTIONS)
  set(bpt_wrapped_options)
  foreach(bpt_option IN LISTS bpt_options)
    # nvcc splits -Xcompiler values at commas: -fsanitize=a,b becomes -fsanitize=a -fsanitize=b.
    set(bpt_host_options "${bpt_option}")
    if(bpt_option MATCHES "^(-f[a-z-]*sanitize[a-z-]*=)(.*,.*)$")
      string(REPLACE "," ";${CMAKE_MATCH_1}" bpt_host_options "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
    endif()
    foreach(bpt_host_option IN LISTS bpt_host_options)
      list(APPEND bpt_wrapped_options "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${bpt_host_option}>")
    endforeach()
    list(APPEND bpt_wrapped_options "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${bpt_option}>")
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${bpt_wrapped_options}")
  # No C++ runtime in the objects (exceptions, guarded statics), so C programs link the static library with
  # a C linker and no libstdc++.
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings;-Xcompiler=-fno-exceptions;-Xcompiler=-fno-threadsafe-statics>")

  # The backend is its own module, libbptrain-cuda.so (cmake/modules.cmake), so only it links the CUDA
  # runtime and cuDNN; cuBLAS is loaded at run time (src/backends/cuda/cublas_library.c), so CPU-only
  # programs skip its start-up.
  file(GLOB BPT_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.c
       ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/*.cu)
  set(BPT_CUDA_MODULE_LIBRARIES CUDA::cudart ${BPT_CUDNN_LIBRARY} ${CMAKE_DL_LIBS} Threads::Threads)
  set(BPT_CUDA_MODULE_INCLUDES ${BPT_CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  # Where cuBLAS was found, for machines whose loader path does not list the toolkit.
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/src/backends/cuda/cublas_library.c PROPERTIES
                              COMPILE_DEFINITIONS "BPT_CUDA_LIBRARY_DIR=\"${CUDAToolkit_LIBRARY_DIR}\"")
  message(STATUS "bptrain: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, cuDNN ${BPT_CUDNN_LIBRARY}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()
