# Sourced by the scripts that run clang builds (scripts/check-sanitizers.sh, scripts/check-avx512-emulated.sh).
# LLVM's OpenMP runtime (libomp) registers each process in /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid>. A process
# killed while it wrote that file leaves it empty or cut short, and libomp then aborts any later process that
# gets the same pid ("OMP: Error #15: ... found unknown library already initialized", or SIGBUS on an empty
# file). The tests that kill children remove their files (test_forget_killed_process); this removes the broken
# ones (libomp itself removes complete ones of dead processes) of processes no longer running, so that a
# long-lived machine does not fail a test by pid chance. Complete files are left alone: their pid may belong to
# a live process of another pid namespace that shares /dev/shm.
forget_dead_omp_registrations() {
  local file pid content
  for file in /dev/shm/__KMP_REGISTERED_LIB_*_"$(id -u)"; do
    [ -f "$file" ] || continue
    content=$(tr -d '\0' < "$file" 2> /dev/null || true)
    [[ $content =~ ^0x[0-9a-f]+-cafe[0-9a-f]+-.+$ ]] && continue
    pid=${file#/dev/shm/__KMP_REGISTERED_LIB_}
    pid=${pid%_*}
    kill -0 "$pid" 2> /dev/null || rm -f "$file"
  done
}
