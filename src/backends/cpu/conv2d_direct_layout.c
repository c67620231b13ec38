/* The input planes every direct and Winograd kernel reads (see conv2d_direct.h): copied once per sample into
 * zero-bordered planes (stride 1) or their four stride-2 phase planes, so that each tap's inputs for
 * consecutive output positions are consecutive floats. */
#include <string.h>

#include "backends/cpu/conv2d_direct.h"

#if DIRECT_KERNELS

direct_geometry bpt_cpu_direct_geometry(const bpt_conv2d_args *a) {
  direct_geometry g = {.in_height = a->in_height,
                       .in_width = a->in_width,
                       .out_height = a->out_height,
                       .out_width = a->out_width,
                       .stride = a->stride_height};
  if (g.stride == 1) {
    g.row = a->in_width + 1;
    g.plane = ((a->in_height + 2) * g.row + 2 + 15) / 16 * 16;
    g.channel_floats = g.plane;
  } else {
    g.row = a->out_width + 1;
    g.plane = ((a->out_height + 1) * g.row + 1 + 15) / 16 * 16;
    g.channel_floats = 4 * g.plane;
  }
  g.positions = g.out_height * g.row;
  g.taps = DIRECT_TAPS;
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 3; j++)
      g.offsets[i * 3 + j] = g.stride == 1 ? i * g.row + j : ((i % 2) * 2 + j % 2) * g.plane + (i / 2) * g.row + j / 2;
  return g;
}

int bpt_cpu_direct_threads(bpt_backend *backend, int64_t units) {
  int threads = backend->num_threads > 0 ? backend->num_threads : 1;
  return units < threads ? (int)units : threads;
}

static void prefetch_part(const float *x, int64_t count, int64_t part, int64_t parts) {
  if (!x) return;
  const int64_t begin = count * part / parts / 16 * 16,
                end = part + 1 == parts ? count : count * (part + 1) / parts / 16 * 16;
  for (int64_t k = begin; k < end; k += 16)
    __builtin_prefetch(x + k, 0, 2);
}

void bpt_cpu_direct_prefetch(const direct_prefetch *next, int64_t part, int64_t parts) {
  prefetch_part(next->input, next->input_floats, part, parts);
  prefetch_part(next->output, next->output_floats, part, parts);
}

DIRECT_TARGET static void zero_floats(float *out, int64_t count) {
  for (int64_t k = 0; k < count; k += 16)
    _mm512_mask_storeu_ps(out + k, direct_lanes(count - k < 16 ? count - k : 16), _mm512_setzero_ps());
}

/* One channel's four stride-2 phase planes (g's layout), pixel by pixel. */
static void split_phases(const direct_geometry *g, const float *source, float *plane) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  for (int64_t phase = 0; phase < 4; phase++, plane += g->plane) {
    const int64_t r = phase / 2, q = phase % 2;
    /* Columns b whose pixel 2 b + q - 1 lies inside the image: [low, high). */
    const int64_t low = q == 0 ? 1 : 0, high = (W - q) / 2 + 1 < R ? (W - q) / 2 + 1 : R;
    for (int64_t row = 0; row <= g->out_height; row++) {
      float *out = plane + row * R;
      const int64_t h = 2 * row + r - 1;
      if (h < 0 || h >= H) {
        memset(out, 0, (size_t)R * sizeof *out);
        continue;
      }
      const float *in = source + h * W;
      for (int64_t b = 0; b < low; b++)
        out[b] = 0.0f;
#pragma omp simd
      for (int64_t b = low; b < high; b++)
        out[b] = in[2 * b + q - 1];
      for (int64_t b = high; b < R; b++)
        out[b] = 0.0f;
    }
    memset(plane + (g->out_height + 1) * R, 0, (size_t)(g->plane - (g->out_height + 1) * R) * sizeof *plane);
  }
}

