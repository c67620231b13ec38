// The write-back of one lane: C = q(row_wide + beta q(C)) with alpha = 1, the fixed-format branch of gemm.c
// (`p == k - 1`). Two stages: add the old C (aligned to the accumulator's 2F fraction bits) and round
// (AP_RND: floor(x + 1/2), AP_TRN: floor) into a register, then saturate or wrap to W bits on the way into
// C's write port, as bpt_fpga_quantize does in double. Operands on the fixed grid make the double arithmetic of the C kernel exact, so the two agree bit
// for bit.
`default_nettype none
module quantize #(
    parameter integer W = 16,
    parameter integer F = 10,         // fraction bits: W - integer_bits
    parameter integer ACCW = 48,
    parameter integer ROUND = 1,      // 1: AP_RND, 0: AP_TRN
    parameter integer SATURATE = 1    // 1: AP_SAT, 0: AP_WRAP
) (
    input wire clk,
    input wire signed [ACCW-1:0] in_sum,   // 2F fraction bits
    input wire in_beta,                    // beta = 1: add the old C; beta = 0: ignore it
    input wire signed [W-1:0] in_c,
    output wire signed [W-1:0] out_c
);
  localparam signed [ACCW-1:0] HALF = ROUND ? ({{(ACCW-1){1'b0}}, 1'b1} <<< (F - 1)) : {ACCW{1'b0}};
  localparam signed [ACCW-1:0] LARGEST = ({{(ACCW-1){1'b0}}, 1'b1} <<< (W - 1)) - 1;
  localparam signed [ACCW-1:0] SMALLEST = -({{(ACCW-1){1'b0}}, 1'b1} <<< (W - 1));
  reg signed [ACCW-1:0] rounded;
  wire signed [ACCW-1:0] old_c = in_beta ? ({{(ACCW-W){in_c[W-1]}}, in_c} <<< F) : {ACCW{1'b0}};
  always @(posedge clk) begin
    rounded <= (in_sum + old_c + HALF) >>> F;  // arithmetic shift: floor for negative values too
  end
  assign out_c = SATURATE == 0 ? rounded[W-1:0]
               : rounded > LARGEST ? LARGEST[W-1:0] : rounded < SMALLEST ? SMALLEST[W-1:0] : rounded[W-1:0];
endmodule
`default_nettype wire
