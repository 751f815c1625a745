// OpenCL C for 1 kernel(s): conversions

// float to char: truncate toward zero, saturate, NaN gives 0
char tile_sat_char_float(float x) {
  return convert_char_sat(isnan(x) ? 0.0f : x);
}

// float4 to int4: truncate toward zero, saturate, NaN gives 0
int4 tile_sat_int4_float4(float4 x) {
  return convert_int4_sat(select(x, (float4)(0.0f), isnan(x)));
}

// conversions: elementwise, global (4, 1, 1), local (4, 1, 1)
__kernel __attribute__((reqd_work_group_size(4, 1, 1))) void conversions(__global int* restrict out, __global int4* restrict out4, __global float* restrict f, __global float4* restrict f4) {
  __local float scratch[4];
  out[(int)get_global_id(0)] = as_int((uint)(int)tile_sat_char_float(f[(int)get_global_id(0)]) + (uint)(f[(int)get_global_id(0)] > 1.5f));
  out4[(int)get_global_id(0)] = as_int4(as_uint4(tile_sat_int4_float4(f4[(int)get_global_id(0)])) + (uint4)(300u));
  f[(int)get_global_id(0)] = (float)out[(int)get_global_id(0)] + -FLT_MAX * 0.0f;
  if ((int)get_global_id(0) < 4) {
    #pragma unroll
    for (int scratch_fill = 0; scratch_fill < 4; scratch_fill += 1) scratch[scratch_fill] = 2.0f;
    f4[(int)get_global_id(0)] = convert_float4(out4[(int)get_global_id(0)]) + scratch[(int)get_global_id(0)];
  }
}
