// OpenCL C for 1 kernel(s): group_sum

// group_sum: elementwise, global (104, 1, 1), local (8, 1, 1)
__kernel __attribute__((reqd_work_group_size(8, 1, 1))) void group_sum(__global float* restrict out, __global const float* restrict in) {
  __local float tile[8];
  tile[(int)get_local_id(0)] = (int)get_global_id(0) < 100 ? in[(int)get_global_id(0)] : 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  #pragma unroll
  for (int step = 0; step < 3; step += 1) {
    int half_ = 4 >> (step & 31);
    if ((int)get_local_id(0) < half_) {
      tile[(int)get_local_id(0)] = tile[(int)get_local_id(0)] + tile[(int)get_local_id(0) + half_];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if ((int)get_local_id(0) == 0) {
    out[(int)get_group_id(0)] = tile[0];
  }
}
