// OpenCL C for 1 kernel(s): boolean_masks

// boolean_masks: elementwise, global (16, 1, 1), local (0, 0, 0)
__kernel void boolean_masks(__global char4* restrict flags, __global float4* restrict picked, __global int4* restrict counts, __global const float4* restrict a, __global const float* restrict b, __global const char4* restrict seen) {
  char4 mask = -convert_char4(a[(int)get_global_id(0)] > b[(int)get_global_id(0)] && convert_int4(!(seen[(int)get_global_id(0)] != (char4)(0))));
  flags[(int)get_global_id(0)] = -(mask != (char4)(0) || (char4)(-(b[(int)get_global_id(0)] == 0.0f)));
  picked[(int)get_global_id(0)] = select((float4)(sqrt(b[(int)get_global_id(0)])), a[(int)get_global_id(0)], convert_int4(mask != (char4)(0)));
  picked[(int)get_global_id(0) + 16] = any(convert_int4(mask != (char4)(0))) ? (all(convert_int4(mask != (char4)(0))) ? a[(int)get_global_id(0) + 1] : select((float4)(0.0f), a[(int)get_global_id(0) + 1], convert_int4(mask != (char4)(0)))) : (float4)(0.0f);
  counts[(int)get_global_id(0)] = as_int4(as_uint4(select((int4)(0), (int4)(1), a[(int)get_global_id(0)] < b[(int)get_global_id(0)])) + as_uint4(convert_int4(-(mask != (char4)(0)))));
}
