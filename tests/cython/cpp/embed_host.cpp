// A C++ host that embeds Python the way Caffe does and drives ucudnn through its C API from
// two threads at once: each thread plans a micro-batched convolution (through the shared
// benchmark cache), runs it on its own cuDNN handle and stream, and compares the result with
// an undivided zero-workspace run. Each thread also makes repeated planning calls and checks
// that the core kept one cuDNN handle for all of them (Note [Thread handles] in _device.pyx:
// these threads are not Python's, so every call enters Python with a fresh thread state),
// that a failed ucudnn_kernel_run is reported through ucudnn_last_error(), and plans a net of
// two layers, one of them grouped, with ucudnn_net_plan (thread 0 `optimizer: ILP`, thread 1
// `optimizer: SHARED`): the slots it returns are 256-byte aligned, the calls that may run at
// once have disjoint ones within the net's workspace or arena, and every planned kernel run
// through its slot gives the undivided zero-workspace result. Exit code 0 only if both threads
// pass.
//
//   embed_host CACHE_PATH
#include <Python.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <ucudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      std::fprintf(stderr, __VA_ARGS__);                    \
      std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      return 1;                                             \
    }                                                       \
  } while (0)

static const char *g_cache = nullptr;

// ucudnn._core.thread_handle_stats()[key] for the calling thread, or -1. Enters Python the way
// the C API does on a thread Python did not create (PyGILState_Ensure: a fresh thread state).
static long handle_stat(const char *key) {
  PyGILState_STATE gil = PyGILState_Ensure();
  long n = -1;
  PyObject *mod = PyImport_ImportModule("ucudnn._core");
  PyObject *stats = mod ? PyObject_CallMethod(mod, "thread_handle_stats", nullptr) : nullptr;
  PyObject *v = stats ? PyDict_GetItemString(stats, key) : nullptr;  // borrowed
  if (v) n = PyLong_AsLong(v);
  if (PyErr_Occurred()) PyErr_Print();
  Py_XDECREF(stats);
  Py_XDECREF(mod);
  PyGILState_Release(gil);
  return n;
}

// Device buffers of one layer: x (and dx) N x C x H x W, w (and dw) K x C/G x R x S,
// y (and dy) N x K x OH x OW, filled with random values.
struct LayerBuffers {
  std::vector<float *> dev;   // x, w, y, dx, dw, dy
  std::vector<size_t> count;
  ~LayerBuffers() {
    for (float *p : dev) cudaFree(p);
  }
};

static int out_size(int in, int k, int pad, int stride) { return (in + 2 * pad - k) / stride + 1; }

// The largest |ref - got| over two device buffers of n floats, relative to max(1, max |ref|).
static double relative_difference(const float *ref, const float *got, size_t n) {
  std::vector<float> r0(n), r1(n);
  cudaMemcpy(r0.data(), ref, n * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(r1.data(), got, n * 4, cudaMemcpyDeviceToHost);
  double maxdiff = 0, maxabs = 0;
  for (size_t i = 0; i < n; ++i) {
    maxdiff = std::fmax(maxdiff, std::fabs(r0[i] - r1[i]));
    maxabs = std::fmax(maxabs, std::fabs(r0[i]));
  }
  return maxdiff / std::fmax(1.0, maxabs);
}

static int alloc_layer(const ucudnn_net_layer &l, int seed, LayerBuffers *b) {
  const int oh = out_size(l.h, l.r, l.pad_h, l.stride_h), ow = out_size(l.w, l.s, l.pad_w, l.stride_w);
  const size_t nx = (size_t)l.n * l.c * l.h * l.w, nw = (size_t)l.k * (l.c / l.groups) * l.r * l.s,
               ny = (size_t)l.n * l.k * oh * ow;
  b->count = {nx, nw, ny, nx, nw, ny};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (size_t n : b->count) {
    std::vector<float> h(n);
    for (auto &v : h) v = u(gen);
    float *d = nullptr;
    CHECK(cudaMalloc(&d, n * 4) == cudaSuccess, "cudaMalloc");
    cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice);
    b->dev.push_back(d);
  }
  return 0;
}

