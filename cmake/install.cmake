# Installation: headers, the shared and static libraries, the loadable modules, a CMake package (find_package(bptrain) giving
# bptrain::bptrain and bptrain::bptrain_static, with a version file) and a pkg-config file.
# The always-present dependencies (OpenMP, zlib) appear only as private link requirements: the shared
# library carries them itself, the static one lists them for the linker. OpenBLAS is dlopened by both at
# first use (src/backends/cpu/blas_library.c), as are the optional modules (CUDA, NCCL, MPI).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BPT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/bptrain)

# Turns link items (imported targets, paths, bare names, flags) into plain linker arguments, because neither
# pkg-config nor a consumer's CMake knows our imported targets (OpenMP::OpenMP_C, CUDA::cublas, MPI::MPI_C...).
function(bpt_flatten_link_items out)
  set(result)
  foreach(item ${ARGN})
    if(item MATCHES "^\\$<" OR item STREQUAL "")
      continue() # generator expressions only matter inside our own build
    elseif(TARGET ${item})
      get_target_property(aliased ${item} ALIASED_TARGET)
      if(aliased)
        set(item ${aliased})
      endif()
      get_target_property(type ${item} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_NOCONFIG
                         IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
          get_target_property(location ${item} ${property})
          if(location)
            list(APPEND result ${location})
            break()
          endif()
        endforeach()
      endif()
      get_target_property(interface ${item} INTERFACE_LINK_LIBRARIES)
      if(interface)
        bpt_flatten_link_items(nested ${interface})
        list(APPEND result ${nested})
      endif()
    else()
      list(APPEND result ${item})
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Writes linker arguments in pkg-config style: -L<dir> -l<name>, without -L for the compiler's own directories.
function(bpt_pkg_config_libs out)
  set(words)
  foreach(item ${ARGN})
    if(item MATCHES "^-")
      list(APPEND words ${item})
    elseif(IS_ABSOLUTE ${item})
      get_filename_component(directory ${item} DIRECTORY)
      get_filename_component(file ${item} NAME)
      if(file MATCHES "^lib(.+)\\.(so|a)(\\.[0-9.]+)?$")
        list(FIND CMAKE_C_IMPLICIT_LINK_DIRECTORIES ${directory} implicit)
        if(implicit EQUAL -1)
          list(APPEND words -L${directory})
        endif()
        list(APPEND words -l${CMAKE_MATCH_1})
      else()
        list(APPEND words ${item})
      endif()
    else()
      list(APPEND words -l${item})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES words)
  list(JOIN words " " joined)
  set(${out} "${joined}" PARENT_SCOPE)
endfunction()

bpt_flatten_link_items(BPT_STATIC_LINK_ITEMS ${BPT_PRIVATE_LIBRARIES})
list(REMOVE_DUPLICATES BPT_STATIC_LINK_ITEMS)
bpt_pkg_config_libs(BPT_PKG_CONFIG_LIBS_PRIVATE ${BPT_STATIC_LINK_ITEMS})
set(BPT_STATIC_LINK_OPTIONS "")
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(TARGETS bptrain EXPORT bptrain-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS bptrain_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The modules sit next to the shared library, where the core looks for them (src/modules/loader.c). They stay
# out of the export set: imported targets would make find_package fail once a module is deleted, which is a
# supported way to drop a feature; bptrainConfig.cmake lists the ones present instead.
foreach(name ${BPT_MODULES})
  install(TARGETS bptrain-${name} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endforeach()
list(JOIN BPT_MODULES " " BPT_PKG_CONFIG_MODULES)
install(EXPORT bptrain-targets NAMESPACE bptrain:: DESTINATION ${BPT_CMAKE_INSTALL_DIR})

configure_package_config_file(cmake/bptrainConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/bptrainConfig.cmake
                              INSTALL_DESTINATION ${BPT_CMAKE_INSTALL_DIR} PATH_VARS CMAKE_INSTALL_INCLUDEDIR
                              CMAKE_INSTALL_LIBDIR)
# Before 1.0 every minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/bptrainConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/bptrainConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/bptrainConfigVersion.cmake
        DESTINATION ${BPT_CMAKE_INSTALL_DIR})

# The .pc file finds its prefix from its own location, so `cmake --install --prefix DIR` and DESTDIR work.
file(RELATIVE_PATH BPT_PKG_CONFIG_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" BPT_PKG_CONFIG_TO_PREFIX "${BPT_PKG_CONFIG_TO_PREFIX}")
configure_file(cmake/bptrain.pc.in ${CMAKE_CURRENT_BINARY_DIR}/bptrain.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/bptrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The documentation keeps the source tree's layout (README.md beside docs/), so that every path the text names
# (`docs/guide.md`) and every relative link resolves in the installed copy too (tests/check_installed_docs.py).
install(FILES README.md LICENSE CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB BPT_DOC_PAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${BPT_DOC_PAGES} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY python/bptrain DESTINATION ${CMAKE_INSTALL_DATADIR}/bptrain/python OPTIONAL
        PATTERN __pycache__ EXCLUDE)
