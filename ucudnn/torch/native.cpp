// ucudnn.torch._native: the eager calls of a converted module in C++ (Note [Native calls] in
// ucudnn/torch/eager.py).
//
// Three convolution calls (conv_fwd, conv_bwd_data, conv_bwd_filter) with the layouts, sizes
// and checks of the operators' Python implementations (ucudnn/torch/ops.py), and two autograd
// Functions (a convolution, and a transposed convolution's forward) with the same gradients as
// the operators' autograd. A call whose kernel this module knows runs it through the C API
// (ucudnn_kernel_run) on PyTorch's cuDNN handle, pointed at the current stream, with the
// workspace from PyTorch's caching allocator; no Python runs, so autograd's device thread
// runs a backward without the GIL. Everything else goes to Python:
//   - a call key seen for the first time: `resolve` (runtime.native_call) runs the call as
//     the Python implementation does, planning on a miss, and says whether its kernel may run
//     from here (a kernel with a slot of a model's shared arena may not: Python runs it);
//   - tensors the fast path does not take (another dtype than fp32/fp16/bf16, two dtypes, two
//     devices, an empty tensor, sizes that do not match): the Python implementation, which
//     runs them or raises its InputError;
//   - a backward that is itself recorded (create_graph): the operators, differentiable.
//
// The call key holds what selects the kernel: the op, the sizes, the geometry, the layout, the
// dtype, the device, the config and PyTorch's deterministic and fp32-precision flags (the
// config a call runs under depends on them: Note [Deterministic calls] in runtime.py).
// Kernels live as long as the process (runtime._kernels); clear() forgets them here.

#include <torch/extension.h>

#include <ATen/Context.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/version.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "ucudnn.h"

namespace py = pybind11;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

enum Op : int64_t { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };
const char* const OP_NAMES[] = {"fwd", "bwd_data", "bwd_filter"};

using Ints = std::vector<int64_t>;

// the Python side, set by init(); never freed (they outlive every call, the interpreter's exit
// included)
py::object* resolve_fn = nullptr;       // runtime.native_call
py::object* impls[3] = {};             // ops' conv_fwd, conv_bwd_data, conv_bwd_filter
py::object* recorded_backward = nullptr;  // eager.recorded_backward

