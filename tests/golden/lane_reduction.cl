// OpenCL C for 1 kernel(s): tile_0

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
  for (int acc_fill = 0; acc_fill < 64; acc_fill += 1) acc[acc_fill] = -INFINITY;
  for (int n = 0; n < 2; n += 1) {
    int m = base0;
    for (int lane = 0; lane < 64; lane += 1) {
      acc[lane] = fmax(acc[lane], in0[m * 128 + (n * 64 + lane)]);
    }
  }
  {
    int m_ = base0;
    for (int fold = 0; fold < 32; fold += 1) {
      acc[fold] = fmax(acc[fold], acc[fold + 32]);
    }
    for (int fold_ = 0; fold_ < 16; fold_ += 1) {
      acc[fold_] = fmax(acc[fold_], acc[fold_ + 16]);
    }
    for (int fold__ = 0; fold__ < 8; fold__ += 1) {
      acc[fold__] = fmax(acc[fold__], acc[fold__ + 8]);
    }
    for (int fold___ = 0; fold___ < 4; fold___ += 1) {
      acc[fold___] = fmax(acc[fold___], acc[fold___ + 4]);
    }
    for (int fold____ = 0; fold____ < 2; fold____ += 1) {
      acc[fold____] = fmax(acc[fold____], acc[fold____ + 2]);
    }
    for (int fold_____ = 0; fold_____ < 1; fold_____ += 1) {
      acc[fold_____] = fmax(acc[fold_____], acc[fold_____ + 1]);
    }
  }
  {
    int m__ = base0;
    float vO = acc[0];
    out0[m__] = vO;
  }
}
