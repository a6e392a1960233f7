// Which fusions of a convolution with batch normalisation's passes cuDNN's graph API offers on
// this GPU, in which precision, and what they cost beside the convolution alone.
//
// A BatchNorm after a convolution reads the convolution's output once for its statistics and
// once more to normalise it; its backward reads it again. cuDNN's graph API can fold some of
// those passes into the convolution: the statistics gathered while the convolution writes its
// output (genstats), the previous layer's normalisation and ReLU applied while the convolution
// reads its input (a scale-bias-relu prologue), and the same prologue before the weight
// gradient. Whether an engine exists for such a graph depends on the GPU, the cuDNN version
// and the data type; this tool asks, for NHWC tensors of the shapes given:
//
//   conv        y = conv(x, w)                                    (the reference)
//   wgrad       dw = wgrad(x, dy)                                 (the reference)
//   conv+stats  y = conv(x, w); sum, sqsum of y per channel
//   sbr+conv    y = conv(relu(x * scale + bias), w); sum, sqsum of y per channel
//   sbr+wgrad   dw = wgrad(relu(x * scale + bias), dy)
//
// For each graph: the engine configs heuristics modes A and FALLBACK propose (the first K
// distinct ones, by engine and knob choices, are built), which of them finalise into a plan (runtime-compiled engines compile here), each built plan's median time
// (CUDA events, back-to-back runs after a warm-up) and its largest error against the
// reference computed by the unfused graphs' fastest plan on the same inputs (the prologue done
// by a plain kernel first; the statistics summed on the host in double), relative to the
// largest reference value. One JSON object per line on stdout; a summary line per shape on
// stderr. Not part of the product: it tells which fusions the layers could use.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/probe scripts/probe_conv_fusions.cu -lcudnn
//   (with PyTorch's cuDNN wheel: -I$R/include -L$R/lib -l:libcudnn.so.9 -Xlinker -rpath=$R/lib,
//   R=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])'))
//   /tmp/probe [--dtype float|half] [--builds K] [--seconds S] [SHAPE ...]
//
// SHAPE is N,C,H,W,K,R,stride (square filter, padding R/2); the default shapes are ResNet-50's
// bottleneck convolutions at batch 128 and ResNet-18's 3x3 ones at batch 256.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

// ---- inputs ---------------------------------------------------------------------------------

__device__ float Hash01(unsigned i, unsigned seed) {      // a deterministic value in [0, 1)
  unsigned h = i * 2654435761u ^ (seed * 0x9E3779B9u);
  h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
  return (h >> 8) * (1.0f / 16777216.0f);
}

template <typename T>
__global__ void Fill(T* p, size_t n, unsigned seed, float lo, float hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (T)(lo + (hi - lo) * Hash01((unsigned)i, seed));
}

// relu(x * scale[c] + bias[c]) over an NHWC tensor of C channels: the unfused prologue
template <typename T>
__global__ void ScaleBiasRelu(const T* x, const float* scale, const float* bias, T* out, size_t n, int C) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int c = (int)(i % C);
    out[i] = (T)fmaxf((float)x[i] * scale[c] + bias[c], 0.0f);
  }
}

template <typename T>
static void FillDev(T* p, size_t n, unsigned seed, float lo, float hi) {
  Fill<T><<<1024, 256>>>(p, n, seed, lo, hi);
  CK(cudaGetLastError());
}

static double ToDouble(float v) { return v; }
static double ToDouble(__half v) { return __half2float(v); }

// ---- graphs ---------------------------------------------------------------------------------

// Every descriptor of one graph, destroyed together.
struct Graph {
  std::vector<cudnnBackendDescriptor_t> owned;
  cudnnBackendDescriptor_t opgraph = nullptr;
  std::vector<int64_t> uids;           // the tensors a variant pack names
  std::string error;
  ~Graph() { for (auto d : owned) cudnnBackendDestroyDescriptor(d); }
  cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = nullptr;
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) return nullptr;
    owned.push_back(d);
    return d;
  }
};

#define GT(call, what) do { cudnnStatus_t s_ = (call); if (s_ != CUDNN_STATUS_SUCCESS) { \
  if (g.error.empty()) g.error = std::string(what) + ": " + cudnnGetErrorString(s_); return nullptr; } } while (0)

enum { X = 1, W = 2, Y = 3, SUM = 4, SQSUM = 5, SCALE = 6, BIAS = 7, DY = 8, DW = 9 };

