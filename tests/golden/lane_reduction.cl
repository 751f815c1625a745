// OpenCL C for 1 kernel(s): tile_0

typedef float8 tile_unaligned_float8 __attribute__((aligned(4)));

// O[m: 3] = >(X[m, n])
//   output  m: 3
//   reduce  n: 128
//   O  offset 0  strides m: 1
//   X  offset 0  strides m: 128  n: 1
// tile_0: contraction, global (3, 1, 1), local (1, 1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void tile_0(__global float* restrict out0, __global const float* restrict in0) {
  int group = (int)get_group_id(0);
  int base0 = group;
  float acc[64];
  #pragma unroll
  for (int acc_fill = 0; acc_fill < 64; acc_fill += 1) acc[acc_fill] = -INFINITY;
  #pragma unroll
  for (int n = 0; n < 2; n += 1) {
    int m = base0;
    #pragma unroll
    for (int lane_vector = 0; lane_vector < 8; lane_vector += 1) {
      int lane = lane_vector * 8;
      *(tile_unaligned_float8*)(acc + (lane)) = select(*(const tile_unaligned_float8*)(acc + (lane)), *(__global const tile_unaligned_float8*)(in0 + (m * 128 + (n * 64 + lane))), *(__global const tile_unaligned_float8*)(in0 + (m * 128 + (n * 64 + lane))) > *(const tile_unaligned_float8*)(acc + (lane)));
    }
  }
  {
    int m_ = base0;
    #pragma unroll
    for (int fold32_vector = 0; fold32_vector < 4; fold32_vector += 1) {
      int fold32 = fold32_vector * 8;
      *(tile_unaligned_float8*)(acc + (fold32)) = select(*(const tile_unaligned_float8*)(acc + (fold32)), *(const tile_unaligned_float8*)(acc + (fold32 + 32)), *(const tile_unaligned_float8*)(acc + (fold32 + 32)) > *(const tile_unaligned_float8*)(acc + (fold32)));
    }
    #pragma unroll
    for (int fold16_vector = 0; fold16_vector < 2; fold16_vector += 1) {
      int fold16 = fold16_vector * 8;
      *(tile_unaligned_float8*)(acc + (fold16)) = select(*(const tile_unaligned_float8*)(acc + (fold16)), *(const tile_unaligned_float8*)(acc + (fold16 + 16)), *(const tile_unaligned_float8*)(acc + (fold16 + 16)) > *(const tile_unaligned_float8*)(acc + (fold16)));
    }
    #pragma unroll
    for (int fold8_vector = 0; fold8_vector < 1; fold8_vector += 1) {
      int fold8 = fold8_vector * 8;
      *(tile_unaligned_float8*)(acc + (fold8)) = select(*(const tile_unaligned_float8*)(acc + (fold8)), *(const tile_unaligned_float8*)(acc + (fold8 + 8)), *(const tile_unaligned_float8*)(acc + (fold8 + 8)) > *(const tile_unaligned_float8*)(acc + (fold8)));
    }
    #pragma unroll
    for (int fold4 = 0; fold4 < 4; fold4 += 1) {
      acc[fold4] = acc[fold4 + 4] > acc[fold4] ? acc[fold4 + 4] : acc[fold4];
    }
    #pragma unroll
    for (int fold2 = 0; fold2 < 2; fold2 += 1) {
      acc[fold2] = acc[fold2 + 2] > acc[fold2] ? acc[fold2 + 2] : acc[fold2];
    }
    #pragma unroll
    for (int fold1 = 0; fold1 < 1; fold1 += 1) {
      acc[fold1] = acc[fold1 + 1] > acc[fold1] ? acc[fold1 + 1] : acc[fold1];
    }
  }
  {
    int m__ = base0;
    float vO = acc[0];
    out0[m__] = vO;
  }
}