DIRECT_TARGET static void pad_planes_avx512(const direct_geometry *g, int64_t channels, const float *x, float *planes) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  for (int64_t c = 0; c < channels; c++) {
    const float *source = x + c * H * W;
    float *plane = planes + c * g->channel_floats;
    if (g->stride == 1) {
      /* Rows are short (W floats): masked vector copies, each writing the row and the zero border after it,
       * beat a memcpy call per row. */
      zero_floats(plane, R + 1);
      for (int64_t h = 0; h < H; h++) {
        const float *in = source + h * W;
        float *out = plane + (h + 1) * R + 1;
        for (int64_t k = 0; k <= W; k += 16) {
          const int64_t stored = W + 1 - k < 16 ? W + 1 - k : 16, loaded = W - k < stored ? W - k : stored;
          _mm512_mask_storeu_ps(out + k, direct_lanes(stored), _mm512_maskz_loadu_ps(direct_lanes(loaded), in + k));
        }
      }
      zero_floats(plane + (H + 1) * R + 1, g->plane - (H + 1) * R - 1);
      continue;
    }
    if (W <= 32) {
      /* Image row h is padded row h + 1 (phase row r = (h + 1) % 2, a = (h + 1) / 2); its even columns are
       * phase q = 1 from b = 0, its odd columns phase q = 0 from b = 1: two permutes split the row. */
      zero_floats(plane, 4 * g->plane);
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      const __mmask16 first = direct_lanes(W < 16 ? W : 16), second = direct_lanes(W > 16 ? W - 16 : 0);
      const __mmask16 evens = direct_lanes((W + 1) / 2), odds = direct_lanes(W / 2);
      for (int64_t h = 0; h < H; h++) {
        const __m512 low = _mm512_maskz_loadu_ps(first, source + h * W);
        const __m512 high = _mm512_maskz_loadu_ps(second, source + h * W + 16);
        float *row = plane + (h + 1) % 2 * 2 * g->plane + (h + 1) / 2 * R;
        _mm512_mask_storeu_ps(row + g->plane, evens, _mm512_permutex2var_ps(low, even, high));
        _mm512_mask_storeu_ps(row + 1, odds, _mm512_permutex2var_ps(low, odd, high));
      }
      continue;
    }
    split_phases(g, source, plane);
  }
  memset(planes + channels * g->channel_floats, 0, DIRECT_SLACK * sizeof *planes);
}

/* One channel's stride-2 phase planes with AVX2: as pad_planes_avx512's permutes, image row h is padded row
 * h + 1, its even columns phase q = 1 from b = 0 and its odd ones phase q = 0 from b = 1; each 16 pixels are
 * split by two in-lane shuffles and a cross-lane permute, the rest of the row pixel by pixel. The pixel-by-pixel
 * split_phases took 2.9% of ResNet-8's training step on the AVX2 Zen 2 (perf), being the Winograd kernels'
 * layout. */
__attribute__((target("avx2,fma"))) static void split_phases_avx2(const direct_geometry *g, const float *source,
                                                                  float *plane) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  memset(plane, 0, (size_t)(4 * g->plane) * sizeof *plane);
  for (int64_t h = 0; h < H; h++) {
    const float *in = source + h * W;
    float *row = plane + (h + 1) % 2 * 2 * g->plane + (h + 1) / 2 * R, *evens = row + g->plane, *odds = row + 1;
    int64_t w = 0;
    for (; w + 16 <= W; w += 16) {
      const __m256 low = _mm256_loadu_ps(in + w), high = _mm256_loadu_ps(in + w + 8);
      const __m256 even = _mm256_shuffle_ps(low, high, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 odd = _mm256_shuffle_ps(low, high, _MM_SHUFFLE(3, 1, 3, 1));
      _mm256_storeu_ps(evens + w / 2,
                       _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0))));
      _mm256_storeu_ps(odds + w / 2,
                       _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))));
    }
    for (; w < W; w++)
      (w % 2 ? odds : evens)[w / 2] = in[w];
  }
}

/* The same without AVX-512: a zeroed plane and a copy per row (stride 1), or the phase split. */
static void pad_planes_avx2(const direct_geometry *g, int64_t channels, const float *x, float *planes) {
  const int64_t H = g->in_height, W = g->in_width, R = g->row;
  for (int64_t c = 0; c < channels; c++) {
    const float *source = x + c * H * W;
    float *plane = planes + c * g->channel_floats;
    if (g->stride == 1) {
      memset(plane, 0, (size_t)g->plane * sizeof *plane);
      for (int64_t h = 0; h < H; h++)
        memcpy(plane + (h + 1) * R + 1, source + h * W, (size_t)W * sizeof *plane);
    } else
      split_phases_avx2(g, source, plane);
  }
  memset(planes + channels * g->channel_floats, 0, DIRECT_SLACK * sizeof *planes);
}

void bpt_cpu_direct_pad_planes(bpt_cpu_loops loops, const direct_geometry *g, int64_t channels, const float *x,
                               float *planes) {
  (loops == BPT_CPU_LOOPS_AVX512 ? pad_planes_avx512 : pad_planes_avx2)(g, channels, x, planes);
}

#endif
