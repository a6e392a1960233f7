// Batch normalization on the GPU, NCHW fp32, training step (forward with batch statistics and
// backward with the scale/bias gradients): cuDNN's legacy API (SPATIAL, SPATIAL_PERSISTENT)
// against the fused kernels of caffe_patch/0009 (a copy of them, kept equal by hand: this is a
// measuring tool, not a second home of the layer; it lacks that patch's finishing kernels of a
// warp per channel). For each of ResNet-18's BatchNorm shapes at
// a batch of N: median times (CUDA events) and the largest error of y, dx, dscale, dbias and
// the batch statistics against a double-precision computation of the same formulas.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/bench_bn scripts/bench_batchnorm.cu -lcudnn
//   /tmp/bench_bn [N]        (prints CSV on stdout, a summary line on stderr)
#include <cudnn.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define DK(x) do { cudnnStatus_t e = (x); if (e != CUDNN_STATUS_SUCCESS) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudnnGetErrorString(e)); exit(1); } } while (0)

// ---- the fused kernels (as in caffe_patch/0009, cudnn_batch_norm_layer.cu) ----------------
static const int kThreads = 256;

// W values of T loaded or stored as one (16-byte) access
template <typename T, int W>
struct alignas(sizeof(T) * W) Pack { T v[W]; };

__device__ double BlockSum(double v, double* smem) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? smem[threadIdx.x] : 0;
  if (warp == 0) for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Per (channel c = blockIdx.x, split s = blockIdx.y): over samples [n0, n1) (a warp per sample
// row, W values per load), the sums of a and a*a (b == NULL), or of b and b*(a - shift[c]);
// double accumulators. part[c][s] = {sum1, sum2}.
template <typename T, int W>
__global__ void PartialSums(const T* a, const T* b, const T* shift, int num, int channels,
                            int spatial, double* part) {
  __shared__ double smem[32];
  const int c = blockIdx.x, s = blockIdx.y, splits = gridDim.y;
  const int n0 = (long long)s * num / splits, n1 = (long long)(s + 1) * num / splits;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int packs = spatial / W;
  const double m = shift ? shift[c] : 0;
  double s1 = 0, s2 = 0;
  for (int n = n0 + warp; n < n1; n += warps) {
    const size_t off = ((size_t)n * channels + c) * spatial;
    const Pack<T, W>* pa = reinterpret_cast<const Pack<T, W>*>(a + off);
    if (b) {
      const Pack<T, W>* pb = reinterpret_cast<const Pack<T, W>*>(b + off);
      for (int k = lane; k < packs; k += 32) {
        const Pack<T, W> va = pa[k], vb = pb[k];
#pragma unroll
        for (int w = 0; w < W; ++w) { const double d = vb.v[w]; s1 += d; s2 += d * (va.v[w] - m); }
      }
    } else {
      for (int k = lane; k < packs; k += 32) {
        const Pack<T, W> va = pa[k];
#pragma unroll
        for (int w = 0; w < W; ++w) { const double x = va.v[w]; s1 += x; s2 += x * x; }
      }
    }
  }
  s1 = BlockSum(s1, smem);
  s2 = BlockSum(s2, smem);
  if (threadIdx.x == 0) {
    part[(c * splits + s) * 2] = s1;
    part[(c * splits + s) * 2 + 1] = s2;
  }
}

// forward statistics: mean, 1/sqrt(var + eps), the unbiased variance; one thread per channel
template <typename T>
__global__ void FinishStats(const double* part, int splits, int channels, long long m,
                            double eps, T* mean, T* inv_std, T* var_unbiased) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s1 = 0, s2 = 0;
  for (int s = 0; s < splits; ++s) { s1 += part[(c * splits + s) * 2]; s2 += part[(c * splits + s) * 2 + 1]; }
  const double mu = s1 / m;
  const double var = fmax(s2 / m - mu * mu, 0.0);
  mean[c] = mu;
  inv_std[c] = 1.0 / sqrt(var + eps);
  var_unbiased[c] = var * m / (m - 1);
}

// y = (x - mean) * scale * inv_std + bias; a warp per (n, c) row
template <typename T, int W>
__global__ void Normalize(int rows, int channels, int spatial, const T* x, const T* mean,
                          const T* inv_std, const T* scale, const T* bias, T* y) {
  const int lane = threadIdx.x % 32, packs = spatial / W;
  const int stride = gridDim.x * (blockDim.x / 32);
  for (int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += stride) {
    const int c = r % channels;
    const T m = mean[c], k = scale[c] * inv_std[c], b = bias[c];
    const Pack<T, W>* px = reinterpret_cast<const Pack<T, W>*>(x + (size_t)r * spatial);
    Pack<T, W>* py = reinterpret_cast<Pack<T, W>*>(y + (size_t)r * spatial);
    for (int i = lane; i < packs; i += 32) {
      Pack<T, W> v = px[i];
#pragma unroll
      for (int w = 0; w < W; ++w) v.v[w] = (v.v[w] - m) * k + b;
      py[i] = v;
    }
  }
}

