// One GEMM engine of fpga-sim, the RTL of gemm.c's kernel for the fixed format with alpha = 1 and beta 0 or
// 1 (what linear layers call: forward beta = 0, gradient accumulation beta = 1). On-chip buffers hold op(A)
// (m, k) row-major, op(B) (k, n) and C (m, n) in LANES banks each (cyclic partition by column, so one lane
// group of a row is one word per bank); the host port stands for the off-chip transfers, which the cycle
// model charges separately. The controller walks rows i and column tiles j0 of BPT_FPGA_TILE like the C
// kernel; each (i, j0) runs one pipelined loop of k * ceil(width / LANES) trips at II = 1 (the flattened
// `accumulate` x `lanes` loops) and drains it before the next, as HLS schedules a pipelined loop inside
// loops that are not. One trip's path: issue (addresses), buffer read, PE array (4 stages), round, then
// saturate into C's write port: 8 cycles, the model's default pipeline_depth. SETUP is the cycle the
// controller spends entering each tile's loop (width, steps, mask), the loop-entry cycle of an HLS loop.
`default_nettype none
module gemm_engine #(
    parameter integer LANES = 8,     // log2 is LOG_LANES
    parameter integer LOG_LANES = 3,
    parameter integer W = 16,
    parameter integer F = 10,
    parameter integer ACCW = 48,
    parameter integer ROUND = 1,
    parameter integer SATURATE = 1,
    parameter integer TILE = 1024,   // BPT_FPGA_TILE
    parameter integer A_BITS = 19,   // address bits of the A buffer (words)
    parameter integer BANK_BITS = 16 // address bits of one B or C bank
) (
    input wire clk,
    input wire reset,
    input wire start,
    input wire [19:0] m, n, k,       // k >= 1, m, n >= 1 (the launcher handles the empty cases)
    input wire beta,
    output wire busy,
    output reg [63:0] cycles,        // cycles spent since the last start (not counting the idle wait)
    // host port: 0 A, 1 B, 2 C; rows and columns are of the logical matrices
    input wire host_we,
    input wire [1:0] host_sel,
    input wire [19:0] host_row, host_col,
    input wire [W-1:0] host_wdata,
    output wire [W-1:0] host_rdata
);
  localparam integer GROUPS = TILE / LANES;
  localparam integer DRAIN = 7;  // pipeline stages after the issue cycle
  localparam [1:0] IDLE = 2'd0, SETUP = 2'd1, RUN = 2'd2, FLUSH = 2'd3;

  reg [W-1:0] a_mem[0:(1<<A_BITS)-1];
  reg [W-1:0] b_mem[0:LANES-1][0:(1<<BANK_BITS)-1];
  reg [W-1:0] c_mem[0:LANES-1][0:(1<<BANK_BITS)-1];

  // Bank words per matrix row: ceil(n / LANES).
  wire [19:0] row_words = (n + LANES - 1) >> LOG_LANES;

  // ---- host port (outside the timed run) ----
  wire [LOG_LANES-1:0] host_bank = host_col[LOG_LANES-1:0];
  wire [39:0] host_a_addr = host_row * k + {20'd0, host_col};
  wire [39:0] host_bank_addr = host_row * row_words + {20'd0, host_col >> LOG_LANES};
  assign host_rdata = c_mem[host_bank][host_bank_addr[BANK_BITS-1:0]];
  always @(posedge clk)
    if (host_we) begin
      if (host_sel == 2'd0) a_mem[host_a_addr[A_BITS-1:0]] <= host_wdata;
      if (host_sel == 2'd1) b_mem[host_bank][host_bank_addr[BANK_BITS-1:0]] <= host_wdata;
      if (host_sel == 2'd2) c_mem[host_bank][host_bank_addr[BANK_BITS-1:0]] <= host_wdata;
    end

  // ---- controller ----
  reg [1:0] state;
  reg [19:0] i, j0, p;
  reg [6:0] s;
  reg [7:0] steps;  // up to GROUPS = 128 lane groups
  reg [10:0] width;
  reg [2:0] drain;
  reg [A_BITS-1:0] a_addr;                     // i * k + p
  reg [BANK_BITS-1:0] b_row, c_row, tile_word; // p * row_words, i * row_words, j0 / LANES
  assign busy = state != IDLE;

  wire [19:0] remaining = n - j0;
  wire last_trip = p == k - 1 && {1'b0, s} == steps - 1;
  wire [LANES-1:0] issue_mask;
  genvar gl;
  generate
    for (gl = 0; gl < LANES; gl = gl + 1) begin : mask_bits
      assign issue_mask[gl] = {4'd0, s, {LOG_LANES{1'b0}}} + gl < width;
    end
  endgenerate

  always @(posedge clk) begin
    if (reset) begin
      state <= IDLE;
      cycles <= 0;
    end else begin
      if (state != IDLE) cycles <= cycles + 1;
      case (state)
        IDLE:
          if (start) begin
            state <= SETUP;
            cycles <= 0;
            i <= 0; j0 <= 0; a_addr <= 0; c_row <= 0; tile_word <= 0;
          end
        SETUP: begin  // the loop-entry cycle of one (row, tile)
          width <= remaining > TILE ? TILE[10:0] : remaining[10:0];
          steps <= remaining > TILE ? GROUPS[7:0] : 8'((remaining + LANES - 1) >> LOG_LANES);
          p <= 0; s <= 0; b_row <= 0;
          state <= RUN;
        end
        RUN:
          if (last_trip) begin
            state <= FLUSH;
            drain <= DRAIN;
          end else if ({1'b0, s} == steps - 1) begin
            s <= 0; p <= p + 1; a_addr <= a_addr + 1; b_row <= b_row + row_words[BANK_BITS-1:0];
          end else begin
            s <= s + 1;
          end
        FLUSH:
          if (drain == 1) begin
            if (remaining > TILE) begin  // next tile of the same row; a_addr goes back to the row's start
              j0 <= j0 + TILE; tile_word <= tile_word + GROUPS[BANK_BITS-1:0];
              a_addr <= a_addr + 1 - k[A_BITS-1:0];
              state <= SETUP;
            end else if (i + 1 < m) begin
              i <= i + 1; j0 <= 0; tile_word <= 0; a_addr <= a_addr + 1;
              c_row <= c_row + row_words[BANK_BITS-1:0];
              state <= SETUP;
            end else begin
              state <= IDLE;
            end
          end else begin
            drain <= drain - 1;
          end
      endcase
    end
  end

  // ---- datapath: issue -> read -> PE array (4) -> round -> saturate and write ----
  reg rd_valid, rd_first, rd_last;
  reg [6:0] rd_group;
  reg [LANES-1:0] rd_mask;
  reg [A_BITS-1:0] rd_a;
  reg [BANK_BITS-1:0] rd_b;
  reg [BANK_BITS-1:0] c_addr[0:6];  // travels with the trip to the C read and the C write
  reg pe_valid, pe_first, pe_last;
  reg [6:0] pe_group;
  reg [LANES-1:0] pe_mask;
  reg signed [W-1:0] a_q;
  reg [LANES*W-1:0] b_q;
  wire issue = state == RUN;

  integer lane, d;
  always @(posedge clk) begin
    // issue: addresses of this trip
    rd_valid <= issue; rd_first <= p == 0; rd_last <= p == k - 1; rd_group <= s; rd_mask <= issue_mask;
    rd_a <= a_addr;
    rd_b <= b_row + tile_word + {{(BANK_BITS-7){1'b0}}, s};
    c_addr[0] <= c_row + tile_word + {{(BANK_BITS-7){1'b0}}, s};
    for (d = 1; d < 7; d = d + 1) c_addr[d] <= c_addr[d-1];
    // buffer read
    pe_valid <= rd_valid; pe_first <= rd_first; pe_last <= rd_last; pe_group <= rd_group; pe_mask <= rd_mask;
    a_q <= a_mem[rd_a];
    for (lane = 0; lane < LANES; lane = lane + 1) b_q[lane*W +: W] <= b_mem[lane][rd_b];
  end

  wire sum_valid, sum_last;
  wire [6:0] sum_group;
  wire [LANES-1:0] sum_mask;
  wire [LANES*ACCW-1:0] sum;
  pe_array #(.LANES(LANES), .W(W), .ACCW(ACCW), .GROUPS(GROUPS)) pe (
      .clk(clk), .in_valid(pe_valid), .in_first(pe_first), .in_last(pe_last), .in_group(pe_group),
      .in_mask(pe_mask), .in_a(a_q), .in_b(b_q), .out_valid(sum_valid), .out_last(sum_last),
      .out_group(sum_group), .out_mask(sum_mask), .out_sum(sum));

  // The old C is read while the PE array accumulates, so it meets the sum at the rounding stage.
  reg [W-1:0] c_old[0:LANES-1];
  reg wb_valid;
  reg [LANES-1:0] wb_mask;
  always @(posedge clk) begin
    for (lane = 0; lane < LANES; lane = lane + 1) c_old[lane] <= c_mem[lane][c_addr[4]];
    wb_valid <= sum_valid && sum_last;
    wb_mask <= sum_mask;
  end

  genvar gq;
  generate
    for (gq = 0; gq < LANES; gq = gq + 1) begin : write_back
      wire signed [W-1:0] out_c;
      quantize #(.W(W), .F(F), .ACCW(ACCW), .ROUND(ROUND), .SATURATE(SATURATE)) q (
          .clk(clk), .in_sum(sum[gq*ACCW +: ACCW]), .in_beta(beta), .in_c(c_old[gq]), .out_c(out_c));
      always @(posedge clk)
        if (wb_valid && wb_mask[gq]) c_mem[gq][c_addr[6]] <= out_c;
    end
  endgenerate
endmodule
`default_nettype wire
