// OpenCL C for 1 kernel(s): scale_add_relu

// scale_add_relu: elementwise, global (16, 1, 1), local (0, 0, 0)
__kernel void scale_add_relu(__global float4* restrict out, __global const float4* restrict a, __global const float4* restrict b) {
  if ((int)get_global_id(0) < 16) {
    float4 x = a[(int)get_global_id(0)] * 2.0f + b[(int)get_global_id(0)];
    out[(int)get_global_id(0)] = select(x, (float4)(0.0f), x < 0.0f);
  }
}
