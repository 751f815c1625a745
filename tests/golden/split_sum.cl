// OpenCL C for 2 kernel(s): tile_0_part, tile_0

// O[] = +(X[i])  (part p of 16)
//   output  p: 16
//   reduce  i: 128
//   _P0  offset 0  strides p: 1
//   X    offset 0  strides p: 128  i: 1
// tile_0_part: contraction, global (16, 1, 1), local (1, 1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void tile_0_part(__global float* restrict out0, __global const float* restrict in0) {
  int group = (int)get_group_id(0);
  int base0 = group;
  float acc[64];
  for (int acc_fill = 0; acc_fill < 64; acc_fill += 1) acc[acc_fill] = 0.0f;
  for (int i = 0; i < 2; i += 1) {
    int p = base0;
    for (int lane = 0; lane < 64; lane += 1) {
      acc[lane] = acc[lane] + in0[p * 128 + (i * 64 + lane)];
    }
  }
  {
    int p_ = base0;
    for (int fold = 0; fold < 32; fold += 1) {
      acc[fold] = acc[fold] + acc[fold + 32];
    }
    for (int fold_ = 0; fold_ < 16; fold_ += 1) {
      acc[fold_] = acc[fold_] + acc[fold_ + 16];
    }
    for (int fold__ = 0; fold__ < 8; fold__ += 1) {
      acc[fold__] = acc[fold__] + acc[fold__ + 8];
    }
    for (int fold___ = 0; fold___ < 4; fold___ += 1) {
      acc[fold___] = acc[fold___] + acc[fold___ + 4];
    }
    for (int fold____ = 0; fold____ < 2; fold____ += 1) {
      acc[fold____] = acc[fold____] + acc[fold____ + 2];
    }
    for (int fold_____ = 0; fold_____ < 1; fold_____ += 1) {
      acc[fold_____] = acc[fold_____] + acc[fold_____ + 1];
    }
  }
  {
    int p__ = base0;
    float v_P0 = acc[0];
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
  for (int acc_fill = 0; acc_fill < 8; acc_fill += 1) acc[acc_fill] = 0.0f;
  for (int p = 0; p < 2; p += 1) {
    for (int lane = 0; lane < 8; lane += 1) {
      acc[lane] = acc[lane] + in0[p * 8 + lane];
    }
  }
  {
    for (int fold = 0; fold < 4; fold += 1) {
      acc[fold] = acc[fold] + acc[fold + 4];
    }
    for (int fold_ = 0; fold_ < 2; fold_ += 1) {
      acc[fold_] = acc[fold_] + acc[fold_ + 2];
    }
    for (int fold__ = 0; fold__ < 1; fold__ += 1) {
      acc[fold__] = acc[fold__] + acc[fold__ + 1];
    }
  }
  {
    float vO = acc[0];
    out0[0] = vO;
  }
}
