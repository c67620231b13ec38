/* The seeded random number generator behind initialisers, shuffling and stochastic ops.
 * xoshiro256** seeded through splitmix64: fast, small state, and identical on every platform. */
#ifndef BPT_CORE_RNG_H
#define BPT_CORE_RNG_H

#include <stdint.h>

typedef struct bpt_rng {
  uint64_t state[4];
} bpt_rng;

void bpt_rng_seed(bpt_rng *rng, uint64_t seed);
uint64_t bpt_rng_next(bpt_rng *rng);
/* Uniform in [0, 1) with 24 random bits, so every value is an exact float. */
float bpt_rng_uniform(bpt_rng *rng);
/* Standard normal via Box-Muller (double precision inside, so the tails are right). */
float bpt_rng_normal(bpt_rng *rng);
/* Uniform integer in [0, bound), bound > 0, without modulo bias. */
uint64_t bpt_rng_below(bpt_rng *rng, uint64_t bound);

#endif