// One group's view of op `op` of layer `l` as a kernel of its own (what Caffe runs per group).
static ucudnn_conv_params group_params(const ucudnn_net_layer &l, int op) {
  const int g = l.groups, oh = out_size(l.h, l.r, l.pad_h, l.stride_h),
            ow = out_size(l.w, l.s, l.pad_w, l.stride_w);
  ucudnn_conv_params p = {};
  p.op = op;
  p.dtype = 0;
  p.math = 3;
  p.n = l.n; p.c = l.c / g; p.h = l.h; p.w = l.w; p.k = l.k / g; p.r = l.r; p.s = l.s;
  p.pad_h = l.pad_h; p.pad_w = l.pad_w; p.stride_h = l.stride_h; p.stride_w = l.stride_w;
  p.dil_h = l.dil_h; p.dil_w = l.dil_w; p.groups = 1;
  if (g > 1) {
    const int xs[4] = {l.c * l.h * l.w, l.h * l.w, l.w, 1}, ys[4] = {l.k * oh * ow, oh * ow, ow, 1};
    for (int i = 0; i < 4; ++i) { p.x_strides[i] = xs[i]; p.y_strides[i] = ys[i]; }
  }
  p.name = l.name;
  return p;
}

// Runs op `op` of `l` for every group into `out` (zeroed first): through `k` on the given
// slot, or through the undivided zero-workspace `k` with no workspace.
static int run_op(const ucudnn_net_layer &l, int op, const ucudnn_kernel *k, cudnnHandle_t handle,
                  const LayerBuffers &b, float *out, char *base, const ucudnn_op_plan *slot) {
  const int g = l.groups, oh = out_size(l.h, l.r, l.pad_h, l.stride_h),
            ow = out_size(l.w, l.s, l.pad_w, l.stride_w);
  const size_t gx = (size_t)(l.c / g) * l.h * l.w, gw = (size_t)(l.k / g) * (l.c / g) * l.r * l.s,
               gy = (size_t)(l.k / g) * oh * ow;
  // buffers by op (ucudnn_types.h): fwd x, w -> y; bwd_data w, dy -> dx; bwd_filter x, dy -> dw
  const int in_a[3] = {0, 1, 0}, in_b[3] = {1, 5, 5}, outs[3] = {2, 3, 4};
  const size_t step[6] = {gx, gw, gy, gx, gw, gy};
  cudaMemset(out, 0, b.count[outs[op]] * 4);
  float alpha = 1.f, beta = 0.f;
  for (int i = 0; i < g; ++i) {
    void *ws = slot && slot->bytes ? base + slot->offset + i * slot->stride : nullptr;
    CHECK(ucudnn_kernel_run(k, handle, &alpha, b.dev[in_a[op]] + i * step[in_a[op]],
                            b.dev[in_b[op]] + i * step[in_b[op]], &beta,
                            out + i * step[outs[op]], ws, slot ? slot->bytes : 0) == UCUDNN_OK,
          "layer %s op %d group %d: run: %s", l.name, op, i, ucudnn_last_error());
  }
  return 0;
}

typedef std::pair<size_t, size_t> Range;

// The slots of `plans` (ops of one layer that may run at once, `groups` calls each) are
// 256-byte aligned and disjoint, and end within `size`.
static int check_slots(const ucudnn_net_layer &l, const std::vector<int> &ops, size_t size,
                       std::vector<Range> *ranges) {
  for (int op : ops) {
    const ucudnn_op_plan &p = l.plan[op];
    if (!p.kernel) continue;
    CHECK(p.offset % 256 == 0 && p.stride % 256 == 0 && p.stride >= p.bytes,
          "layer %s op %d: slot offset %zu stride %zu bytes %zu not aligned", l.name, op,
          p.offset, p.stride, p.bytes);
    for (int g = 0; g < l.groups && p.bytes; ++g) {
      ranges->push_back(Range(p.offset + g * p.stride, p.offset + g * p.stride + p.bytes));
    }
  }
  std::sort(ranges->begin(), ranges->end());
  for (size_t i = 0; i < ranges->size(); ++i) {
    CHECK((*ranges)[i].second <= size, "layer %s: a slot ends at %zu, past %zu B", l.name,
          (*ranges)[i].second, size);
    CHECK(i == 0 || (*ranges)[i - 1].second <= (*ranges)[i].first,
          "layer %s: slots overlap at %zu", l.name, (*ranges)[i].first);
  }
  return 0;
}