struct Shape { int n, c, h, w, k, r, stride; int p() const { return r / 2; }
  int oh() const { return (h + 2 * p() - r) / stride + 1; } int ow() const { return (w + 2 * p() - r) / stride + 1; } };

// An NHWC tensor (dims in NCHW order), or per-channel when h = w = n = 1.
static cudnnBackendDescriptor_t Tensor(Graph& g, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                                       int64_t h, int64_t w, bool is_virtual) {
  int64_t dim[4] = {n, c, h, w}, str[4] = {h * w * c, 1, w * c, c}, align = 16;
  cudnnBackendDescriptor_t t = g.Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  GT(t ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED, "tensor");
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt), "tensor type");
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim), "tensor dims");
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str), "tensor strides");
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), "tensor uid");
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), "tensor align");
  bool v = is_virtual;
  GT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v), "tensor virtual");
  GT(cudnnBackendFinalize(t), "tensor finalize");
  if (!is_virtual) g.uids.push_back(uid);
  return t;
}

static cudnnBackendDescriptor_t Pointwise(Graph& g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t pw = g.Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  GT(pw ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED, "pointwise");
  GT(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode), "pw mode");
  GT(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec), "pw prec");
  GT(cudnnBackendFinalize(pw), "pw finalize");
  cudnnBackendDescriptor_t op = g.Make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  GT(op ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED, "pointwise op");
  GT(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw), "pw op desc");
  GT(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x), "pw op x");
  if (b) GT(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b), "pw op b");
  GT(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y), "pw op y");
  GT(cudnnBackendFinalize(op), "pw op finalize");
  return op;
}

// relu(x * scale + bias) into a virtual tensor; the ops are appended to ops.
static cudnnBackendDescriptor_t Prologue(Graph& g, cudnnBackendDescriptor_t x, const Shape& s, cudnnDataType_t dt,
                                         std::vector<cudnnBackendDescriptor_t>& ops) {
  auto scale = Tensor(g, SCALE, CUDNN_DATA_FLOAT, 1, s.c, 1, 1, false);
  auto bias = Tensor(g, BIAS, CUDNN_DATA_FLOAT, 1, s.c, 1, 1, false);
  auto t1 = Tensor(g, 101, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w, true);
  auto t2 = Tensor(g, 102, CUDNN_DATA_FLOAT, s.n, s.c, s.h, s.w, true);
  auto t3 = Tensor(g, 103, dt, s.n, s.c, s.h, s.w, true);
  if (!scale || !bias || !t1 || !t2 || !t3) return nullptr;
  ops.push_back(Pointwise(g, CUDNN_POINTWISE_MUL, x, scale, t1));
  ops.push_back(Pointwise(g, CUDNN_POINTWISE_ADD, t1, bias, t2));
  ops.push_back(Pointwise(g, CUDNN_POINTWISE_RELU_FWD, t2, nullptr, t3));
  for (auto op : ops) if (!op) return nullptr;
  return t3;
}

enum Kind { CONV, WGRAD, CONV_STATS, SBR_CONV, SBR_WGRAD, KINDS };
static const char* kKindName[KINDS] = {"conv", "wgrad", "conv+stats", "sbr+conv", "sbr+wgrad"};