// backward coefficients: dx = (dy - sum_dy/m) * k1 - (x - mean) * k2; parameter diffs added
template <typename T>
__global__ void FinishBackward(const double* part, int splits, int channels, long long m,
                               const T* inv_std, const T* scale, T* dscale, T* dbias,
                               T* k1, T* k2, T* mean_dy) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s1 = 0, s2 = 0;
  for (int s = 0; s < splits; ++s) { s1 += part[(c * splits + s) * 2]; s2 += part[(c * splits + s) * 2 + 1]; }
  const double is = inv_std[c];
  dscale[c] += s2 * is;
  dbias[c] += s1;
  k1[c] = scale[c] * is;
  k2[c] = scale[c] * is * is * is * s2 / m;
  mean_dy[c] = s1 / m;
}

// dx may be dy (elementwise)
template <typename T, int W>
__global__ void BackwardDx(int rows, int channels, int spatial, const T* x, const T* dy,
                           const T* mean, const T* k1, const T* k2, const T* mean_dy, T* dx) {
  const int lane = threadIdx.x % 32, packs = spatial / W;
  const int stride = gridDim.x * (blockDim.x / 32);
  for (int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += stride) {
    const int c = r % channels;
    const T m = mean[c], a = k1[c], b = k2[c], d = mean_dy[c];
    const Pack<T, W>* px = reinterpret_cast<const Pack<T, W>*>(x + (size_t)r * spatial);
    const Pack<T, W>* pdy = reinterpret_cast<const Pack<T, W>*>(dy + (size_t)r * spatial);
    Pack<T, W>* pdx = reinterpret_cast<Pack<T, W>*>(dx + (size_t)r * spatial);
    for (int i = lane; i < packs; i += 32) {
      const Pack<T, W> vx = px[i];
      Pack<T, W> v = pdy[i];
#pragma unroll
      for (int w = 0; w < W; ++w) v.v[w] = (v.v[w] - d) * a - (vx.v[w] - m) * b;
      pdx[i] = v;
    }
  }
}

static int Splits(int num, int channels, int sms) {
  // about 8 blocks per multiprocessor, and at least 8 rows (one per warp) per block
  return std::max(1, std::min(num / 8, (8 * sms + channels - 1) / channels));
}
static int RowBlocks(int rows, int sms) {
  return std::max(1, std::min((rows + kThreads / 32 - 1) / (kThreads / 32), 16 * sms));
}
// the widest W (16 bytes) that the rows and every pointer allow
template <typename T>
static int Width(int spatial, std::initializer_list<const void*> ptrs) {
  const int w = 16 / sizeof(T);
  if (spatial % w) return 1;
  for (const void* p : ptrs) if (reinterpret_cast<size_t>(p) % 16) return 1;
  return w;
}