struct KeyHash {
  size_t operator()(const Ints& k) const noexcept {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

std::mutex kernels_mutex;
// call key -> the C API's kernel, or nullptr: Python runs every call of this key
std::unordered_map<Ints, const ucudnn_kernel*, KeyHash> kernels;

bool fast_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// NHWC for a channels_last 4-D or channels_last_3d 5-D tensor of a convolution without groups,
// else NCHW (geometry.layout_of)
bool channels_last(const at::Tensor& t, int64_t groups) {
  if (groups != 1 || (t.dim() != 4 && t.dim() != 5) || t.is_contiguous()) return false;
  return t.is_contiguous(t.dim() == 4 ? at::MemoryFormat::ChannelsLast
                                      : at::MemoryFormat::ChannelsLast3d);
}

at::MemoryFormat format_of(bool nhwc, int64_t dims) {
  if (!nhwc) return at::MemoryFormat::Contiguous;
  return dims == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
}

// the output sizes of a convolution of x_size by w_size (geometry.conv_out_size); empty where
// the geometry has the wrong length or a size would not be positive
Ints out_size(at::IntArrayRef x, at::IntArrayRef w, const Ints& stride, const Ints& padding,
              const Ints& dilation) {
  if (x.size() < 3 || w.size() != x.size()) return {};
  const size_t nsp = x.size() - 2;
  if (stride.size() != nsp || padding.size() != nsp || dilation.size() != nsp) return {};
  Ints y{x[0], w[0]};
  for (size_t i = 0; i < nsp; ++i) {
    if (stride[i] <= 0) return {};
    int64_t v = (x[i + 2] + 2 * padding[i] - dilation[i] * (w[i + 2] - 1) - 1) / stride[i] + 1;
    if (v <= 0) return {};
    y.push_back(v);
  }
  return y;
}

// whether fp32 convolutions may run TF32 now (runtime.torch_tf32)
bool tf32_convolutions() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  return at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
#elif TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 9
  return at::globalContext().allowTF32CuDNN("conv");
#else
  return at::globalContext().allowTF32CuDNN();
#endif
}

bool deterministic() {
  auto& ctx = at::globalContext();
  return ctx.deterministicCuDNN() || ctx.deterministicAlgorithms();
}

Ints call_key(Op op, const at::Tensor& out, at::IntArrayRef x_size, at::IntArrayRef w_size,
              const Ints& stride, const Ints& padding, const Ints& dilation, int64_t groups,
              bool nhwc, int64_t config) {
  const bool fp32 = out.scalar_type() == at::kFloat;
  Ints k{op, static_cast<int64_t>(out.scalar_type()), out.get_device(), nhwc, groups, config,
         deterministic(), fp32 && !tf32_convolutions(), static_cast<int64_t>(x_size.size())};
  k.insert(k.end(), x_size.begin(), x_size.end());
  k.insert(k.end(), w_size.begin(), w_size.end());
  k.insert(k.end(), stride.begin(), stride.end());
  k.insert(k.end(), padding.begin(), padding.end());
  k.insert(k.end(), dilation.begin(), dilation.end());
  return k;
}

// Run `op` on a, b into out (both laid out as `nhwc` says): its known kernel, or Python's call
at::Tensor run(Op op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
               at::IntArrayRef x_size, at::IntArrayRef w_size, const Ints& stride,
               const Ints& padding, const Ints& dilation, int64_t groups, bool nhwc,
               int64_t config) {
  c10::cuda::CUDAGuard guard(out.device());
  Ints key = call_key(op, out, x_size, w_size, stride, padding, dilation, groups, nhwc, config);
  const ucudnn_kernel* kern = nullptr;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(kernels_mutex);
    auto it = kernels.find(key);
    if (it != kernels.end()) {
      known = true;
      kern = it->second;
    }
  }
  if (kern != nullptr) {
    const size_t need = ucudnn_kernel_workspace_size(kern);
    at::Tensor ws;
    if (need) ws = at::empty({static_cast<int64_t>(need)}, out.options().dtype(at::kByte));
    const float one = 1.0f, zero = 0.0f;
    const int rc = ucudnn_kernel_run(kern, at::native::getCudnnHandle(), &one, a.data_ptr(),
                                     b.data_ptr(), &zero, out.data_ptr(),
                                     need ? ws.data_ptr() : nullptr, need);
    TORCH_CHECK(rc == UCUDNN_OK, "ucudnn.torch ", OP_NAMES[op], ": ", ucudnn_last_error());
    return out;
  }
  py::gil_scoped_acquire gil;
  py::object address = (*resolve_fn)(OP_NAMES[op], a, b, out, Ints(x_size.begin(), x_size.end()),
                                     Ints(w_size.begin(), w_size.end()), stride, padding,
                                     dilation, groups, nhwc ? "NHWC" : "NCHW", config);
  if (!known) {
    std::lock_guard<std::mutex> lock(kernels_mutex);
    kernels[key] = reinterpret_cast<const ucudnn_kernel*>(address.cast<uintptr_t>());
  }
  return out;
}

// the Python implementation of op: what the fast path does not take
template <typename... Args>
at::Tensor python_impl(Op op, const Args&... args) {
  py::gil_scoped_acquire gil;
  return (*impls[op])(args...).template cast<at::Tensor>();
}

bool fast_pair(const at::Tensor& a, const at::Tensor& b) {
  return a.is_cuda() && b.device() == a.device() && a.scalar_type() == b.scalar_type() &&
         fast_dtype(a.scalar_type()) && a.dim() >= 3 && a.dim() == b.dim();
}

at::Tensor conv_fwd(const at::Tensor& x_in, const at::Tensor& w_in, const Ints& stride,
                    const Ints& padding, const Ints& dilation, int64_t groups, int64_t config) {
  Ints y_size;
  if (fast_pair(x_in, w_in))
    y_size = out_size(x_in.sizes(), w_in.sizes(), stride, padding, dilation);
  if (y_size.empty() || x_in.numel() == 0 || w_in.numel() == 0)
    return python_impl(FWD, x_in, w_in, stride, padding, dilation, groups, config);
  const bool nhwc = channels_last(x_in, groups);
  const auto fmt = format_of(nhwc, x_in.dim());
  at::Tensor x = x_in.contiguous(fmt), w = w_in.contiguous(fmt);
  at::Tensor y = at::empty(y_size, x.options().memory_format(fmt));
  return run(FWD, x, w, y, x.sizes(), w.sizes(), stride, padding, dilation, groups, nhwc,
             config);
}

