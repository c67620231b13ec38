// The PE array of the fpga-sim GEMM engine: LANES multiply-accumulate lanes fed one element of A (broadcast)
// and LANES elements of a row of B per cycle, the body of gemm.c's pipelined `lanes` loop (UNROLL factor=8).
// Four stages, the usual DSP-slice registers: A/B input registers, the multiply, the product register, then
// the accumulate into the partitioned row accumulator (row_wide[] in the C kernel, cyclic factor LANES: bank l
// holds the columns j = s * LANES + l of the current tile). The accumulator is read and written in the same
// stage, so the same lane group `s` coming back `steps` cycles later always sees the updated sum (no hazard
// whatever steps is, as with II = 1 in the HLS loop).
`default_nettype none
module pe_array #(
    parameter integer LANES = 8,
    parameter integer W = 16,       // operand word bits (ap_fixed<W, I>)
    parameter integer ACCW = 48,    // accumulator bits: 2W product plus headroom for k up to 2^(ACCW - 2W)
    parameter integer GROUPS = 128  // lane groups per tile: BPT_FPGA_TILE / LANES
) (
    input wire clk,
    input wire in_valid,
    input wire in_first,                 // p == 0: the sum starts at this product
    input wire in_last,                  // p == k - 1: the sum leaves for the write-back
    input wire [6:0] in_group,           // s, the lane group inside the tile
    input wire [LANES-1:0] in_mask,      // lanes inside the tile's width
    input wire signed [W-1:0] in_a,
    input wire [LANES*W-1:0] in_b,
    output reg out_valid,
    output reg out_last,
    output reg [6:0] out_group,
    output reg [LANES-1:0] out_mask,
    output wire [LANES*ACCW-1:0] out_sum
);
  // Control travels beside the data through the three stages before the accumulate.
  reg [2:0] v, f, l;
  reg [6:0] g[0:2];
  reg [LANES-1:0] mk[0:2];
  reg signed [W-1:0] a_r;
  reg signed [W-1:0] b_r[0:LANES-1];
  reg signed [2*W-1:0] m_r[0:LANES-1];
  reg signed [2*W-1:0] p_r[0:LANES-1];

  integer lane;
  always @(posedge clk) begin
    // stage 1: input registers
    v[0] <= in_valid; f[0] <= in_first; l[0] <= in_last; g[0] <= in_group; mk[0] <= in_mask;
    a_r <= in_a;
    for (lane = 0; lane < LANES; lane = lane + 1) b_r[lane] <= in_b[lane*W +: W];
    // stage 2: multiply
    v[1] <= v[0]; f[1] <= f[0]; l[1] <= l[0]; g[1] <= g[0]; mk[1] <= mk[0];
    for (lane = 0; lane < LANES; lane = lane + 1) m_r[lane] <= a_r * b_r[lane];
    // stage 3: product register
    v[2] <= v[1]; f[2] <= f[1]; l[2] <= l[1]; g[2] <= g[1]; mk[2] <= mk[1];
    for (lane = 0; lane < LANES; lane = lane + 1) p_r[lane] <= m_r[lane];
    // stage 4: accumulate (below, one bank per lane)
    out_valid <= v[2]; out_last <= l[2]; out_group <= g[2]; out_mask <= mk[2];
  end

  // One accumulator bank per lane, read and written in the same cycle: a one-dimensional array per lane lets
  // synthesis map it to distributed (LUT) RAM, asynchronous read and synchronous write.
  genvar gl;
  generate
    for (gl = 0; gl < LANES; gl = gl + 1) begin : bank
      reg signed [ACCW-1:0] acc[0:GROUPS-1];
      reg signed [ACCW-1:0] sum_r;
      wire signed [ACCW-1:0] sum_next = (f[2] ? {ACCW{1'b0}} : acc[g[2]]) +
                                        {{(ACCW-2*W){p_r[gl][2*W-1]}}, p_r[gl]};
      always @(posedge clk)
        if (v[2]) begin
          acc[g[2]] <= sum_next;
          sum_r <= sum_next;
        end
      assign out_sum[gl*ACCW +: ACCW] = sum_r;
    end
  endgenerate
endmodule
`default_nettype wire
