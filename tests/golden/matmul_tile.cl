// OpenCL C for 1 kernel(s): matmul_tile

// C = A @ B
// matmul_tile: elementwise, global (2, 2, 1), local (0, 0, 0)
__kernel void matmul_tile(__global float4* restrict C, __global const float* restrict A, __global const float4* restrict B) {
  float4 agg[4];
  #pragma unroll
  for (int agg_fill = 0; agg_fill < 4; agg_fill += 1) agg[agg_fill] = (float4)(0.0f);
  #pragma unroll
  for (int k = 0; k < 3; k += 1) {
    float4 b_row[2];
    #pragma unroll
    for (int v = 0; v < 2; v += 1) {
      b_row[v] = B[k * 4 + (int)get_global_id(0) * 2 + v];
    }
    #pragma unroll
    for (int r = 0; r < 2; r += 1) {
      float a_value = A[((int)get_global_id(1) * 2 + r) * 3 + k];
      #pragma unroll
      for (int v = 0; v < 2; v += 1) {
        agg[r * 2 + v] = (float4)(a_value) * b_row[v] + agg[r * 2 + v];
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < 2; r += 1) {
    #pragma unroll
    for (int v = 0; v < 2; v += 1) {
      C[((int)get_global_id(1) * 2 + r) * 4 + (int)get_global_id(0) * 2 + v] = agg[r * 2 + v];
    }
  }
}