// whether a backward call on a (the weight, or the input) and dy takes the fast path: a
// fast pair, neither empty, and dy of the sizes of the convolution of x_size by w_size
bool fast_backward(const at::Tensor& a, const at::Tensor& dy, at::IntArrayRef x_size,
                   at::IntArrayRef w_size, const Ints& stride, const Ints& padding,
                   const Ints& dilation) {
  return fast_pair(a, dy) && a.numel() > 0 && dy.numel() > 0 &&
         static_cast<int64_t>(x_size.size()) == dy.dim() &&
         at::IntArrayRef(out_size(x_size, w_size, stride, padding, dilation)) == dy.sizes();
}

at::Tensor conv_bwd_data(const at::Tensor& w_in, const at::Tensor& dy_in, const Ints& x_size,
                         const Ints& stride, const Ints& padding, const Ints& dilation,
                         int64_t groups, int64_t config) {
  if (!fast_backward(w_in, dy_in, x_size, w_in.sizes(), stride, padding, dilation))
    return python_impl(BWD_DATA, w_in, dy_in, x_size, stride, padding, dilation, groups,
                       config);
  const bool nhwc = channels_last(dy_in, groups);
  const auto fmt = format_of(nhwc, dy_in.dim());
  at::Tensor w = w_in.contiguous(fmt), dy = dy_in.contiguous(fmt);
  at::Tensor dx = at::empty(x_size, dy.options().memory_format(fmt));
  return run(BWD_DATA, w, dy, dx, x_size, w.sizes(), stride, padding, dilation, groups, nhwc,
             config);
}

at::Tensor conv_bwd_filter(const at::Tensor& x_in, const at::Tensor& dy_in, const Ints& w_size,
                           const Ints& stride, const Ints& padding, const Ints& dilation,
                           int64_t groups, int64_t config) {
  if (!fast_backward(x_in, dy_in, x_in.sizes(), w_size, stride, padding, dilation))
    return python_impl(BWD_FILTER, x_in, dy_in, w_size, stride, padding, dilation, groups,
                       config);
  const bool nhwc = channels_last(x_in, groups);
  const auto fmt = format_of(nhwc, x_in.dim());
  at::Tensor x = x_in.contiguous(fmt), dy = dy_in.contiguous(fmt);
  at::Tensor dw = at::empty(w_size, dy.options().memory_format(fmt));
  return run(BWD_FILTER, x, dy, dw, x.sizes(), w_size, stride, padding, dilation, groups, nhwc,
             config);
}

// the geometry a backward needs, kept in the context
void save_geometry(AutogradContext* ctx, const Ints& stride, const Ints& padding,
                   const Ints& dilation, int64_t groups, int64_t config) {
  ctx->saved_data["stride"] = stride;
  ctx->saved_data["padding"] = padding;
  ctx->saved_data["dilation"] = dilation;
  ctx->saved_data["groups"] = groups;
  ctx->saved_data["config"] = config;
}

struct Geometry {
  Ints stride, padding, dilation;
  int64_t groups, config;
  explicit Geometry(AutogradContext* ctx)
      : stride(ctx->saved_data["stride"].toIntVector()),
        padding(ctx->saved_data["padding"].toIntVector()),
        dilation(ctx->saved_data["dilation"].toIntVector()),
        groups(ctx->saved_data["groups"].toInt()),
        config(ctx->saved_data["config"].toInt()) {}
};

// A backward that autograd records (create_graph) calls the differentiable operators
variable_list recorded(const char* kind, AutogradContext* ctx, const variable_list& saved,
                       const at::Tensor& grad, const Geometry& g, size_t n_inputs) {
  py::gil_scoped_acquire gil;
  py::tuple r = (*recorded_backward)(kind, saved[0], saved[1], grad, ctx->needs_input_grad(0),
                                     ctx->needs_input_grad(1), g.stride, g.padding, g.dilation,
                                     g.groups, g.config);
  variable_list out(n_inputs);
  for (size_t i = 0; i < 2; ++i)
    if (!r[i].is_none()) out[i] = r[i].cast<at::Tensor>();
  return out;
}

