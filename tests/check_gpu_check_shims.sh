#!/usr/bin/env bash
# The stand-ins of scripts/gpu-check/ (zlib.h, cblas.h + cblas_shim.c, cmocka.h + cmocka_shim.c) are what
# the GPU check builds with on an image without those header packages. Nothing else compiles them, so a
# declaration the code starts using is missing there until the GPU run fails at its build step, after the
# lease has started. This check fails here instead:
#   1. every source that includes <zlib.h>, <cblas.h> or <cmocka.h> compiles against the stand-ins alone;
#   2. the two shim libraries compile;
#   3. a program built with the zlib stand-in round-trips data through the real libz (deflate, inflate,
#      crc32, gzopen/gzwrite/gzread), which proves z_stream's layout and the constants match the library.
# Usage: check_gpu_check_shims.sh SOURCE_DIR WORK_DIR. Needs a C compiler (CC, default cc) and libz.
set -uo pipefail
source_dir=${1:?source dir}
work=${2:?work dir}
cc=${CC:-cc}
shims=$source_dir/scripts/gpu-check
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 1. Only the stand-ins: a folder of them comes first on the include path, so they shadow the real headers.
mkdir -p "$work/include"
cp "$shims/zlib.h" "$shims/cblas.h" "$shims/cmocka.h" "$work/include/"
includes=(-I "$work/include" -I "$source_dir/include" -I "$source_dir/src" -I "$source_dir/tests/support"
          -I "$source_dir/examples/common" -I "$source_dir/fuzz")
count=0
while IFS= read -r file; do
  count=$((count + 1))
  "$cc" -std=c11 -D_GNU_SOURCE -fsyntax-only -fopenmp -Wall -Werror=implicit-function-declaration \
    "${includes[@]}" "$file" >"$work/compile.log" 2>&1 ||
    { fail "$file does not compile against the stand-ins:"; head -20 "$work/compile.log"; }
done < <(cd "$source_dir" && grep -rlE '#include <(zlib|cblas|cmocka)\.h>' src tests fuzz examples --include='*.c' |
         sed "s|^|$source_dir/|")
[ "$count" -gt 0 ] || fail "no source includes zlib.h, cblas.h or cmocka.h (is SOURCE_DIR right?)"
echo "$count sources compiled against the stand-ins"

# 2. The stand-in libraries themselves.
"$cc" -std=c11 -O1 -fPIC -shared -fopenmp -I "$shims" "$shims/cblas_shim.c" -o "$work/libopenblas.so" ||
  fail "cblas_shim.c"
"$cc" -std=c11 -O1 -c -I "$shims" "$shims/cmocka_shim.c" -o "$work/cmocka_shim.o" || fail "cmocka_shim.c"

# 3. The zlib stand-in against the real library.
cat >"$work/zlib_round_trip.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <zlib.h>
int main(int argc, char **argv) {
  static unsigned char plain[5000], packed[8000], back[6000];
  for (int i = 0; i < 5000; i++) plain[i] = (unsigned char)((i * 7) % 23);
  /* CRC-32 of "123456789" is 0xCBF43926 (the check value of the standard). */
  if (crc32(0, (const Bytef *)"123456789", 9) != 0xCBF43926UL) { puts("crc32 check value"); return 1; }
  z_stream d;
  memset(&d, 0, sizeof d);
  if (deflateInit2(&d, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) { puts("deflateInit2"); return 1; }
  d.next_in = plain; d.avail_in = sizeof plain; d.next_out = packed; d.avail_out = sizeof packed;
  if (deflate(&d, Z_FINISH) != Z_STREAM_END) { puts("deflate"); return 1; }
  uInt packed_size = (uInt)(sizeof packed - d.avail_out);
  if (d.total_out != packed_size) { puts("z_stream layout: total_out"); return 1; }
  deflateEnd(&d);
  z_stream s;
  memset(&s, 0, sizeof s);
  if (inflateInit2(&s, 16 + MAX_WBITS) != Z_OK) { puts("inflateInit2 (z_stream size or version)"); return 1; }
  s.next_in = packed; s.avail_in = packed_size; s.next_out = back; s.avail_out = sizeof back;
  if (inflate(&s, Z_NO_FLUSH) != Z_STREAM_END || s.total_out != sizeof plain || memcmp(plain, back, sizeof plain)) {
    puts("inflate"); return 1;
  }
  if (inflateReset(&s) != Z_OK) { puts("inflateReset"); return 1; }
  packed[packed_size - 1] ^= 1; /* the ISIZE trailer: inflate must refuse it with a message */
  s.next_in = packed; s.avail_in = packed_size; s.next_out = back; s.avail_out = sizeof back;
  if (inflate(&s, Z_NO_FLUSH) != Z_DATA_ERROR || !s.msg) { puts("inflate accepted a corrupt trailer"); return 1; }
  inflateEnd(&s);
  gzFile file = gzopen(argv[1], "wb");
  if (!file || gzwrite(file, plain, sizeof plain) != (int)sizeof plain || gzclose(file) != Z_OK) { puts("gzwrite"); return 1; }
  file = gzopen(argv[1], "rb");
  if (!file || gzread(file, back, sizeof back) != (int)sizeof plain || memcmp(plain, back, sizeof plain)) { puts("gzread"); return 1; }
  gzclose(file);
  printf("zlib stand-in matches libz %s\n", zlibVersion());
  return 0;
}
EOF
libz=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 / {print $NF; exit}')
[ -n "$libz" ] || libz=-lz
if "$cc" -std=c11 -Wall -Werror -I "$work/include" "$work/zlib_round_trip.c" "$libz" -o "$work/zlib_round_trip" \
    >"$work/round_trip_build.log" 2>&1; then
  "$work/zlib_round_trip" "$work/round_trip.gz" || fail "the zlib stand-in does not match libz"
else
  fail "the zlib round trip does not build:"; head -20 "$work/round_trip_build.log"
fi
[ "$failures" = 0 ] && echo "gpu-check stand-ins: OK"
exit $((failures > 0))
