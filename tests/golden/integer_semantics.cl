// OpenCL C for 1 kernel(s): integer_semantics

// / without traps: x / 0 == 0, MIN / -1 == MIN
int tile_div_int(int a, int b) {
  return b == 0 ? (int)0 : (a == INT_MIN && b == -1) ? a : (int)(a / b);
}

// / without traps: x / 0 == 0, MIN / -1 == MIN
int4 tile_div_int4(int4 a, int4 b) {
  int4 invalid = (b == (int4)(0)) | ((a == (int4)(INT_MIN)) & (b == (int4)(-1)));
  return select(a / select(b, (int4)(1), invalid), (int4)(0), b == (int4)(0));
}

// / without traps: x / 0 == 0, MIN / -1 == MIN
long tile_div_long(long a, long b) {
  return b == 0 ? (long)0 : (a == LONG_MIN && b == -1) ? a : (long)(a / b);
}

// max(a, b)
long tile_max_long(long a, long b) {
  return a > b ? a : b;
}

// integer corner cases
// (spec 7.4)
// integer_semantics: elementwise, global (16, 1, 1), local (0, 0, 0)
__kernel void integer_semantics(__global char* a8, __global int* restrict a32, __global ushort* restrict u16, __global long* restrict b64, __global int4* restrict v4, __global const char* b8) {
  // A8 = (A8 + B8) * 3 - ...
  a8[(int)get_global_id(0)] = (char)(((uint)a8[(int)get_global_id(0)] + (uint)b8[(int)get_global_id(0)]) * 3u - ((uint)a8[(int)get_global_id(0)] << (b8[(int)get_global_id(0)] & (char)7)));
  a32[(int)get_global_id(0)] = as_int((uint)tile_div_int(a32[(int)get_global_id(0)], (int)b8[(int)get_global_id(0)]) + (uint)(a32[(int)get_global_id(0)] % 7) - (uint)(a32[(int)get_global_id(0)] >> 1));
  u16[(int)get_global_id(0)] = (ushort)((uint)(ushort)((ushort)(-(uint)u16[(int)get_global_id(0)] * (uint)u16[(int)get_global_id(0)]) / (ushort)3) + (uint)(ushort)(~u16[(int)get_global_id(0)]));
  long acc = as_long((ulong)(long)a32[(int)get_global_id(0)] * (ulong)b64[(int)get_global_id(0)]);
  b64[(int)get_global_id(0)] = as_long((ulong)tile_div_long(acc, b64[(int)get_global_id(0)]) + (ulong)as_long(abs(acc)) - (ulong)tile_max_long(acc, 5L));
  v4[(int)get_global_id(0)] = as_int4(as_uint4(tile_div_int4(v4[(int)get_global_id(0)], as_int4(as_uint4(v4[(int)get_global_id(0)]) - (uint4)(1u)))) + (as_uint4(v4[(int)get_global_id(0)]) << 2u) + (as_uint4(v4[(int)get_global_id(0)]) * (uint4)(3u) + (uint4)(1u)));
}