// Thread `id` plans a net of a grouped layer and a layer without backward-data: ILP (0) or
// shared arena (1), checks the slots and runs every planned kernel against an undivided one.
static int run_net(int id, cudnnHandle_t handle, cudaStream_t stream) {
  const bool shared = id == 1;
  const size_t budget = 32u << 20;
  const std::string net_param = std::string(shared ? "optimizer: SHARED" : "optimizer: ILP") +
      " total_workspace: " + std::to_string(budget) +
      " policy: POWER_OF_TWO math: FMA benchmark_repeats: 1 cache_path: \"" + g_cache + "\"";
  ucudnn_net_layer layers[2] = {};
  layers[0].name = "embed_grouped";
  layers[0].n = 24; layers[0].c = 32; layers[0].h = layers[0].w = 14; layers[0].k = 64;
  layers[0].r = layers[0].s = 3; layers[0].pad_h = layers[0].pad_w = 1;
  layers[0].groups = 2; layers[0].backward_data = 1;
  layers[0].ucudnn_param = "policy: ALL";   // the layer's own field over the net's
  layers[1].name = "embed_first";
  layers[1].n = 24; layers[1].c = 16; layers[1].h = layers[1].w = 14; layers[1].k = 32;
  layers[1].r = layers[1].s = 1;
  layers[1].groups = 1; layers[1].backward_data = 0;   // its bottom needs no gradient
  for (ucudnn_net_layer &l : layers) {
    l.dtype = 0;
    l.stride_h = l.stride_w = l.dil_h = l.dil_w = 1;
  }

  // bad input: a layer that asks for the net-wide SHARED in a net that does not
  ucudnn_net_layer bad = layers[1];
  bad.ucudnn_param = "optimizer: SHARED";
  ucudnn_net *none = nullptr;
  CHECK(ucudnn_net_plan(&bad, 1, "embed_bad", "optimizer: ILP", 0, &none) == UCUDNN_ERR_INVALID &&
            none == nullptr && std::strstr(ucudnn_last_error(), "optimizer") != nullptr,
        "thread %d: a layer's SHARED accepted: %s", id, ucudnn_last_error());
  std::printf("thread %d: net bad input rejected: %s\n", id, ucudnn_last_error());

  ucudnn_net *net = nullptr;
  CHECK(ucudnn_net_plan(layers, 2, shared ? "embed_shared" : "embed_ilp", net_param.c_str(), 0,
                        &net) == UCUDNN_OK, "thread %d: ucudnn_net_plan: %s", id,
        ucudnn_last_error());
  const size_t ws_bytes = ucudnn_net_workspace_size(net), arena_bytes = ucudnn_net_arena_size(net);
  CHECK(layers[1].plan[UCUDNN_BWD_DATA].kernel == nullptr, "thread %d: bwd_data planned for a "
        "layer without backward-data", id);
  size_t used = 0;
  std::vector<Range> owned;
  for (ucudnn_net_layer &l : layers) {
    for (int op = 0; op < 3; ++op) {
      const ucudnn_op_plan &p = l.plan[op];
      if (op == UCUDNN_BWD_DATA && !l.backward_data) continue;
      CHECK(p.kernel != nullptr, "thread %d: layer %s op %d not planned", id, l.name, op);
      CHECK((p.arena != 0) == shared, "thread %d: layer %s op %d: arena %d", id, l.name, op,
            p.arena);
      used += l.groups * p.bytes;
    }
    if (shared) {   // the calls of one pass run at once: disjoint within the arena
      std::vector<Range> fwd, bwd;
      CHECK(check_slots(l, {UCUDNN_FWD}, arena_bytes, &fwd) == 0, "forward pass");
      CHECK(check_slots(l, {UCUDNN_BWD_FILTER, UCUDNN_BWD_DATA}, arena_bytes, &bwd) == 0,
            "backward pass");
    } else {        // every kernel owns its slots in the net's workspace
      std::vector<Range> mine;
      CHECK(check_slots(l, {UCUDNN_FWD, UCUDNN_BWD_FILTER, UCUDNN_BWD_DATA}, ws_bytes, &mine) == 0,
            "owned slots");
      owned.insert(owned.end(), mine.begin(), mine.end());
    }
  }
  std::sort(owned.begin(), owned.end());
  for (size_t i = 1; i < owned.size(); ++i) {
    CHECK(owned[i - 1].second <= owned[i].first, "thread %d: two layers' slots overlap", id);
  }
  CHECK(shared ? ws_bytes == 0 && arena_bytes <= budget : arena_bytes == 0 && used <= budget,
        "thread %d: workspace %zu B, arena %zu B, used %zu B, budget %zu B", id, ws_bytes,
        arena_bytes, used, budget);

  char *ws = nullptr, *arena = nullptr;
  CHECK(cudaMalloc(&ws, ws_bytes + 1) == cudaSuccess && cudaMalloc(&arena, arena_bytes + 1) ==
            cudaSuccess, "cudaMalloc");
  int kernels = 0;
  double worst = 0;
  for (int li = 0; li < 2; ++li) {
    const ucudnn_net_layer &l = layers[li];
    LayerBuffers b;
    CHECK(alloc_layer(l, 7 * id + li, &b) == 0, "buffers");
    for (int op = 0; op < 3; ++op) {
      const ucudnn_op_plan &p = l.plan[op];
      if (!p.kernel) continue;
      ucudnn_conv_params gp = group_params(l, op);
      ucudnn_plan_options base = {};
      base.policy = UCUDNN_UNDIVIDED;
      base.workspace_limit = 0;
      base.repeats = 1;
      base.cache_path = g_cache;
      ucudnn_kernel *k0 = nullptr;
      CHECK(ucudnn_kernel_create(&gp, &base, &k0) == UCUDNN_OK, "thread %d: reference: %s", id,
            ucudnn_last_error());
      const int outs[3] = {2, 3, 4};
      const size_t n = b.count[outs[op]];
      float *out0 = nullptr, *out1 = nullptr;
      CHECK(cudaMalloc(&out0, n * 4) == cudaSuccess && cudaMalloc(&out1, n * 4) == cudaSuccess,
            "cudaMalloc");
      CHECK(run_op(l, op, k0, handle, b, out0, nullptr, nullptr) == 0, "reference run");
      CHECK(run_op(l, op, p.kernel, handle, b, out1, p.arena ? arena : ws, &p) == 0, "run");
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "sync");
      worst = std::fmax(worst, relative_difference(out0, out1, n));
      cudaFree(out0);
      cudaFree(out1);
      ucudnn_kernel_destroy(k0);
      ++kernels;
    }
  }
  CHECK(kernels == 5, "thread %d: %d kernels planned (expected 5)", id, kernels);
  CHECK(worst < 1e-4, "thread %d: net kernels differ from undivided: %.3g", id, worst);
  std::printf("thread %d: net planned (%s): %d kernels, workspace %zu B, arena %zu B, %.3f ms "
              "predicted, max relative difference %.3g\n", id, shared ? "SHARED" : "ILP", kernels,
              ws_bytes, arena_bytes, ucudnn_net_predicted_ms(net), worst);
  ucudnn_net_destroy(net);
  cudaFree(ws);
  cudaFree(arena);
  return 0;
}