struct ConvFwd : torch::autograd::Function<ConvFwd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const Ints& stride, const Ints& padding, const Ints& dilation,
                            int64_t groups, int64_t config) {
    ctx->save_for_backward({x, w});
    save_geometry(ctx, stride, padding, dilation, groups, config);
    return conv_fwd(x, w, stride, padding, dilation, groups, config);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Geometry g(ctx);
    if (at::GradMode::is_enabled()) return recorded("conv_fwd", ctx, saved, grads[0], g, 7);
    const at::Tensor &x = saved[0], &w = saved[1];
    variable_list out(7);
    if (ctx->needs_input_grad(0))
      out[0] = conv_bwd_data(w, grads[0], x.sizes().vec(), g.stride, g.padding, g.dilation,
                             g.groups, g.config);
    if (ctx->needs_input_grad(1))
      out[1] = conv_bwd_filter(x, grads[0], w.sizes().vec(), g.stride, g.padding, g.dilation,
                               g.groups, g.config);
    return out;
  }
};

struct ConvBwdData : torch::autograd::Function<ConvBwdData> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& dy,
                            const Ints& x_size, const Ints& stride, const Ints& padding,
                            const Ints& dilation, int64_t groups, int64_t config) {
    ctx->save_for_backward({w, dy});
    save_geometry(ctx, stride, padding, dilation, groups, config);
    return conv_bwd_data(w, dy, x_size, stride, padding, dilation, groups, config);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Geometry g(ctx);
    if (at::GradMode::is_enabled()) return recorded("conv_bwd_data", ctx, saved, grads[0], g, 8);
    const at::Tensor &w = saved[0], &dy = saved[1];
    variable_list out(8);
    if (ctx->needs_input_grad(0))
      out[0] = conv_bwd_filter(grads[0], dy, w.sizes().vec(), g.stride, g.padding, g.dilation,
                               g.groups, g.config);
    if (ctx->needs_input_grad(1))
      out[1] = conv_fwd(grads[0], w, g.stride, g.padding, g.dilation, g.groups, g.config);
    return out;
  }
};

void init(py::object resolve, py::object fwd, py::object bwd_data, py::object bwd_filter,
          py::object recorded) {
  if (ucudnn_import() != 0) throw py::error_already_set();
  resolve_fn = new py::object(std::move(resolve));
  impls[FWD] = new py::object(std::move(fwd));
  impls[BWD_DATA] = new py::object(std::move(bwd_data));
  impls[BWD_FILTER] = new py::object(std::move(bwd_filter));
  recorded_backward = new py::object(std::move(recorded));
}

void clear() {
  std::lock_guard<std::mutex> lock(kernels_mutex);
  kernels.clear();
}

size_t known_calls() {
  std::lock_guard<std::mutex> lock(kernels_mutex);
  return kernels.size();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "The eager calls of ucudnn.torch in C++ (Note [Native calls] in eager.py).";
  m.def("init", &init, "The Python side: resolve, the three implementations, recorded_backward.");
  m.def("clear", &clear, "Forget the kernels known here (Python's stay planned).");
  m.def("known_calls", &known_calls, "How many call keys this module knows.");
  m.def(
      "conv_fwd",
      [](const at::Tensor& x, const at::Tensor& w, const Ints& stride, const Ints& padding,
         const Ints& dilation, int64_t groups, int64_t config) {
        return ConvFwd::apply(x, w, stride, padding, dilation, groups, config);
      },
      py::call_guard<py::gil_scoped_release>(),
      "A convolution's forward, differentiable (ops.conv_fwd's gradients).");
  m.def(
      "conv_transpose",
      [](const at::Tensor& w, const at::Tensor& dy, const Ints& x_size, const Ints& stride,
         const Ints& padding, const Ints& dilation, int64_t groups, int64_t config) {
        return ConvBwdData::apply(w, dy, x_size, stride, padding, dilation, groups, config);
      },
      py::call_guard<py::gil_scoped_release>(),
      "A transposed convolution's forward (conv_bwd_data), differentiable.");
  m.def("conv_bwd_data", &conv_bwd_data, py::call_guard<py::gil_scoped_release>());
  m.def("conv_bwd_filter", &conv_bwd_filter, py::call_guard<py::gil_scoped_release>());
}
