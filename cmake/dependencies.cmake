# Finds the libraries libbptrain links against and fills BPT_PRIVATE_LIBRARIES,
# BPT_PRIVATE_INCLUDES, BPT_PRIVATE_DEFINITIONS and BPT_OPTIONAL_SOURCES.

find_package(OpenMP REQUIRED COMPONENTS C)
find_package(ZLIB REQUIRED)

# Debian ships OpenBLAS built for pthreads and for OpenMP. We want the OpenMP one so that BLAS and
# our element-wise loops share one thread pool instead of two pools spinning against each other.
# libbptrain does not link it: src/backends/cpu/blas_library.c dlopens it at first use (so that it can choose
# OpenBLAS's core before OpenBLAS initialises), from this directory first; only cblas.h is needed to build.
set(BPT_OPENBLAS_HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp)
find_library(BPT_OPENBLAS_LIBRARY NAMES openblas HINTS ${BPT_OPENBLAS_HINTS} NO_DEFAULT_PATH)
if(NOT BPT_OPENBLAS_LIBRARY)
  find_library(BPT_OPENBLAS_LIBRARY NAMES openblas REQUIRED)
endif()
get_filename_component(BPT_OPENBLAS_DIR ${BPT_OPENBLAS_LIBRARY} DIRECTORY)
get_filename_component(BPT_OPENBLAS_VARIANT ${BPT_OPENBLAS_DIR} NAME)
find_path(BPT_CBLAS_INCLUDE_DIR cblas.h
  HINTS /usr/include/x86_64-linux-gnu/${BPT_OPENBLAS_VARIANT} /usr/include/aarch64-linux-gnu/${BPT_OPENBLAS_VARIANT}
  /usr/include/openblas)
if(NOT BPT_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "cblas.h not found: install libopenblas-openmp-dev")
endif()
message(STATUS "bptrain: OpenBLAS ${BPT_OPENBLAS_LIBRARY}")

list(APPEND BPT_PRIVATE_LIBRARIES OpenMP::OpenMP_C ZLIB::ZLIB m)
list(APPEND BPT_PRIVATE_INCLUDES ${BPT_CBLAS_INCLUDE_DIR})
list(APPEND BPT_PRIVATE_DEFINITIONS BPT_OPENBLAS_DIR="${BPT_OPENBLAS_DIR}" BPT_OPENBLAS_FILE="${BPT_OPENBLAS_LIBRARY}")
# The module loader (src/modules/loader.c) and the BLAS loader need dlopen and a mutex: in libc itself from
# glibc 2.34 on.
find_package(Threads REQUIRED)
include(CheckSymbolExists)
check_symbol_exists(dlopen dlfcn.h BPT_DLOPEN_IN_LIBC)
if(NOT BPT_DLOPEN_IN_LIBC)
  list(APPEND BPT_PRIVATE_LIBRARIES ${CMAKE_DL_LIBS})
endif()
list(APPEND BPT_PRIVATE_LIBRARIES Threads::Threads)
# The BLAS loader's last resort is a bare dlopen("libopenblas.so.0"), which follows libbptrain's RUNPATH: the
# OpenMP build's directory, because the plain libopenblas.so.0 link may point at the pthread build.
set(CMAKE_BUILD_RPATH ${BPT_OPENBLAS_DIR})
set(CMAKE_INSTALL_RPATH ${BPT_OPENBLAS_DIR})

# Resolves an ON/OFF/AUTO option: ON fails loudly when the dependency is missing.
function(bpt_resolve_option option found out)
  if(${option} STREQUAL "OFF")
    set(${out} OFF PARENT_SCOPE)
  elseif(${found})
    set(${out} ON PARENT_SCOPE)
  elseif(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option} requested but its dependency was not found")
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

include(cmake/cuda.cmake OPTIONAL)
include(cmake/mpi.cmake OPTIONAL)
include(cmake/onnx.cmake)

foreach(feature CUDA MPI NCCL ONNX)
  if(NOT DEFINED BPT_HAVE_${feature})
    set(BPT_HAVE_${feature} OFF)
  endif()
  message(STATUS "bptrain: ${feature} ${BPT_HAVE_${feature}} (BPT_WITH_${feature}=${BPT_WITH_${feature}})")
endforeach()