static bool BuildGraph(cudnnHandle_t h, Graph& g, Kind kind, const Shape& s, cudnnDataType_t dt) {
  std::vector<cudnnBackendDescriptor_t> ops;
  const bool prologue = kind == SBR_CONV || kind == SBR_WGRAD, wgrad = kind == WGRAD || kind == SBR_WGRAD;
  cudnnBackendDescriptor_t x = Tensor(g, X, dt, s.n, s.c, s.h, s.w, false);
  cudnnBackendDescriptor_t w = Tensor(g, wgrad ? DW : W, dt, s.k, s.c, s.r, s.r, false);
  cudnnBackendDescriptor_t y = Tensor(g, wgrad ? DY : Y, dt, s.n, s.k, s.oh(), s.ow(), false);
  if (!x || !w || !y) return false;
  cudnnBackendDescriptor_t in = prologue ? Prologue(g, x, s, dt, ops) : x;
  if (!in) return false;

  int64_t spatial = 2, pad[2] = {s.p(), s.p()}, stride[2] = {s.stride, s.stride}, dil[2] = {1, 1};
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnBackendDescriptor_t conv = g.Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  if (!conv) return false;
  if (cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride) ||
      cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
      cudnnBackendFinalize(conv)) {
    g.error = "convolution descriptor";
    return false;
  }
  float alpha = 1.0f, beta = 0.0f;
  cudnnBackendDescriptor_t op = g.Make(wgrad ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
                                             : CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  if (!op) return false;
  cudnnStatus_t st;
  if (wgrad) {
    st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  } else {
    st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    if (!st) st = cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  }
  if (!st) st = cudnnBackendFinalize(op);
  if (st) { g.error = std::string("convolution op: ") + cudnnGetErrorString(st); return false; }
  ops.push_back(op);

  if (kind == CONV_STATS || kind == SBR_CONV) {
    auto sum = Tensor(g, SUM, CUDNN_DATA_FLOAT, 1, s.k, 1, 1, false);
    auto sq = Tensor(g, SQSUM, CUDNN_DATA_FLOAT, 1, s.k, 1, 1, false);
    cudnnBackendDescriptor_t gs = g.Make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (!sum || !sq || !gs) return false;
    st = cudnnBackendSetAttribute(gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm);
    if (!st) st = cudnnBackendSetAttribute(gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (!st) st = cudnnBackendSetAttribute(gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    if (!st) st = cudnnBackendSetAttribute(gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    if (!st) st = cudnnBackendSetAttribute(gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
    if (!st) st = cudnnBackendFinalize(gs);
    if (st) { g.error = std::string("genstats op: ") + cudnnGetErrorString(st); return false; }
    ops.push_back(gs);
  }
  g.opgraph = g.Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (!g.opgraph) return false;
  st = cudnnBackendSetAttribute(g.opgraph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops.size(), ops.data());
  if (!st) st = cudnnBackendSetAttribute(g.opgraph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (!st) st = cudnnBackendFinalize(g.opgraph);
  if (st) { g.error = std::string("operation graph: ") + cudnnGetErrorString(st); return false; }
  return true;
}

// ---- engine configs and plans ----------------------------------------------------------------

struct Plan {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t engine = -1, ws = 0;
  bool tensor_core = false, runtime_compiled = false;
  std::string knobs;
};

// The heuristics' engine configs (modes A, then FALLBACK); the caller destroys them.
static std::vector<cudnnBackendDescriptor_t> Configs(Graph& g, int* proposed) {
  std::vector<cudnnBackendDescriptor_t> out;
  *proposed = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t heur = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) continue;
    int64_t n = 0;
    if (!cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g.opgraph) &&
        !cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) &&
        !cudnnBackendFinalize(heur) &&
        !cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr)) {
      std::vector<cudnnBackendDescriptor_t> cfgs(n);
      for (auto& c : cfgs) cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c);
      int64_t got = 0;
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs.data());
      *proposed += (int)got;
      for (int64_t i = 0; i < n; ++i) (i < got ? out.push_back(cfgs[i]) : (void)cudnnBackendDestroyDescriptor(cfgs[i]));
    }
    cudnnBackendDestroyDescriptor(heur);
  }
  return out;
}

static bool BuildPlan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, Plan* p, std::string* err) {
  cudnnBackendDescriptor_t engine = nullptr;
  int64_t n = 0;
  if (!cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) &&
      !cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine)) {
    cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &p->engine);
    cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    if (!cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, nn))
      for (int64_t i = 0; i < n; ++i) p->tensor_core |= nn[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    if (!cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                  CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, bn))
      for (int64_t i = 0; i < n; ++i) p->runtime_compiled |= bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  if (engine) cudnnBackendDestroyDescriptor(engine);
  // the knob choices, "type=value" each: with the engine, what tells two configs apart
  std::vector<cudnnBackendDescriptor_t> knobs(CUDNN_KNOB_TYPE_COUNTS);
  for (auto& k : knobs) cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &k);
  n = 0;
  if (!cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                (int64_t)knobs.size(), &n, knobs.data()))
    for (int64_t i = 0; i < n; ++i) {
      cudnnBackendKnobType_t type;
      int64_t value = 0, got = 0;
      if (!cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &type) &&
          !cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &value))
        p->knobs += (p->knobs.empty() ? "" : " ") + std::to_string((int)type) + "=" + std::to_string(value);
    }
  for (auto k : knobs) cudnnBackendDestroyDescriptor(k);
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan);
  if (!st) st = cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (!st) st = cudnnBackendSetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
  if (!st) st = cudnnBackendFinalize(p->plan);
  if (!st) st = cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &p->ws);
  if (st) {
    *err = "engine " + std::to_string(p->engine) + ": " + cudnnGetErrorString(st);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    p->plan = nullptr;
    return false;
  }
  return true;
}

