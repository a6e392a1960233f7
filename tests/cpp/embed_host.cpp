// A C++ host that embeds Python the way Caffe does and drives ucudnn through its C API from
// two threads at once: each thread plans a micro-batched convolution (through the shared
// benchmark cache), runs it on its own cuDNN handle and stream, and compares the result with
// an undivided zero-workspace run. Each thread also makes repeated planning calls and checks
// that the core kept one cuDNN handle for all of them (Note [Thread handles] in _core.pyx:
// these threads are not Python's, so every call enters Python with a fresh thread state),
// that a failed ucudnn_kernel_run is reported through ucudnn_last_error(), and plans a
// two-instance kernel with ucudnn_plan_network (counts NULL: the kernel's `instances`).
// Exit code 0 only if both threads pass.
//
//   embed_host CACHE_PATH
#include <Python.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <ucudnn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
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
  std::vector<float> r0(nout), r1(nout);
  cudaMemcpy(r0.data(), out0, nout * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(r1.data(), out1, nout * 4, cudaMemcpyDeviceToHost);
  double maxdiff = 0, maxabs = 0;
  for (size_t i = 0; i < nout; ++i) {
    maxdiff = std::fmax(maxdiff, std::fabs(r0[i] - r1[i]));
    maxabs = std::fmax(maxabs, std::fabs(r0[i]));
  }
  double rel = maxdiff / std::fmax(1.0, maxabs);
  std::printf("thread %d: %s plan [%s] workspace %zu B, max relative difference %.3g\n", id,
              p.name, plan, wss, rel);
  CHECK(rel < 1e-4, "thread %d: micro-batched result differs from undivided", id);

  // bad input: a negative pad gives a clear error naming the layer, not a crash
  ucudnn_conv_params bad = p;
  bad.pad_h = -1;
  ucudnn_kernel *kb = nullptr;
  CHECK(ucudnn_kernel_create(&bad, &micro, &kb) != UCUDNN_OK && kb == nullptr,
        "bad params accepted");
  std::printf("thread %d: bad input rejected: %s\n", id, ucudnn_last_error());

  // the ILP over one kernel of two instances (counts NULL: the kernel's own `instances`)
  ucudnn_conv_params pi = p;
  pi.instances = 2;
  ucudnn_plan_options ilp = micro;
  ilp.optimizer = UCUDNN_ILP;
  ucudnn_kernel *ki = nullptr;
  CHECK(ucudnn_kernel_create(&pi, &ilp, &ki) == UCUDNN_OK, "thread %d: create (ILP): %s", id,
        ucudnn_last_error());
  const size_t budget = 32u << 20;
  CHECK(ucudnn_plan_network(&ki, nullptr, 1, budget) == UCUDNN_OK, "thread %d: ILP: %s", id,
        ucudnn_last_error());
  CHECK(2 * ucudnn_kernel_workspace_size(ki) <= budget, "thread %d: ILP plan over budget", id);
  ucudnn_kernel_destroy(ki);

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
