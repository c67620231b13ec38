# Sourced by the scripts that run clang builds (scripts/check-sanitizers.sh, scripts/check-avx512-emulated.sh).
# LLVM's OpenMP runtime (libomp) registers each process in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>. A process
# killed while it wrote that file leaves it empty or cut short, and libomp then aborts any later process that
# gets the same pid ("OMP: Error #15: ... found unknown library already initialized", or SIGBUS on an empty
# file). The tests that kill children remove their files (test_forget_killed_process); this removes those of
# processes no longer running, as libomp itself does for the complete ones it finds, so that a long-lived
# machine does not fail a test by pid chance.
forget_dead_omp_registrations() {
  local file pid
  for file in /dev/shm/__KMP_REGISTERED_LIB_*_"$(id -u)"; do
    [ -f "$file" ] || continue
    pid=${file#/dev/shm/__KMP_REGISTERED_LIB_}
    pid=${pid%_*}
    kill -0 "$pid" 2> /dev/null || rm -f "$file"
  done
}
