# The Python wheel's contents (python/pyproject.toml builds with scikit-build-core, which sets SKBUILD and
# installs only the "python" component): the shared library under its SONAME and every backend module, inside
# the bptrain package folder, where python/bptrain/_native.py looks first and the core finds its modules
# (beside itself, src/modules/loader.c). One file per library: a wheel cannot hold symlinks.
if(SKBUILD)
  install(FILES $<TARGET_FILE:bptrain> DESTINATION bptrain RENAME libbptrain.so.${BPT_ABI_VERSION}
          COMPONENT python)
  foreach(name ${BPT_MODULES})
    install(FILES $<TARGET_FILE:bptrain-${name}> DESTINATION bptrain COMPONENT python)
  endforeach()
endif()
