// OpenCL C for 2 kernel(s): tile_0_part, tile_0

typedef float8 tile_unaligned_float8 __attribute__((aligned(4)));

// O[] = +(X[i])  (part p of 16)
//   output  p: 16
//   reduce  i: 128
//   _P0  offset 0  strides p: 1
//   X    offset 0  strides p: 128  i: 1
// tile_0_part: contraction, global (8, 1, 1), local (1, 1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void tile_0_part(__global float* restrict out0, __global const float* restrict in0) {
  int group = (int)get_group_id(0);
  int base0 = group * 2;
  float acc_row[1][128];
  float* acc = acc_row[0];
  for (int acc_fill = 0; acc_fill < 128; acc_fill += 1) acc[acc_fill] = 0.0f;
  for (int i = 0; i < 2; i += 1) {
    for (int tr0 = 0; tr0 < 2; tr0 += 1) {
      int p = base0 + tr0;
      for (int lane_vector = 0; lane_vector < 8; lane_vector += 1) {
        int lane = lane_vector * 8;
        *(tile_unaligned_float8*)(acc + (tr0 * 64 + lane)) = *(const tile_unaligned_float8*)(acc + (tr0 * 64 + lane)) + *(__global const tile_unaligned_float8*)(in0 + (p * 128 + (i * 64 + lane)));
      }
    }
  }
  for (int tf0 = 0; tf0 < 2; tf0 += 1) {
    int p_ = base0 + tf0;
    for (int fold32_vector = 0; fold32_vector < 4; fold32_vector += 1) {
      int fold32 = fold32_vector * 8;
      *(tile_unaligned_float8*)(acc + (tf0 * 64 + fold32)) = *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold32)) + *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold32 + 32));
    }
    for (int fold16_vector = 0; fold16_vector < 2; fold16_vector += 1) {
      int fold16 = fold16_vector * 8;
      *(tile_unaligned_float8*)(acc + (tf0 * 64 + fold16)) = *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold16)) + *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold16 + 16));
    }
    for (int fold8_vector = 0; fold8_vector < 1; fold8_vector += 1) {
      int fold8 = fold8_vector * 8;
      *(tile_unaligned_float8*)(acc + (tf0 * 64 + fold8)) = *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold8)) + *(const tile_unaligned_float8*)(acc + (tf0 * 64 + fold8 + 8));
    }
    for (int fold4 = 0; fold4 < 4; fold4 += 1) {
      acc[tf0 * 64 + fold4] = acc[tf0 * 64 + fold4] + acc[tf0 * 64 + fold4 + 4];
    }
    for (int fold2 = 0; fold2 < 2; fold2 += 1) {
      acc[tf0 * 64 + fold2] = acc[tf0 * 64 + fold2] + acc[tf0 * 64 + fold2 + 2];
    }
    for (int fold1 = 0; fold1 < 1; fold1 += 1) {
      acc[tf0 * 64 + fold1] = acc[tf0 * 64 + fold1] + acc[tf0 * 64 + fold1 + 1];
    }
  }
  for (int tw0 = 0; tw0 < 2; tw0 += 1) {
    int p__ = base0 + tw0;
    float v_P0 = acc[tw0 * 64];
    out0[p__] = v_P0;
  }
}

// O = +(_P0[p, ...])
//   output  (0-D)
//   reduce  p: 16
//   O    offset 0  strides -
//   _P0  offset 0  strides p: 1
// tile_0: contraction, global (1, 1, 1), local (1, 1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void tile_0(__global float* restrict out0, __global const float* restrict in0) {
  float acc[8];
  #pragma unroll
  for (int acc_fill = 0; acc_fill < 8; acc_fill += 1) acc[acc_fill] = 0.0f;
  #pragma unroll
  for (int p = 0; p < 2; p += 1) {
    #pragma unroll
    for (int lane_vector = 0; lane_vector < 1; lane_vector += 1) {
      int lane = lane_vector * 8;
      *(tile_unaligned_float8*)(acc + (lane)) = *(const tile_unaligned_float8*)(acc + (lane)) + *(__global const tile_unaligned_float8*)(in0 + (p * 8 + lane));
    }
  }
  {
    #pragma unroll
    for (int fold4 = 0; fold4 < 4; fold4 += 1) {
      acc[fold4] = acc[fold4] + acc[fold4 + 4];
    }
    #pragma unroll
    for (int fold2 = 0; fold2 < 2; fold2 += 1) {
      acc[fold2] = acc[fold2] + acc[fold2 + 2];
    }
    #pragma unroll
    for (int fold1 = 0; fold1 < 1; fold1 += 1) {
      acc[fold1] = acc[fold1] + acc[fold1 + 1];
    }
  }
  {
    float vO = acc[0];
    out0[0] = vO;
  }
}
