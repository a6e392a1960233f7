"""A stand-in for the core's ``Kernel`` (ucudnn._core) for CPU tests of what plans live
kernels (ucudnn.measure.runtime): the attributes the runtime reads and writes, with the
core's constructor signature; its benchmark comes from whatever the test puts in
``ucudnn.measure.bench.measure``."""
from ucudnn.plan.conv import ConvShape

SHAPE = ConvShape(16, 8, 8, 16, 3, 3, 1, 1)


class FakeKernel:
    def __init__(self, shape, op, n, dtype="float32", math="default", name=None, instances=1):
        self.shape, self.op, self.n, self.name = shape, op, n, name
        self.dtype, self.math, self.device, self.instances = dtype, math, 0, instances
        self.plan = self.bench = self.settings = self.bench_record = self.timing = None
        self.workspace_size = 0
        self.held = []          # the hold_benchmark_buffers calls, in order
        self.benchmark_seconds = {"setup": 0.0, "warmup_find": 0.0, "find": 0.0,
                                  "retime": 0.0}

    def hold_benchmark_buffers(self, hold):
        self.held.append(bool(hold))

    def set_plan(self, plan):
        self.plan, self.workspace_size = plan, plan.ws_bytes

    def workspace_for(self, batch, algo, math):
        return next(p.ws_bytes for p in self.bench[batch] if p.algo == algo)


def fake_kernel(name, op="fwd", n=8, instances=1):
    """A small kernel (16 -> 16 channels, 8x8, 3x3) named ``name``."""
    return FakeKernel(SHAPE, op, n, name=name, instances=instances)
