/* Declarations of the zlib API that libbptrain, its tests and its fuzz targets use, for scripts/gpu-check.sh
 * on machines that have the zlib library (libz.so.1, which Python needs) but not its header package.
 * Everything here mirrors zlib 1.2/1.3's zlib.h: z_stream has the real field order and types, because
 * inflateInit2_ and deflateInit2_ check sizeof(z_stream) against the library's, and the constants are zlib's
 * own values. tests/check_gpu_check_shims.sh compiles every source that includes <zlib.h> against this file
 * and round-trips data through the real libz with it, so a missing declaration fails CI, not the GPU run. */
#ifndef BPT_ZLIB_SHIM_H
#define BPT_ZLIB_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

/* The major version must match the library's ("1"): inflateInit2_ refuses another. */
#define ZLIB_VERSION "1.2.13"
#define MAX_WBITS 15

typedef unsigned char Byte;
typedef Byte Bytef;
typedef unsigned int uInt;
typedef unsigned long uLong;
typedef uLong uLongf;
typedef void *voidpf;
typedef voidpf (*alloc_func)(voidpf opaque, uInt items, uInt size);
typedef void (*free_func)(voidpf opaque, voidpf address);

struct internal_state;
typedef struct z_stream_s {
  Bytef *next_in;
  uInt avail_in;
  uLong total_in;
  Bytef *next_out;
  uInt avail_out;
  uLong total_out;
  char *msg;
  struct internal_state *state;
  alloc_func zalloc;
  free_func zfree;
  voidpf opaque;
  int data_type;
  uLong adler;
  uLong reserved;
} z_stream;
typedef z_stream *z_streamp;

#define Z_NULL 0
#define Z_NO_FLUSH 0
#define Z_PARTIAL_FLUSH 1
#define Z_SYNC_FLUSH 2
#define Z_FULL_FLUSH 3
#define Z_FINISH 4
#define Z_BLOCK 5
#define Z_OK 0
#define Z_STREAM_END 1
#define Z_NEED_DICT 2
#define Z_ERRNO (-1)
#define Z_STREAM_ERROR (-2)
#define Z_DATA_ERROR (-3)
#define Z_MEM_ERROR (-4)
#define Z_BUF_ERROR (-5)
#define Z_VERSION_ERROR (-6)
#define Z_NO_COMPRESSION 0
#define Z_BEST_SPEED 1
#define Z_BEST_COMPRESSION 9
#define Z_DEFAULT_COMPRESSION (-1)
#define Z_DEFAULT_STRATEGY 0
#define Z_DEFLATED 8

const char *zlibVersion(void);
uLong crc32(uLong crc, const Bytef *buffer, uInt length);
uLong adler32(uLong adler, const Bytef *buffer, uInt length);

int inflateInit2_(z_streamp stream, int window_bits, const char *version, int stream_size);
int inflate(z_streamp stream, int flush);
int inflateReset(z_streamp stream);
int inflateEnd(z_streamp stream);
#define inflateInit2(stream, window_bits) inflateInit2_((stream), (window_bits), ZLIB_VERSION, (int)sizeof(z_stream))
#define inflateInit(stream) inflateInit2((stream), MAX_WBITS)

int deflateInit2_(z_streamp stream, int level, int method, int window_bits, int memory_level, int strategy,
                  const char *version, int stream_size);
int deflate(z_streamp stream, int flush);
int deflateEnd(z_streamp stream);
#define deflateInit2(stream, level, method, window_bits, memory_level, strategy)                                      \
  deflateInit2_((stream), (level), (method), (window_bits), (memory_level), (strategy), ZLIB_VERSION,                  \
                (int)sizeof(z_stream))

typedef struct gzFile_s *gzFile;
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buffer, unsigned length);
int gzwrite(gzFile file, const void *buffer, unsigned length);
int gzclose(gzFile file);
const char *gzerror(gzFile file, int *error);

#ifdef __cplusplus
}
#endif

#endif