template <typename T>
struct Fused {
  int num, channels, spatial, sms, splits;
  double* part;
  T *mean, *inv_std, *var_u, *k1, *k2, *mdy;
  Fused(int n, int c, int s, int sm) : num(n), channels(c), spatial(s), sms(sm) {
    splits = Splits(n, c, sm);
    CK(cudaMalloc(&part, sizeof(double) * 2 * c * splits));
    T** bufs[] = {&mean, &inv_std, &var_u, &k1, &k2, &mdy};
    for (T** b : bufs) CK(cudaMalloc(b, sizeof(T) * c));
  }
  void Forward(const T* x, T* y, const T* scale, const T* bias, double eps) {
    const long long m = (long long)num * spatial;
    const int rows = num * channels;
    const dim3 grid(channels, splits);
    const int V = 16 / sizeof(T);
    if (Width<T>(spatial, {x, y}) == V) {
      PartialSums<T, V><<<grid, kThreads>>>(x, (const T*)nullptr, (const T*)nullptr, num, channels, spatial, part);
    } else {
      PartialSums<T, 1><<<grid, kThreads>>>(x, (const T*)nullptr, (const T*)nullptr, num, channels, spatial, part);
    }
    FinishStats<T><<<(channels + 127) / 128, 128>>>(part, splits, channels, m, eps, mean, inv_std, var_u);
    if (Width<T>(spatial, {x, y}) == V) {
      Normalize<T, V><<<RowBlocks(rows, sms), kThreads>>>(rows, channels, spatial, x, mean, inv_std, scale, bias, y);
    } else {
      Normalize<T, 1><<<RowBlocks(rows, sms), kThreads>>>(rows, channels, spatial, x, mean, inv_std, scale, bias, y);
    }
  }
  void Backward(const T* x, const T* dy, T* dx, const T* scale, T* dscale, T* dbias) {
    const long long m = (long long)num * spatial;
    const int rows = num * channels;
    const dim3 grid(channels, splits);
    const int V = 16 / sizeof(T);
    const bool wide = Width<T>(spatial, {x, dy, dx}) == V;
    if (wide) {
      PartialSums<T, V><<<grid, kThreads>>>(x, dy, mean, num, channels, spatial, part);
    } else {
      PartialSums<T, 1><<<grid, kThreads>>>(x, dy, mean, num, channels, spatial, part);
    }
    FinishBackward<T><<<(channels + 127) / 128, 128>>>(part, splits, channels, m, inv_std, scale,
                                                      dscale, dbias, k1, k2, mdy);
    if (wide) {
      BackwardDx<T, V><<<RowBlocks(rows, sms), kThreads>>>(rows, channels, spatial, x, dy, mean, k1, k2, mdy, dx);
    } else {
      BackwardDx<T, 1><<<RowBlocks(rows, sms), kThreads>>>(rows, channels, spatial, x, dy, mean, k1, k2, mdy, dx);
    }
  }
};

// ---- measuring -----------------------------------------------------------------------------
__global__ void ToDouble(long long n, const float* a, double* b) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) b[i] = a[i];
}

static std::vector<float> Get(const float* d, size_t n) {
  std::vector<float> h(n); CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost)); return h;
}
static std::vector<double> GetD(const double* d, size_t n) {
  std::vector<double> h(n); CK(cudaMemcpy(h.data(), d, n * 8, cudaMemcpyDeviceToHost)); return h;
}
// largest |a - ref| / (largest |ref|)
static double RelErr(const std::vector<float>& a, const std::vector<double>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) { e = std::max(e, std::fabs(a[i] - ref[i])); r = std::max(r, std::fabs(ref[i])); }
  return e / std::max(r, 1e-30);
}