struct Buffers { void* ptr[10] = {}; void* ws = nullptr; size_t ws_bytes = 0; };

static cudnnStatus_t Execute(cudnnHandle_t h, const Plan& p, const Graph& g, Buffers& b) {
  std::vector<void*> ptrs;
  for (int64_t uid : g.uids) ptrs.push_back(b.ptr[uid]);
  cudnnBackendDescriptor_t vp = nullptr;
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (!st) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)g.uids.size(), g.uids.data());
  if (!st) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data());
  if (!st) st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b.ws);
  if (!st) st = cudnnBackendFinalize(vp);
  if (!st) st = cudnnBackendExecute(h, p.plan, vp);
  if (vp) cudnnBackendDestroyDescriptor(vp);
  return st;
}

static float MedianMs(cudnnHandle_t h, const Plan& p, const Graph& g, Buffers& b, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < reps + 2; ++i) {
    CK(cudaEventRecord(e0));
    if (Execute(h, p, g, b)) { t.clear(); break; }
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(ms);
  }
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  if (t.empty()) return -1;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---- one shape -------------------------------------------------------------------------------

template <typename T>
static std::vector<double> Host(const void* dev, size_t n) {
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ToDouble(h[i]);
  return out;
}

static double RelErr(const std::vector<double>& got, const std::vector<double>& ref) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) { mx = std::max(mx, std::fabs(ref[i])); err = std::max(err, std::fabs(got[i] - ref[i])); }
  for (double v : got) if (std::isnan(v)) return INFINITY;
  return mx > 0 ? err / mx : err;
}

struct Result { float best_ms = -1; int64_t engine = -1; double err = -1; };

