# The comm layer (src/comm/): the communicator API and data-parallel training are always built into the core,
# so the exported symbols do not depend on the build; the engines behind them are optional modules
# (libbptrain-mpi.so, libbptrain-nccl.so: cmake/modules.cmake) that the core loads on first use. BPT_WITH_MPI
# and BPT_WITH_NCCL (ON, OFF, AUTO) pick the MPI engine (Open MPI or any MPI-3 library) and the NCCL engine
# (NCCL 2 with the CUDA runtime, plain C: no CUDA language needed). No public header but the optional
# include/bptrain/comm_mpi.h includes mpi.h.
list(APPEND BPT_OPTIONAL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/comm.c
     ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/compress.c ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/range_reduce.c)

set(BPT_MPI_FOUND FALSE)
if(NOT BPT_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    set(BPT_MPI_FOUND TRUE)
  endif()
endif()
bpt_resolve_option(${BPT_WITH_MPI} BPT_MPI_FOUND BPT_HAVE_MPI)
if(BPT_HAVE_MPI)
  find_package(Threads REQUIRED)
  set(BPT_MPI_MODULE_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/mpi.c)
  set(BPT_MPI_MODULE_LIBRARIES MPI::MPI_C Threads::Threads)
  message(STATUS "bptrain: MPI ${MPI_C_VERSION} (${MPI_C_LIBRARIES}), launcher ${MPIEXEC_EXECUTABLE}")
endif()

# NCCL lives next to the CUDA toolkit (/usr/local/cuda) or under NCCL_ROOT.
set(BPT_NCCL_FOUND FALSE)
if(NOT BPT_WITH_NCCL STREQUAL "OFF")
  if(NOT TARGET CUDA::cudart)
    if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
  endif()
  find_path(BPT_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(BPT_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(TARGET CUDA::cudart AND BPT_NCCL_INCLUDE_DIR AND BPT_NCCL_LIBRARY)
    set(BPT_NCCL_FOUND TRUE)
  endif()
endif()
bpt_resolve_option(${BPT_WITH_NCCL} BPT_NCCL_FOUND BPT_HAVE_NCCL)
if(BPT_HAVE_NCCL)
  set(BPT_NCCL_MODULE_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/nccl.c)
  set(BPT_NCCL_MODULE_LIBRARIES ${BPT_NCCL_LIBRARY} CUDA::cudart)
  set(BPT_NCCL_MODULE_INCLUDES ${BPT_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  message(STATUS "bptrain: NCCL ${BPT_NCCL_LIBRARY}")
endif()
