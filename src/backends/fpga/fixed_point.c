/* Fixed-point quantisation with ap_fixed<W, I, Q, O> semantics, done in double so that it is exact for
 * every W <= 32: scale by 2^F, round (AP_TRN: floor; AP_RND: floor(x + 1/2)), then wrap modulo 2^W or
 * saturate to [-2^(W-1), 2^(W-1) - 1], and scale back. */
#include <math.h>

#include "backends/fpga/fpga.h"

double bpt_fpga_quantize(const bpt_fpga_format *format, double x) {
  if (!format->fixed) return x;
  if (isnan(x)) return 0.0;
  const double scale = ldexp(1.0, format->fraction_bits);
  const double modulus = ldexp(1.0, format->word_bits);
  const double largest = ldexp(1.0, format->word_bits - 1) - 1.0, smallest = -ldexp(1.0, format->word_bits - 1);
  double scaled = x * scale; /* exact: a power-of-two scale */
  if (isinf(scaled)) {
    if (format->overflow == BPT_FPGA_SATURATE) return (scaled > 0 ? largest : smallest) / scale;
    return 0.0; /* wrap of an infinite value: every low bit is zero */
  }
  double integer = format->rounding == BPT_FPGA_ROUND ? floor(scaled + 0.5) : floor(scaled);
  if (integer > largest || integer < smallest) {
    if (format->overflow == BPT_FPGA_SATURATE) {
      integer = integer > largest ? largest : smallest;
    } else {
      integer = fmod(integer, modulus); /* exact for integers held in double */
      if (integer < 0) integer += modulus;
      if (integer > largest) integer -= modulus;
    }
  }
  return integer / scale;
}

double bpt_fpga_resolution(const bpt_fpga_format *format) {
  return format->fixed ? ldexp(1.0, -format->fraction_bits) : 0.0;
}

bpt_fpga_format bpt_fpga_format_from_options(const bpt_fpga_options *options) {
  bpt_fpga_format format = {.fixed = options->format == BPT_FPGA_FORMAT_FIXED,
                            .word_bits = options->word_bits,
                            .fraction_bits = options->word_bits - options->integer_bits,
                            .rounding = options->rounding,
                            .overflow = options->overflow};
  return format;
}