static int run_thread(int id, int *result) {
  *result = 1;
  CHECK(cudaSetDevice(0) == cudaSuccess, "thread %d: cudaSetDevice", id);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
  cudnnHandle_t handle;
  CHECK(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS, "cudnnCreate");
  CHECK(cudnnSetStream(handle, stream) == CUDNN_STATUS_SUCCESS, "cudnnSetStream");

  // AlexNet conv3-like layer at an odd batch size; thread 1 runs backward-filter.
  ucudnn_conv_params p = {};
  p.op = id == 0 ? UCUDNN_FWD : UCUDNN_BWD_FILTER;
  p.dtype = 0;           // float
  p.math = 3;            // CUDNN_FMA_MATH: strict fp32 for the comparison
  p.n = 50; p.c = 64; p.h = 13; p.w = 13; p.k = 96; p.r = 3; p.s = 3;
  p.pad_h = p.pad_w = 1; p.stride_h = p.stride_w = 1; p.dil_h = p.dil_w = 1; p.groups = 1;
  p.name = id == 0 ? "embed_fwd" : "embed_bwd_filter";
  p.instances = 0;       // <= 0 means 1

  ucudnn_plan_options micro = {};
  micro.policy = UCUDNN_POWER_OF_TWO;
  micro.optimizer = UCUDNN_DP;
  micro.workspace_limit = 64u << 20;
  micro.repeats = 1;
  micro.cache_path = g_cache;
  ucudnn_plan_options base = micro;
  base.policy = UCUDNN_UNDIVIDED;
  base.workspace_limit = 0;

  ucudnn_kernel *k = nullptr, *k0 = nullptr;
  CHECK(ucudnn_kernel_create(&p, &micro, &k) == UCUDNN_OK, "thread %d: create: %s", id,
        ucudnn_last_error());
  CHECK(ucudnn_kernel_create(&p, &base, &k0) == UCUDNN_OK, "thread %d: create: %s", id,
        ucudnn_last_error());
  // repeated planning calls on this (non-Python) thread share one cuDNN handle
  const int replans = 5;
  for (int i = 0; i < replans; ++i) {
    CHECK(ucudnn_kernel_replan(k, micro.workspace_limit) == UCUDNN_OK, "thread %d: replan: %s",
          id, ucudnn_last_error());
  }
  long handles = handle_stat("created_on_thread");
  CHECK(handles == 1, "thread %d: %ld cuDNN handles created for %d planning calls (expected 1)",
        id, handles, replans + 2);
  std::printf("thread %d: %d planning calls, 1 cuDNN handle\n", id, replans + 2);
  char plan[256];
  CHECK(ucudnn_kernel_describe(k, plan, sizeof plan) == UCUDNN_OK, "thread %d: describe: %s", id,
        ucudnn_last_error());

  const size_t nx = 50 * 64 * 13 * 13, nw = 96 * 64 * 9, ny = 50 * 96 * 13 * 13;
  std::vector<float> hx(nx), hw(nw), hy(ny);
  std::mt19937 gen(id + 1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto &v : hx) v = u(gen);
  for (auto &v : hw) v = u(gen);
  for (auto &v : hy) v = u(gen);
  float *x, *w, *y, *out0, *out1;
  size_t nout = id == 0 ? ny : nw;
  void *ws = nullptr;
  size_t wss = ucudnn_kernel_workspace_size(k);
  CHECK(cudaMalloc(&x, nx * 4) == cudaSuccess && cudaMalloc(&w, nw * 4) == cudaSuccess &&
            cudaMalloc(&y, ny * 4) == cudaSuccess && cudaMalloc(&out0, nout * 4) == cudaSuccess &&
            cudaMalloc(&out1, nout * 4) == cudaSuccess && cudaMalloc(&ws, wss + 1) == cudaSuccess,
        "cudaMalloc");
  cudaMemcpy(x, hx.data(), nx * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(w, hw.data(), nw * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(y, hy.data(), ny * 4, cudaMemcpyHostToDevice);

  float alpha = 1.f, beta = 0.f;
  const void *a = x, *b = id == 0 ? (const void *)w : (const void *)y;
  for (int iter = 0; iter < 20; ++iter) {   // repeated calls, no GIL held by this thread
    CHECK(ucudnn_kernel_run(k, handle, &alpha, a, b, &beta, out1, ws, wss) == UCUDNN_OK,
          "thread %d: run: %s", id, ucudnn_last_error());
  }
  CHECK(ucudnn_kernel_run(k0, handle, &alpha, a, b, &beta, out0, nullptr, 0) == UCUDNN_OK,
        "thread %d: run undivided: %s", id, ucudnn_last_error());
  // a failed run is reported through the same last-error buffer as planning calls
  CHECK(ucudnn_kernel_run(nullptr, handle, &alpha, a, b, &beta, out1, ws, wss) ==
            UCUDNN_ERR_INVALID && std::strstr(ucudnn_last_error(), "NULL") != nullptr,
        "thread %d: run with a NULL kernel: %s", id, ucudnn_last_error());
  if (wss > 0) {
    CHECK(ucudnn_kernel_run(k, handle, &alpha, a, b, &beta, out1, nullptr, 0) ==
              UCUDNN_ERR_INVALID && std::strstr(ucudnn_last_error(), "workspace") != nullptr,
          "thread %d: run without its workspace: %s", id, ucudnn_last_error());
  }
  std::printf("thread %d: run error reported: %s\n", id, ucudnn_last_error());
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "sync");
  double rel = relative_difference(out0, out1, nout);
  std::printf("thread %d: %s plan [%s] workspace %zu B, max relative difference %.3g\n", id,
              p.name, plan, wss, rel);
  CHECK(rel < 1e-4, "thread %d: micro-batched result differs from undivided", id);

  // the graph API's engine configs through the same calls: planned, run, same result
  ucudnn_plan_options graph = micro;
  graph.engines = UCUDNN_ENGINES_GRAPH;
  ucudnn_kernel *kg = nullptr;
  CHECK(ucudnn_kernel_create(&p, &graph, &kg) == UCUDNN_OK, "thread %d: create (graph): %s", id,
        ucudnn_last_error());
  char gplan[256];
  CHECK(ucudnn_kernel_describe(kg, gplan, sizeof gplan) == UCUDNN_OK, "describe: %s",
        ucudnn_last_error());
  size_t gwss = ucudnn_kernel_workspace_size(kg);
  void *gws = nullptr;
  CHECK(cudaMalloc(&gws, gwss + 1) == cudaSuccess, "cudaMalloc");
  CHECK(ucudnn_kernel_run(kg, handle, &alpha, a, b, &beta, out1, gws, gwss) == UCUDNN_OK,
        "thread %d: run (graph): %s", id, ucudnn_last_error());
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "sync");
  double grel = relative_difference(out0, out1, nout);
  std::printf("thread %d: graph plan [%s] workspace %zu B, max relative difference %.3g\n", id,
              gplan, gwss, grel);
  CHECK(std::strstr(gplan, "eng") != nullptr, "thread %d: graph plan names no engine config", id);
  CHECK(grel < 1e-4, "thread %d: graph result differs from undivided", id);
  ucudnn_kernel_destroy(kg);
  cudaFree(gws);

  // bad input: a negative pad gives a clear error naming the layer, not a crash
  ucudnn_conv_params bad = p;
  bad.pad_h = -1;
  ucudnn_kernel *kb = nullptr;
  CHECK(ucudnn_kernel_create(&bad, &micro, &kb) != UCUDNN_OK && kb == nullptr,
        "bad params accepted");
  std::printf("thread %d: bad input rejected: %s\n", id, ucudnn_last_error());

  CHECK(run_net(id, handle, stream) == 0, "thread %d: net", id);

  ucudnn_kernel_destroy(k);
  ucudnn_kernel_destroy(k0);
  cudaFree(x); cudaFree(w); cudaFree(y); cudaFree(out0); cudaFree(out1); cudaFree(ws);
  cudnnDestroy(handle);
  cudaStreamDestroy(stream);
  *result = 0;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CACHE_PATH\n", argv[0]);
    return 2;
  }
  g_cache = argv[1];
  Py_Initialize();
  if (ucudnn_import() != 0) {
    PyErr_Print();
    return 1;
  }
  PyThreadState *main_state = PyEval_SaveThread();   // release the GIL for the workers

  int results[2] = {1, 1};
  std::thread t0([&] { run_thread(0, &results[0]); });
  std::thread t1([&] { run_thread(1, &results[1]); });
  t0.join();
  t1.join();

  PyEval_RestoreThread(main_state);
  Py_Finalize();
  int failed = results[0] + results[1];
  std::printf("embed_host: %d of 2 threads matched\n", 2 - failed);
  return failed ? 1 : 0;
}