template <typename T>
static void RunShape(cudnnHandle_t h, const Shape& s, cudnnDataType_t dt, const char* dtname, int builds,
                     double deadline_s, std::chrono::steady_clock::time_point t0) {
  const size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.k * s.c * s.r * s.r,
               ny = (size_t)s.n * s.k * s.oh() * s.ow();
  Buffers b;
  void *x_sbr, *ref_y, *ref_dw;
  CK(cudaMalloc(&b.ptr[X], nx * sizeof(T))); CK(cudaMalloc(&x_sbr, nx * sizeof(T)));
  CK(cudaMalloc(&b.ptr[W], nw * sizeof(T))); CK(cudaMalloc(&b.ptr[DW], nw * sizeof(T))); CK(cudaMalloc(&ref_dw, nw * sizeof(T)));
  CK(cudaMalloc(&b.ptr[Y], ny * sizeof(T))); CK(cudaMalloc(&b.ptr[DY], ny * sizeof(T))); CK(cudaMalloc(&ref_y, ny * sizeof(T)));
  CK(cudaMalloc(&b.ptr[SUM], s.k * sizeof(float))); CK(cudaMalloc(&b.ptr[SQSUM], s.k * sizeof(float)));
  CK(cudaMalloc(&b.ptr[SCALE], s.c * sizeof(float))); CK(cudaMalloc(&b.ptr[BIAS], s.c * sizeof(float)));
  b.ws_bytes = (size_t)1 << 30;
  CK(cudaMalloc(&b.ws, b.ws_bytes));
  FillDev((T*)b.ptr[X], nx, 1, -1.f, 1.f);
  FillDev((T*)b.ptr[W], nw, 2, -0.1f, 0.1f);
  FillDev((T*)b.ptr[DY], ny, 3, -1.f, 1.f);
  FillDev((float*)b.ptr[SCALE], s.c, 4, 0.5f, 1.5f);
  FillDev((float*)b.ptr[BIAS], s.c, 5, -0.5f, 0.5f);
  ScaleBiasRelu<T><<<1024, 256>>>((const T*)b.ptr[X], (const float*)b.ptr[SCALE], (const float*)b.ptr[BIAS], (T*)x_sbr, nx, s.c);
  CK(cudaDeviceSynchronize());

  // one pass over y (read and write), for the cost of a separate pass
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> copies;
  for (int i = 0; i < 7; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(ref_y, b.ptr[Y], ny * sizeof(T), cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); copies.push_back(ms);
  }
  std::sort(copies.begin(), copies.end());
  const float copy_ms = copies[3];

  Result res[KINDS];
  for (int kind = 0; kind < KINDS; ++kind) {
    Graph g;
    int proposed = 0, built = 0, finalize_failed = 0, wrong = 0;
    std::vector<std::string> errors;
    Result& r = res[kind];
    const bool ok = BuildGraph(h, g, (Kind)kind, s, dt);
    std::vector<cudnnBackendDescriptor_t> cfgs;
    if (ok) cfgs = Configs(g, &proposed);
    const bool wgrad = kind == WGRAD || kind == SBR_WGRAD;
    std::vector<std::string> seen;     // configs built, by engine and knob choices
    std::string rows;
    for (auto cfg : cfgs) {
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (built >= builds || el > deadline_s) break;
      Plan p;
      std::string err;
      if (!BuildPlan(h, cfg, &p, &err)) { ++finalize_failed; if (errors.size() < 3) errors.push_back(err); continue; }
      const std::string key = std::to_string(p.engine) + ":" + p.knobs;
      if (std::find(seen.begin(), seen.end(), key) != seen.end() || (size_t)p.ws > b.ws_bytes) {
        cudnnBackendDestroyDescriptor(p.plan); continue;
      }
      seen.push_back(key);
      ++built;
      void* x_saved = b.ptr[X];
      float ms = MedianMs(h, p, g, b, 10);
      double err_v = -1;
      if (ms >= 0) {
        CK(cudaDeviceSynchronize());
        if (kind == CONV || kind == WGRAD) {
          // the references: the fastest plan of the plain graph run on the prologue's output
          // (x_sbr), which the fused graphs compute from x themselves
          if (r.best_ms < 0 || ms < r.best_ms) {
            b.ptr[X] = x_sbr;
            if (!Execute(h, p, g, b)) {
              CK(cudaDeviceSynchronize());
              CK(cudaMemcpy(wgrad ? ref_dw : ref_y, wgrad ? b.ptr[DW] : b.ptr[Y], (wgrad ? nw : ny) * sizeof(T), cudaMemcpyDeviceToDevice));
            }
          }
        } else if (kind == CONV_STATS) {
          std::vector<double> y = Host<T>(b.ptr[Y], ny), sum = Host<float>(b.ptr[SUM], s.k), sq = Host<float>(b.ptr[SQSUM], s.k);
          std::vector<double> rs(s.k, 0.0), rq(s.k, 0.0);
          for (size_t i = 0; i < ny; ++i) { rs[i % s.k] += y[i]; rq[i % s.k] += y[i] * y[i]; }
          err_v = std::max(RelErr(sum, rs), RelErr(sq, rq));
        } else if (kind == SBR_CONV) {
          std::vector<double> y = Host<T>(b.ptr[Y], ny), ry = Host<T>(ref_y, ny);
          std::vector<double> sum = Host<float>(b.ptr[SUM], s.k);
          std::vector<double> rs(s.k, 0.0);
          for (size_t i = 0; i < ny; ++i) rs[i % s.k] += y[i];
          err_v = std::max(RelErr(y, ry), RelErr(sum, rs));
        } else {
          err_v = RelErr(Host<T>(b.ptr[DW], nw), Host<T>(ref_dw, nw));
        }
      }
      b.ptr[X] = x_saved;
      const double tol = dt == CUDNN_DATA_FLOAT ? 5e-3 : 2e-2;
      const bool right = err_v < 0 || err_v <= tol;
      if (!right) ++wrong;
      char row[512];
      snprintf(row, sizeof row, "%s{\"engine\": %lld, \"knobs\": \"%s\", \"ms\": %.4f, \"ws\": %lld, \"tensor_core\": %s, \"runtime_compiled\": %s, \"rel_err\": %.3g}",
               rows.empty() ? "" : ", ", (long long)p.engine, p.knobs.c_str(), ms, (long long)p.ws, p.tensor_core ? "true" : "false",
               p.runtime_compiled ? "true" : "false", err_v);
      rows += row;
      if (ms >= 0 && right && (r.best_ms < 0 || ms < r.best_ms)) { r.best_ms = ms; r.engine = p.engine; r.err = err_v; }
      cudnnBackendDestroyDescriptor(p.plan);
    }
    for (auto c : cfgs) cudnnBackendDestroyDescriptor(c);
    std::string errs;
    for (auto& e : errors) errs += (errs.empty() ? "\"" : ", \"") + e + "\"";
    printf("{\"shape\": [%d, %d, %d, %d, %d, %d, %d], \"dtype\": \"%s\", \"graph\": \"%s\", \"graph_error\": \"%s\", "
           "\"proposed\": %d, \"built\": %d, \"finalize_failed\": %d, \"wrong\": %d, \"finalize_errors\": [%s], "
           "\"best_ms\": %.4f, \"best_engine\": %lld, \"y_pass_ms\": %.4f, \"plans\": [%s]}\n",
           s.n, s.c, s.h, s.w, s.k, s.r, s.stride, dtname, kKindName[kind], g.error.c_str(), proposed, built,
           finalize_failed, wrong, errs.c_str(), r.best_ms, (long long)r.engine, copy_ms, rows.c_str());
    fflush(stdout);
  }
  fprintf(stderr, "%s N%d C%d %dx%d K%d R%d s%d: conv %.3f ms, conv+stats %.3f, sbr+conv %.3f | wgrad %.3f, sbr+wgrad %.3f | one pass over y %.3f ms\n",
          dtname, s.n, s.c, s.h, s.w, s.k, s.r, s.stride, res[CONV].best_ms, res[CONV_STATS].best_ms,
          res[SBR_CONV].best_ms, res[WGRAD].best_ms, res[SBR_WGRAD].best_ms, copy_ms);
  for (int i = 1; i < 10; ++i) if (b.ptr[i]) cudaFree(b.ptr[i]);
  cudaFree(x_sbr); cudaFree(ref_y); cudaFree(ref_dw); cudaFree(b.ws);
  cudaEventDestroy(e0); cudaEventDestroy(e1);
}

