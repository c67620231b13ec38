/**
 * @file common.h
 * @brief Export macro, version queries, status codes and data types shared by every public header.
 */
#ifndef BPTRAIN_COMMON_H
#define BPTRAIN_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define BPT_EXTERN_C_BEGIN extern "C" {
#define BPT_EXTERN_C_END }
#else
/** Opens C linkage (extern "C" {) around a header's declarations when it is compiled as C++. */
#define BPT_EXTERN_C_BEGIN
/** Closes ::BPT_EXTERN_C_BEGIN. */
#define BPT_EXTERN_C_END
#endif

/** Marks a function as part of the public ABI: exported from the shared library, which hides all else. */
#if defined(BPT_BUILDING_LIBRARY)
#define BPT_API __attribute__((visibility("default")))
#else
#define BPT_API
#endif

/** Major version of these headers; bpt_version() gives the library's. */
#define BPT_VERSION_MAJOR 0
/** Minor version of these headers. */
#define BPT_VERSION_MINOR 1
/** Patch version of these headers. */
#define BPT_VERSION_PATCH 0
/** These headers' version as one number, major * 10000 + minor * 100 + patch (0.1.0 is 100), for `#if`;
 * bpt_version_number() gives the library's. tests/check_version.cmake keeps the parts equal to CMake's
 * project(VERSION). */
#define BPT_VERSION_NUMBER (BPT_VERSION_MAJOR * 10000 + BPT_VERSION_MINOR * 100 + BPT_VERSION_PATCH)
/** Non-zero when these headers are version x.y.z or later: `#if BPT_VERSION_AT_LEAST(0, 2, 0)`. */
#define BPT_VERSION_AT_LEAST(x, y, z) (BPT_VERSION_NUMBER >= (x) * 10000 + (y) * 100 + (z))
/** Bumped with every incompatible ABI change; it is the SONAME suffix (libbptrain.so.0). */
#define BPT_ABI_VERSION 0
/** Largest tensor rank the library handles. */
#define BPT_MAX_RANK 6

BPT_EXTERN_C_BEGIN

/** Result of every call that can fail. Values are fixed: bindings may hard-code them. */
typedef enum bpt_status {
  BPT_OK = 0,                    /**< success */
  BPT_ERR_INVALID_ARGUMENT = 1, /**< a NULL handle, an out-of-range option, a bad name */
  BPT_ERR_OUT_OF_MEMORY = 2,    /**< host or device allocation failed */
  BPT_ERR_IO = 3,               /**< a file could not be opened, read or written */
  BPT_ERR_FORMAT = 4,           /**< a file was read but its contents are malformed */
  BPT_ERR_SHAPE = 5,            /**< tensor shapes do not fit together */
  BPT_ERR_DTYPE = 6,            /**< a data type is not accepted here */
  BPT_ERR_UNSUPPORTED = 7,      /**< the backend cannot run this op or option */
  BPT_ERR_DEVICE = 8,           /**< the device is missing or reported a failure */
  BPT_ERR_NUMERIC = 9,          /**< a value went infinite or NaN */
  BPT_ERR_STATE = 10,           /**< a call out of order, such as backward before forward */
  BPT_ERR_COMM = 11,            /**< a collective operation failed or timed out */
  BPT_ERR_INTERNAL = 12         /**< a bug in libbptrain; please report it */
} bpt_status;

/** Element types. The numeric values are stored in checkpoints and never change. */
typedef enum bpt_dtype {
  BPT_DTYPE_F32 = 0,      /**< IEEE 754 binary32 */
  BPT_DTYPE_F16 = 1,      /**< IEEE 754 binary16 */
  BPT_DTYPE_BF16 = 2,     /**< bfloat16: the upper half of an f32 */
  BPT_DTYPE_FP8_E4M3 = 3, /**< 8-bit float, 4 exponent and 3 mantissa bits */
  BPT_DTYPE_FP8_E5M2 = 4, /**< 8-bit float, 5 exponent and 2 mantissa bits */
  BPT_DTYPE_I32 = 5,      /**< 32-bit signed integer (class labels) */
  BPT_DTYPE_U8 = 6        /**< 8-bit unsigned integer (raw image bytes) */
} bpt_dtype;

/** @return the library version as "major.minor.patch". */
BPT_API const char *bpt_version(void);
/** @return the library version as major * 10000 + minor * 100 + patch. */
BPT_API uint32_t bpt_version_number(void);
/** @return the ABI major version the library was built with (compare with ::BPT_ABI_VERSION). */
BPT_API int bpt_abi_version(void);
/** @return a short constant description of @p status ("invalid argument", ...). */
BPT_API const char *bpt_status_string(bpt_status status);
/** @return the size in bytes of one element of @p dtype, or 0 for an unknown value. */
BPT_API size_t bpt_dtype_size(bpt_dtype dtype);
/** @return the name of @p dtype ("f32", "bf16", ...), or "unknown". */
BPT_API const char *bpt_dtype_name(bpt_dtype dtype);

BPT_EXTERN_C_END

#endif
