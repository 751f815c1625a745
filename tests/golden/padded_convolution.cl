// OpenCL C for 1 kernel(s): tile_0

// min(a, b)
int tile_min_int(int a, int b) {
  return a < b ? a : b;
}

// O[n, y, x, co: 1, 5, 9, 16] = +(I[n, i + y - 1, j + x - 1, ci] * K[i, j, ci, co])
//   output  n: 1  y: 5  x: 9  co: 16
//   reduce  i: 3  j: 3  ci: 3
//   O  offset 0  strides n: 720  y: 144  x: 16  co: 1
//   I  offset -30  strides n: 135  y: 27  x: 3  i: 27  j: 3  ci: 1
//   K  offset 0  strides co: 1  i: 144  j: 48  ci: 16
//   guard   y + i >= 1
//   guard   y + i <= 5
//   guard   x + j >= 1
//   guard   x + j <= 9
// tile_0: contraction, global (25, 1, 1), local (1, 1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void tile_0(__global float8* restrict out0, __global const float* restrict in0, __global const float8* restrict in1) {
  int group = (int)get_group_id(0);
  int n = group / 25;
  int y = group / 5 % 5;
  int jt = group % 5 % 1;
  int it = group % 5;
  float8 acc[4];
  #pragma unroll
  for (int acc_fill = 0; acc_fill < 4; acc_fill += 1) acc[acc_fill] = (float8)(0.0f);
  float8 b_row[2];
  for (int i = 0; i < 3; i += 1) {
    if (y * -1 + i * -1 <= -1 && y * 1 + i * 1 <= 5) {
      for (int j = 0; j < 3; j += 1) {
        if (it * 2 * -1 + j * -1 <= -1 && tile_min_int(it * 2 + 1, 8) * -1 + j * -1 <= -1 && it * 2 * 1 + j * 1 <= 9 && tile_min_int(it * 2 + 1, 8) * 1 + j * 1 <= 9) {
          #pragma unroll
          for (int ci = 0; ci < 3; ci += 1) {
            #pragma unroll
            for (int v = 0; v < 2; v += 1) {
              b_row[v] = in1[i * 18 + j * 6 + ci * 2 + (jt * 2 + v)];
            }
            #pragma unroll
            for (int r = 0; r < 2; r += 1) {
              float a_value = in0[n * 135 + y * 27 + tile_min_int(it * 2 + r, 8) * 3 + i * 27 + j * 3 + ci + -30];
              #pragma unroll
              for (int v = 0; v < 2; v += 1) {
                acc[r * 2 + v] = (float8)(a_value) * b_row[v] + acc[r * 2 + v];
              }
            }
          }
        } else {
          #pragma unroll
          for (int ci = 0; ci < 3; ci += 1) {
            #pragma unroll
            for (int v = 0; v < 2; v += 1) {
              b_row[v] = in1[i * 18 + j * 6 + ci * 2 + (jt * 2 + v)];
            }
            #pragma unroll
            for (int r = 0; r < 2; r += 1) {
              if (tile_min_int(it * 2 + r, 8) * -1 + j * -1 <= -1 && tile_min_int(it * 2 + r, 8) * 1 + j * 1 <= 9) {
                float a_value = in0[n * 135 + y * 27 + tile_min_int(it * 2 + r, 8) * 3 + i * 27 + j * 3 + ci + -30];
                #pragma unroll
                for (int v = 0; v < 2; v += 1) {
                  acc[r * 2 + v] = (float8)(a_value) * b_row[v] + acc[r * 2 + v];
                }
              }
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < 2; r += 1) {
    if (it * 2 + r < 9) {
      #pragma unroll
      for (int v = 0; v < 2; v += 1) {
        out0[n * 90 + y * 18 + (it * 2 + r) * 2 + (jt * 2 + v)] = acc[r * 2 + v];
      }
    }
  }
}
