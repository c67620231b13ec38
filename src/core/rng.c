/* xoshiro256** (Blackman & Vigna) with splitmix64 seeding; see rng.h. */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotate_left(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void bpt_rng_seed(bpt_rng *rng, uint64_t seed) {
  for (int i = 0; i < 4; i++) rng->state[i] = splitmix64(&seed);
}

uint64_t bpt_rng_next(bpt_rng *rng) {
  uint64_t *s = rng->state;
  const uint64_t result = rotate_left(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotate_left(s[3], 45);
  return result;
}

float bpt_rng_uniform(bpt_rng *rng) { return (float)(bpt_rng_next(rng) >> 40) * (1.0f / 16777216.0f); }

float bpt_rng_normal(bpt_rng *rng) {
  /* 53-bit uniforms; u1 in (0, 1] so log never sees zero. */
  double u1 = ((double)(bpt_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(bpt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t bpt_rng_below(bpt_rng *rng, uint64_t bound) {
  /* Lemire's rejection on the high half of a 128-bit product. */
  uint64_t x = bpt_rng_next(rng);
  __uint128_t product = (__uint128_t)x * bound;
  uint64_t low = (uint64_t)product;
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      x = bpt_rng_next(rng);
      product = (__uint128_t)x * bound;
      low = (uint64_t)product;
    }
  }
  return (uint64_t)(product >> 64);
}
