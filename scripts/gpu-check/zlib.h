/* Declarations of the few zlib functions libbptrain calls, for scripts/gpu-check.sh on machines that have
 * the zlib library (libz.so.1, which Python needs) but not its header package. */
#ifndef BPT_ZLIB_SHIM_H
#define BPT_ZLIB_SHIM_H

#define ZLIB_VERSION "1.2.0"
typedef struct gzFile_s *gzFile;
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buffer, unsigned length);
int gzwrite(gzFile file, const void *buffer, unsigned length);
int gzclose(gzFile file);
const char *gzerror(gzFile file, int *error);

#endif