template <typename F>
static double MedianMs(F f, int iters) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> t;
  f(); CK(cudaDeviceSynchronize());
  for (int k = 0; k < iters; ++k) {
    CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 256;
  const double eps = 1e-5;
  struct Shape { int c, h, count; } shapes[] = {{64, 112, 1}, {64, 56, 4}, {128, 28, 5}, {256, 14, 5}, {512, 7, 5}};
  int dev; CK(cudaGetDevice(&dev));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  cudnnHandle_t h; DK(cudnnCreate(&h));
  printf("N,C,H,W,layers,method,fwd_ms,bwd_ms,err_y,err_dx,err_dscale,err_dbias,err_mean,err_var\n");
  double total[3][2] = {{0}};
  double worst[3] = {0};
  const char* names[3] = {"cudnn_spatial", "cudnn_persistent", "fused"};
  for (const Shape& sh : shapes) {
    const int C = sh.c, H = sh.h, W = sh.h;
    const long long count = (long long)N * C * H * W;
    float *x, *y, *dy, *dx, *sc, *bi, *dsc, *dbi, *rm, *rv, *smean, *sinv;
    float** fb[] = {&x, &y, &dy, &dx};
    for (float** b : fb) CK(cudaMalloc(b, count * 4));
    float** pb[] = {&sc, &bi, &dsc, &dbi, &rm, &rv, &smean, &sinv};
    for (float** b : pb) CK(cudaMalloc(b, C * 4));
    // inputs: x with a channel offset (mean 0.5*c/C, sd ~1), dy, scale, bias; fixed host seed
    {
      std::vector<float> hx(count), hdy(count), hs(C), hb(C);
      unsigned s = 12345u;
      auto rnd = [&s]() { s = s * 1664525u + 1013904223u; return (s >> 8) * (1.0f / 16777216.0f) - 0.5f; };
      for (long long i = 0; i < count; ++i) { const int c = (i / (H * W)) % C; hx[i] = 3.4f * rnd() + 0.5f * c / C; hdy[i] = 0.01f * rnd(); }
      for (int c = 0; c < C; ++c) { hs[c] = 1.0f + 0.5f * rnd(); hb[c] = 0.1f * rnd(); }
      CK(cudaMemcpy(x, hx.data(), count * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dy, hdy.data(), count * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(sc, hs.data(), C * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(bi, hb.data(), C * 4, cudaMemcpyHostToDevice));
    }
    // the double reference (the fused formulas in double: exact enough to judge all three)
    double *xd, *yd, *dyd, *dxd, *scd, *bid, *dscd, *dbid;
    double** db[] = {&xd, &yd, &dyd, &dxd};
    for (double** b : db) CK(cudaMalloc(b, count * 8));
    double** dpb[] = {&scd, &bid, &dscd, &dbid};
    for (double** b : dpb) CK(cudaMalloc(b, C * 8));
    ToDouble<<<1024, 256>>>(count, x, xd); ToDouble<<<1024, 256>>>(count, dy, dyd);
    ToDouble<<<1, 256>>>(C, sc, scd); ToDouble<<<1, 256>>>(C, bi, bid);
    CK(cudaMemset(dscd, 0, C * 8)); CK(cudaMemset(dbid, 0, C * 8));
    Fused<double> ref(N, C, H * W, sms);
    ref.Forward(xd, yd, scd, bid, eps);
    ref.Backward(xd, dyd, dxd, scd, dscd, dbid);
    CK(cudaDeviceSynchronize());
    const std::vector<double> ry = GetD(yd, count), rdx = GetD(dxd, count), rds = GetD(dscd, C),
        rdb = GetD(dbid, C), rmean = GetD(ref.mean, C), rvar = GetD(ref.var_u, C);
    for (double** b : db) CK(cudaFree(*b));
    cudnnTensorDescriptor_t xdesc, pdesc;
    DK(cudnnCreateTensorDescriptor(&xdesc)); DK(cudnnCreateTensorDescriptor(&pdesc));
    DK(cudnnSetTensor4dDescriptor(xdesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    Fused<float> fused(N, C, H * W, sms);
    for (int method = 0; method < 3; ++method) {
      const cudnnBatchNormMode_t mode = method == 1 ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
      if (method < 2) DK(cudnnDeriveBNTensorDescriptor(pdesc, xdesc, mode));
      const float one = 1, zero = 0;
      auto fwd = [&]() {
        if (method < 2) {
          DK(cudnnBatchNormalizationForwardTraining(h, mode, &one, &zero, xdesc, x, xdesc, y, pdesc, sc, bi,
                                                    1.0, rm, rv, eps, smean, sinv));
        } else {
          fused.Forward(x, y, sc, bi, eps);
        }
      };
      auto bwd = [&]() {
        if (method < 2) {
          DK(cudnnBatchNormalizationBackward(h, mode, &one, &zero, &one, &one, xdesc, x, xdesc, dy, xdesc, dx,
                                             pdesc, sc, dsc, dbi, eps, smean, sinv));
        } else {
          fused.Backward(x, dy, dx, sc, dsc, dbi);
        }
      };
      // accuracy: one forward and one backward from zeroed parameter diffs
      CK(cudaMemset(dsc, 0, C * 4)); CK(cudaMemset(dbi, 0, C * 4));
      fwd(); bwd(); CK(cudaDeviceSynchronize());
      const float* mean_out = method < 2 ? rm : fused.mean;
      const float* var_out = method < 2 ? rv : fused.var_u;
      const double e[6] = {RelErr(Get(y, count), ry), RelErr(Get(dx, count), rdx), RelErr(Get(dsc, C), rds),
                           RelErr(Get(dbi, C), rdb), RelErr(Get(mean_out, C), rmean), RelErr(Get(var_out, C), rvar)};
      const double tf = MedianMs(fwd, 25), tb = MedianMs(bwd, 25);
      printf("%d,%d,%d,%d,%d,%s,%.4f,%.4f", N, C, H, W, sh.count, names[method], tf, tb);
      for (double v : e) { printf(",%.3g", v); worst[method] = std::max(worst[method], v); }
      printf("\n");
      total[method][0] += sh.count * tf;
      total[method][1] += sh.count * tb;
    }
    for (float** b : fb) CK(cudaFree(*b));
    for (float** b : pb) CK(cudaFree(*b));
    for (double** b : dpb) CK(cudaFree(*b));
  }
  for (int m = 0; m < 3; ++m) {
    fprintf(stderr, "resnet18 N=%d %s: forward %.2f ms, backward %.2f ms, total %.2f ms, worst rel. error %.2g\n",
            N, names[m], total[m][0], total[m][1], total[m][0] + total[m][1], worst[m]);
  }
  return 0;
}
