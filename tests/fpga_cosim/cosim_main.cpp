// C/RTL co-simulation of fpga-sim's GEMM engine: the same raw fixed-point operands go to the HLS C kernel
// (cosim_ref.c) and to the Verilated RTL (rtl/gemm_engine.v); the results must agree bit for bit, and the
// RTL's cycle count is set beside the cycle model's charge for the call.
//   fpga_cosim [--max-error PERCENT] [--seed N] SHAPE...    SHAPE = m,n,k[,beta[,ta[,tb[,range]]]]
// range: operands are uniform in [-range, range] raw units (default 2^F, i.e. [-1, 1]); a full-scale range
// exercises saturation. Prints one line per shape; exits 1 on a mismatch or an error over --max-error.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "Vgemm_engine.h"
#include "cosim_ref.h"
#include "verilated.h"

namespace {

struct Shape {
  long m, n, k, beta, ta, tb, range;
};

// xorshift64*: the same operands on every machine for a given seed.
uint64_t next_random(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 2685821657736338717ull;
}

int32_t random_raw(uint64_t *state, long range) {
  return (int32_t)((long)(next_random(state) % (uint64_t)(2 * range + 1)) - range);
}

void tick(Vgemm_engine *rtl) {
  rtl->clk = 0;
  rtl->eval();
  rtl->clk = 1;
  rtl->eval();
}

void host_write(Vgemm_engine *rtl, int sel, long row, long col, int32_t value) {
  rtl->host_we = 1;
  rtl->host_sel = sel;
  rtl->host_row = (uint32_t)row;
  rtl->host_col = (uint32_t)col;
  rtl->host_wdata = (uint16_t)value;
  tick(rtl);
  rtl->host_we = 0;
}

// Runs one shape on both sides; returns 0 when bit-identical, with the cycle counts.
int run_shape(Vgemm_engine *rtl, const Shape &s, uint64_t seed, uint64_t *rtl_cycles, uint64_t *model_cycles) {
  const size_t a_count = (size_t)(s.m * s.k), b_count = (size_t)(s.k * s.n), c_count = (size_t)(s.m * s.n);
  std::vector<int32_t> a(a_count), b(b_count), c_in(c_count), c_ref(c_count);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto &x : a) x = random_raw(&state, s.range);
  for (auto &x : b) x = random_raw(&state, s.range);
  for (auto &x : c_in) x = random_raw(&state, s.range);
  c_ref = c_in;
  char message[256] = "";
  if (bpt_cosim_reference_gemm(s.m, s.n, s.k, (int)s.beta, (int)s.ta, (int)s.tb, a.data(), b.data(), c_ref.data(),
                               model_cycles, message, sizeof message)) {
    std::fprintf(stderr, "fpga_cosim: %s\n", message);
    return 1;
  }
  rtl->m = (uint32_t)s.m;
  rtl->n = (uint32_t)s.n;
  rtl->k = (uint32_t)s.k;
  rtl->beta = (uint8_t)s.beta;
  for (long i = 0; i < s.m; i++)
    for (long p = 0; p < s.k; p++) host_write(rtl, 0, i, p, a[(size_t)(i * s.k + p)]);
  for (long p = 0; p < s.k; p++)
    for (long j = 0; j < s.n; j++) host_write(rtl, 1, p, j, b[(size_t)(p * s.n + j)]);
  for (long i = 0; i < s.m; i++)
    for (long j = 0; j < s.n; j++) host_write(rtl, 2, i, j, c_in[(size_t)(i * s.n + j)]);
  rtl->start = 1;
  tick(rtl);
  rtl->start = 0;
  // A bound that no correct run reaches (k * n * m trips plus every overhead many times over): a broken
  // controller fails the shape instead of hanging the test.
  const uint64_t bound = 4 * (uint64_t)s.m * (uint64_t)(s.n + 8) * (uint64_t)s.k + 1000;
  uint64_t waited = 0;
  while (rtl->busy && waited < bound) {
    tick(rtl);
    waited++;
  }
  if (rtl->busy) {
    std::fprintf(stderr, "fpga_cosim: %ldx%ldx%ld: the RTL was still busy after %" PRIu64 " cycles\n", s.m, s.n,
                 s.k, bound);
    return 1;
  }
  *rtl_cycles = rtl->cycles;
  long mismatches = 0;
  for (long i = 0; i < s.m; i++)
    for (long j = 0; j < s.n; j++) {
      rtl->host_row = (uint32_t)i;
      rtl->host_col = (uint32_t)j;
      rtl->eval();
      int32_t got = (int16_t)rtl->host_rdata, want = c_ref[(size_t)(i * s.n + j)];
      if (got != want && mismatches++ < 5)
        std::fprintf(stderr, "fpga_cosim: %ldx%ldx%ld: C[%ld][%ld] RTL %d, C kernel %d (raw)\n", s.m, s.n, s.k, i,
                     j, got, want);
    }
  if (mismatches) {
    std::fprintf(stderr, "fpga_cosim: %ldx%ldx%ld: %ld of %ld results differ\n", s.m, s.n, s.k, mismatches,
                 s.m * s.n);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  double max_error = -1.0;
  uint64_t seed = 1;
  std::vector<Shape> shapes;
  const long full_scale = 1L << (BPT_COSIM_WORD_BITS - 1);
  for (int a = 1; a < argc; a++) {
    if (!std::strcmp(argv[a], "--max-error") && a + 1 < argc) {
      max_error = std::atof(argv[++a]);
    } else if (!std::strcmp(argv[a], "--seed") && a + 1 < argc) {
      seed = std::strtoull(argv[++a], nullptr, 10);
    } else {
      Shape s = {0, 0, 0, 0, 0, 0, 1L << (BPT_COSIM_WORD_BITS - BPT_COSIM_INTEGER_BITS)};
      int got = std::sscanf(argv[a], "%ld,%ld,%ld,%ld,%ld,%ld,%ld", &s.m, &s.n, &s.k, &s.beta, &s.ta, &s.tb,
                            &s.range);
      // The RTL's buffers: A 2^19 words, each of the 8 B and C banks 2^16 words.
      if (got < 3 || s.m < 1 || s.n < 1 || s.k < 1 || s.m * s.k > (1L << 19) ||
          s.k * ((s.n + 7) / 8) > (1L << 16) || s.m * ((s.n + 7) / 8) > (1L << 16) || s.range < 1 ||
          s.range >= full_scale) {
        std::fprintf(stderr, "fpga_cosim: bad shape '%s' (m,n,k[,beta,ta,tb,range]; buffers hold A 2^19 words, "
                             "B and C 2^19 words in 8 banks; range < 2^15)\n", argv[a]);
        return 2;
      }
      shapes.push_back(s);
    }
  }
  if (shapes.empty()) {
    std::fprintf(stderr, "usage: fpga_cosim [--max-error PERCENT] [--seed N] m,n,k[,beta[,ta[,tb[,range]]]]...\n");
    return 2;
  }
  VerilatedContext context;
  Vgemm_engine rtl(&context);
  rtl.reset = 1;
  tick(&rtl);
  rtl.reset = 0;
  int failed = 0;
  std::printf("%6s %6s %6s %4s %2s %2s %12s %12s %8s %s\n", "m", "n", "k", "beta", "ta", "tb", "rtl_cycles",
              "model_cycles", "error_%", "result");
  for (size_t i = 0; i < shapes.size(); i++) {
    const Shape &s = shapes[i];
    uint64_t rtl_cycles = 0, model_cycles = 0;
    if (run_shape(&rtl, s, seed + i, &rtl_cycles, &model_cycles)) {
      failed = 1;
      rtl.reset = 1;  // a run that hung must not block the next shape's start
      tick(&rtl);
      rtl.reset = 0;
      continue;
    }
    double error = 100.0 * ((double)model_cycles - (double)rtl_cycles) / (double)rtl_cycles;
    bool over = max_error >= 0 && std::fabs(error) > max_error;
    std::printf("%6ld %6ld %6ld %4ld %2ld %2ld %12" PRIu64 " %12" PRIu64 " %+8.2f %s\n", s.m, s.n, s.k, s.beta, s.ta,
                s.tb, rtl_cycles, model_cycles, error, over ? "bit-exact, CYCLE ERROR TOO LARGE" : "bit-exact");
    if (over) failed = 1;
  }
  return failed;
}
