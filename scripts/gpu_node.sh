#!/usr/bin/env bash
# ucudnn on an air-gapped GPU node: install, build Caffe, test, run the paper's grid.
#
# On a connected machine, next to the checkout:
#   scripts/gather_offline.sh .offline      # Caffe source + the libraries the node lacks
#   python3 scripts/node_wheels.py .wheels  # the Python packages it lacks: grpcio-tools
#                                           # (the build's protobuf compiler) and PuLP (its
#                                           # CBC runs the ILP), slimmed to the node's CBC
# copy the checkout (with .offline and .wheels) to the node, then there:
#   scripts/gpu_node.sh setup test grid
#
# Stages (run in the order given):
#   setup   pip install the wheels and ucudnn (compiles the core for this Python, no
#           network), then scripts/build_caffe.sh --offline (Caffe + ucudnn_compare + the
#           patch's gtests and Caffe's convolution and batch-norm gtests + pycaffe for the
#           same Python, its Boost.Python compiled from the bundle's sources)
#   test    pytest -m gpu --require-gpu: the core, the C API host, the patched Caffe
#           (tests/gpu/test_caffe_gpu.py), pycaffe (tests/gpu/test_pycaffe_gpu.py); a GPU test that
#           would skip fails (Note [Test tiers]; so with --no-pycaffe the pycaffe tests fail)
#   grid    ucudnn reproduce --out OUT (resumes what OUT already holds)
# Options:
#   --offline DIR   bundle made by gather_offline.sh (default .offline)
#   --wheels DIR    wheels to install first (default .wheels; skipped when absent)
#   --out DIR       results folder of the grid (default results/h200)
#   --jobs N        build jobs (default nproc)
#   --cache-seed F  copy benchmark cache F to $UCUDNN_CACHE first when that does not exist yet
#                   (measurements carried from an earlier run skip benchmarking)
#   --no-pycaffe    build Caffe without pycaffe (build_caffe.sh --no-python)
#   --             the rest goes to `ucudnn reproduce` (e.g. --nets alexnet --iterations 10)
# Environment: UCUDNN_CACHE (benchmark cache; default ~/.cache/ucudnn/bench.sqlite);
#   CUDNN_ROOT (the cuDNN the core and Caffe build against, e.g. PyTorch's wheel
#   "$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])')"; default: the newest
#   found, Note [Which cuDNN] in setup.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$HERE"
OFFLINE=.offline
WHEELS=.wheels
OUT=results/h200
JOBS="$(nproc)"
SEED=""
PYCAFFE=1
STAGES=()
GRID_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --offline) OFFLINE="$2"; shift 2 ;;
    --wheels)  WHEELS="$2"; shift 2 ;;
    --out)     OUT="$2"; shift 2 ;;
    --jobs)    JOBS="$2"; shift 2 ;;
    --cache-seed) SEED="$2"; shift 2 ;;
    --no-pycaffe) PYCAFFE=0; shift ;;
    --)        shift; GRID_ARGS=("$@"); break ;;
    setup|test|grid) STAGES+=("$1"); shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "gpu_node.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#STAGES[@]} -gt 0 ]] || { echo "gpu_node.sh: name a stage: setup, test, grid" >&2; exit 2; }
PY="${PYTHON:-python3}"
say() { printf '[gpu_node %s] %s\n' "$(date +%T)" "$*"; }
if [[ -n "$SEED" ]]; then
  cache="${UCUDNN_CACHE:-$HOME/.cache/ucudnn/bench.sqlite}"
  if [[ ! -e "$cache" ]]; then
    mkdir -p "$(dirname "$cache")"
    cp "$SEED" "$cache" && chmod u+w "$cache"
    say "benchmark cache seeded from $SEED -> $cache"
  fi
fi

for stage in "${STAGES[@]}"; do
  case "$stage" in
    setup)
      if compgen -G "$WHEELS/*.whl" >/dev/null; then
        say "installing $(ls "$WHEELS"/*.whl | wc -l) wheel(s) from $WHEELS"
        "$PY" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl
      fi
      say "installing ucudnn (compiles the core)"
      "$PY" -m pip install -q --no-index --no-deps --no-build-isolation .
      "$PY" -P -m ucudnn info
      say "building Caffe from $OFFLINE"
      # pycaffe for the Python that has ucudnn (import caffe with ucudnn layers needs one
      # Python for both)
      pyexe="$(command -v "$PY")"
      pyargs=(--python "$pyexe")
      [[ $PYCAFFE -eq 1 ]] || pyargs=(--no-python)
      scripts/build_caffe.sh --offline "$OFFLINE" --jobs "$JOBS" --ucudnn-python "$PY" "${pyargs[@]}" \
        --cmake-arg -DBUILD_only_tests=ucudnn_conv_layer,convolution_layer,cudnn_batch_norm_layer,batch_norm_layer,scale_layer,bias_layer,layout,pooling_layer
      if [[ $PYCAFFE -eq 1 ]]; then
        if [[ -e third_party/caffe/src/python/caffe/_caffe.so ]]; then
          say "pycaffe: PYTHONPATH=$HERE/third_party/caffe/src/python $pyexe -c 'import caffe'"
          say "         (tests/gpu/test_pycaffe_gpu.py finds it there, or at \$UCUDNN_PYCAFFE)"
        else
          say "pycaffe was not built (see build_caffe.sh's 'pycaffe:' lines above)"
        fi
      fi
      ;;
    test)
      say "pytest -m gpu"
      "$PY" -P -m pytest -m gpu --require-gpu -q -p no:cacheprovider tests
      ;;
    grid)
      say "ucudnn reproduce --out $OUT ${GRID_ARGS[*]}"
      UCUDNN_CAFFE="${UCUDNN_CAFFE:-$HERE/third_party/caffe/build/tools/caffe}" \
        "$PY" -P -m ucudnn reproduce --out "$OUT" "${GRID_ARGS[@]}"
      ;;
  esac
done
say "done: ${STAGES[*]}"
