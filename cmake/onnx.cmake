# ONNX export (src/export/): protobuf-c's runtime and code generator with the official onnx.proto, which
# Debian's libonnx-dev installs as /usr/include/onnx/onnx.proto (or point BPT_ONNX_PROTO at another copy).
# The C code is generated at build time; without any of the three, bpt_graph_export_onnx returns
# BPT_ERR_UNSUPPORTED (src/export/onnx_unavailable.c).
set(BPT_WITH_ONNX AUTO CACHE STRING "Build ONNX export with protobuf-c (ON, OFF, AUTO)")
find_program(BPT_PROTOC_C protoc-c)
find_library(BPT_PROTOBUF_C_LIBRARY protobuf-c)
find_path(BPT_PROTOBUF_C_INCLUDE_DIR protobuf-c/protobuf-c.h)
find_file(BPT_ONNX_PROTO onnx.proto PATHS /usr/include/onnx /usr/local/include/onnx NO_DEFAULT_PATH)
if(BPT_PROTOC_C AND BPT_PROTOBUF_C_LIBRARY AND BPT_PROTOBUF_C_INCLUDE_DIR AND EXISTS "${BPT_ONNX_PROTO}")
  set(bpt_onnx_found TRUE)
else()
  set(bpt_onnx_found FALSE)
  if(NOT BPT_WITH_ONNX STREQUAL "OFF")
    message(STATUS "bptrain: ONNX export needs protoc-c (${BPT_PROTOC_C}), libprotobuf-c (${BPT_PROTOBUF_C_LIBRARY}) "
                   "and onnx.proto (${BPT_ONNX_PROTO}): apt-get install protobuf-c-compiler libprotobuf-c-dev libonnx-dev")
  endif()
endif()
bpt_resolve_option(BPT_WITH_ONNX bpt_onnx_found BPT_HAVE_ONNX)

if(BPT_HAVE_ONNX)
  set(bpt_onnx_out ${CMAKE_CURRENT_BINARY_DIR}/generated/onnx)
  get_filename_component(bpt_onnx_proto_dir ${BPT_ONNX_PROTO} DIRECTORY)
  add_custom_command(OUTPUT ${bpt_onnx_out}/onnx.pb-c.c ${bpt_onnx_out}/onnx.pb-c.h
    COMMAND ${CMAKE_COMMAND} -E make_directory ${bpt_onnx_out}
    COMMAND ${BPT_PROTOC_C} --c_out=${bpt_onnx_out} -I${bpt_onnx_proto_dir} ${BPT_ONNX_PROTO}
    DEPENDS ${BPT_ONNX_PROTO} VERBATIM)
  # Targets in other folders (fuzz/) compile it too: they depend on bpt_kernel_tables, which builds it.
  set(BPT_ONNX_GENERATED ${bpt_onnx_out}/onnx.pb-c.c ${bpt_onnx_out}/onnx.pb-c.h)
  file(GLOB bpt_onnx_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/export/onnx_*.c)
  list(REMOVE_ITEM bpt_onnx_sources ${CMAKE_CURRENT_SOURCE_DIR}/src/export/onnx_unavailable.c)
  list(APPEND BPT_OPTIONAL_SOURCES ${bpt_onnx_sources} ${bpt_onnx_out}/onnx.pb-c.c)
  list(APPEND BPT_PRIVATE_INCLUDES ${bpt_onnx_out} ${BPT_PROTOBUF_C_INCLUDE_DIR})
  list(APPEND BPT_PRIVATE_LIBRARIES ${BPT_PROTOBUF_C_LIBRARY})
  message(STATUS "bptrain: ONNX export from ${BPT_ONNX_PROTO} (${BPT_PROTOBUF_C_LIBRARY})")
else()
  list(APPEND BPT_OPTIONAL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/src/export/onnx_unavailable.c
       ${CMAKE_CURRENT_SOURCE_DIR}/src/export/onnx_options.c)
endif()