int main(int argc, char** argv) {
  std::string dtype = "float";
  int builds = 4;
  double seconds = 240;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--builds" && i + 1 < argc) builds = atoi(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) seconds = atof(argv[++i]);
    else if (a.rfind("--", 0) == 0) { fprintf(stderr, "probe: unknown option '%s'\n", a.c_str()); return 2; }
    else {
      Shape s;
      char rest = 0;
      if (sscanf(a.c_str(), "%d,%d,%d,%d,%d,%d,%d%c", &s.n, &s.c, &s.h, &s.w, &s.k, &s.r, &s.stride, &rest) != 7) {
        fprintf(stderr, "probe: a shape is N,C,H,W,K,R,stride, not '%s'\n", a.c_str());
        return 2;
      }
      if (std::min({s.n, s.c, s.h, s.w, s.k, s.r, s.stride}) < 1) {   // padding R/2: the filter fits
        fprintf(stderr, "probe: shape '%s': every number is at least 1\n", a.c_str());
        return 2;
      }
      shapes.push_back(s);
    }
  }
  if (dtype != "float" && dtype != "half") { fprintf(stderr, "probe: --dtype is float or half\n"); return 2; }
  if (builds < 1) { fprintf(stderr, "probe: --builds is at least 1\n"); return 2; }
  if (shapes.empty())
    shapes = {{128, 256, 56, 56, 64, 1, 1}, {128, 64, 56, 56, 64, 3, 1}, {128, 64, 56, 56, 256, 1, 1},
              {128, 256, 14, 14, 256, 3, 1}, {256, 64, 56, 56, 64, 3, 1}, {256, 256, 14, 14, 256, 3, 1}};
  cudnnHandle_t h;
  if (cudnnCreate(&h)) { fprintf(stderr, "probe: cudnnCreate failed\n"); return 1; }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  fprintf(stderr, "probe: %s, driver API %d, cuDNN %zu, %s, at most %d plans per graph, %.0f s\n", prop.name,
          driver, cudnnGetVersion(), dtype.c_str(), builds, seconds);
  const auto t0 = std::chrono::steady_clock::now();
  for (const Shape& s : shapes) {
    if (dtype == "float") RunShape<float>(h, s, CUDNN_DATA_FLOAT, "float", builds, seconds, t0);
    else RunShape<__half>(h, s, CUDNN_DATA_HALF, "half", builds, seconds, t0);
  }
  cudnnDestroy(h);
  return 0;
}
