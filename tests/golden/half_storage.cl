// OpenCL C for 1 kernel(s): half_storage
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

typedef ushort4 tile_unaligned_ushort4 __attribute__((aligned(2)));

// float to half bits, to nearest even, as vstore_half
ushort tile_float_to_half_float(float x) {
  uint u = as_uint(x);
  uint a = u & 0x7fffffffu;
  uint normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  uint tiny = as_uint(as_float(a) + 0.5f) - 0x3f000000u;
  uint nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint big = a > 0x7f800000u ? nan : 0x7c00u;
  uint r = a >= 0x47800000u ? big : a < 0x38800000u ? tiny : normal;
  return convert_ushort(r | ((u >> 16) & 0x8000u));
}

// float4 to half bits, to nearest even, as vstore_half4
ushort4 tile_float_to_half_float4(float4 x) {
  uint4 u = as_uint4(x);
  uint4 a = u & 0x7fffffffu;
  uint4 normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  uint4 tiny = as_uint4(as_float4(a) + 0.5f) - 0x3f000000u;
  uint4 nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint4 big = select((uint4)(0x7c00u), nan, a > 0x7f800000u);
  uint4 r = select(select(normal, tiny, a < 0x38800000u), big, a >= 0x47800000u);
  return convert_ushort4(r | ((u >> 16) & 0x8000u));
}

// half bits to float, as vload_half
float tile_half_to_float(ushort h) {
  uint u = h;
  uint em = (u & 0x7fffu) << 13;
  uint special = em | 0x7f800000u;
  uint finite = as_uint(as_float(em) * 0x1p112f);
  uint r = (u & 0x7c00u) == 0x7c00u ? special : finite;
  return as_float(r | ((u & 0x8000u) << 16));
}

// half bits to float4, as vload_half4
float4 tile_half_to_float4(ushort4 h) {
  uint4 u = as_uint4((ushort8)(h.s0, (ushort)0, h.s1, (ushort)0, h.s2, (ushort)0, h.s3, (ushort)0));
  uint4 em = (u & 0x7fffu) << 13;
  uint4 special = em | 0x7f800000u;
  uint4 finite = as_uint4(as_float4(em) * 0x1p112f);
  uint4 r = (u & 0x7c00u) == 0x7c00u ? special : finite;
  return as_float4(r | ((u & 0x8000u) << 16));
}

// double rounded to the nearest half (even on ties), as float
float tile_round_half_double(double x) {
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
  float x = tile_half_to_float(((const __global ushort*)(h))[(int)get_global_id(0)]) * 0.5f + 1.0f;
  ((__global ushort*)(h))[(int)get_global_id(0)] = tile_float_to_half_float(tile_half_to_float(tile_float_to_half_float(x * x)) + tile_round_half_double(d[(int)get_global_id(0)]));
  *(__global tile_unaligned_ushort4*)((__global ushort*)(h4) + ((int)get_global_id(0)) * 4) = tile_float_to_half_float4(tile_half_to_float4(*(const __global tile_unaligned_ushort4*)((const __global ushort*)(h4) + ((int)get_global_id(0)) * 4)) * x + exp(tile_half_to_float4(*(const __global tile_unaligned_ushort4*)((const __global ushort*)(h4) + ((int)get_global_id(0)) * 4))));
  vstore_half3(tile_round_half_float3(vload_half3((int)get_global_id(0), h3) / 3.0f), (int)get_global_id(0), h3);
  d[(int)get_global_id(0)] = (double)65504.0f + d[(int)get_global_id(0)];
}
