// OpenCL C for 1 kernel(s): half_storage
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

// double rounded to the nearest half (even on ties), as float
float tile_round_half_double(double x) {
  ushort bits;
  vstore_half(x, 0, (__private half*)&bits);
  return vload_half(0, (__private const half*)&bits);
}

// float rounded to the nearest half (even on ties), as float
float tile_round_half_float(float x) {
  ushort bits;
  vstore_half(x, 0, (__private half*)&bits);
  return vload_half(0, (__private const half*)&bits);
}

// float3 rounded to the nearest half (even on ties), as float
float3 tile_round_half_float3(float3 x) {
  ushort3 bits;
  vstore_half3(x, 0, (__private half*)&bits);
  return vload_half3(0, (__private const half*)&bits);
}

// half_storage: elementwise, global (16, 1, 1), local (0, 0, 0)
__kernel void half_storage(__global half* restrict h, __global half* restrict h4, __global half* restrict h3, __global double* restrict d) {
  float x = vload_half((int)get_global_id(0), h) * 0.5f + 1.0f;
  vstore_half(tile_round_half_float(x * x) + tile_round_half_double(d[(int)get_global_id(0)]), (int)get_global_id(0), h);
  vstore_half4(vload_half4((int)get_global_id(0), h4) * x + exp(vload_half4((int)get_global_id(0), h4)), (int)get_global_id(0), h4);
  vstore_half3(tile_round_half_float3(vload_half3((int)get_global_id(0), h3) / 3.0f), (int)get_global_id(0), h3);
  d[(int)get_global_id(0)] = (double)65504.0f + d[(int)get_global_id(0)];
}
