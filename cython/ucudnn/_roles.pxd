# The operand roles of the three ops, one row per op (Note [Operand roles]). Declarations and a
# static C table only: no module of this name is built, and cimporting it imports no module.

# cudnn.h and ucudnn_types.h, whose constants the table below names, are included before it
cimport cudnn as dnn
from ucudnn._types cimport UCUDNN_FWD, UCUDNN_BWD_DATA, UCUDNN_BWD_FILTER

# Note [Operand roles]
#     A kernel has three tensors, x (the input side: x, or the dx that backward-data writes), w
#     (the filter, or the dw that backward-filter writes) and y (the output side: the y that
#     forward writes, or dy), and its caller passes three operands, a and b (read) and out
#     (written): forward a=x b=w out=y, backward-data a=w b=dy out=dx, backward-filter a=x b=dy
#     out=dw (Kernel.run, ucudnn_kernel_run). The row OP_ROLES[op] says, for one op:
#       operand[t]     which operand (A, B, OUT) holds tensor t (TENSOR_X, TENSOR_W, TENSOR_Y):
#                      run_kernel's pointers of each micro-batch;
#       out            the tensor the op writes: which inputs the check of graph results
#                      converts, which output it compares and how it fills it first
#                      (Note [Graph results checked] in _check.pyx);
#       accumulates    the written tensor is the filter, whole in every micro-batch, so every
#                      chunk after the first adds into it with beta 1 (Note [Micro-batch
#                      semantics] in _run.pyx) and both families time the op with beta 1 (Note
#                      [Backward-filter timed with beta 1] in _timing.pyx): the beta of the
#                      plans built and timed, which beta's graph plan must build (_graph.pyx);
#       n_algos        how many legacy algorithms cuDNN has for the op
#                      (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t's count).
#     The core reads these instead of switching on the op, as PyTorch's cuDNN convolution
#     (Conv_v8.cpp) passes the op as a parameter and the graph family's graph.h indexes its
#     descriptors and attributes by op. Each call kind of the legacy API keeps one dispatch on
#     the op, since cuDNN gives it a different C signature per op (argument order, the perf
#     record's type): the convolution call (conv_call in _conv.pxd), cudnnFind...AlgorithmEx
#     (_find_c in _legacy.pyx) and cudnnGet...WorkspaceSize (_legacy_workspace there).

cdef extern from *:
    """
    enum { UCUDNN_TENSOR_X, UCUDNN_TENSOR_W, UCUDNN_TENSOR_Y };         /* a kernel's tensors */
    enum { UCUDNN_OPERAND_A, UCUDNN_OPERAND_B, UCUDNN_OPERAND_OUT };   /* a caller's operands */

    typedef struct ucudnn_op_roles {
      int operand[3];     /* by tensor (x, w, y): the operand (a, b, out) that holds it */
      int out;            /* the tensor the op writes */
      int accumulates;    /* the output is the filter: chunks after the first add (beta 1) */
      int n_algos;        /* legacy algorithms of the op */
    } ucudnn_op_roles;

    /* Note [Operand roles] in cython/ucudnn/_roles.pxd */
    static const ucudnn_op_roles UCUDNN_OP_ROLES[3] = {
      [UCUDNN_FWD] = {{UCUDNN_OPERAND_A, UCUDNN_OPERAND_B, UCUDNN_OPERAND_OUT},
                      UCUDNN_TENSOR_Y, 0, CUDNN_CONVOLUTION_FWD_ALGO_COUNT},
      [UCUDNN_BWD_DATA] = {{UCUDNN_OPERAND_OUT, UCUDNN_OPERAND_A, UCUDNN_OPERAND_B},
                           UCUDNN_TENSOR_X, 0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT},
      [UCUDNN_BWD_FILTER] = {{UCUDNN_OPERAND_A, UCUDNN_OPERAND_OUT, UCUDNN_OPERAND_B},
                             UCUDNN_TENSOR_W, 1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT},
    };
    """
    enum:
        TENSOR_X "UCUDNN_TENSOR_X"
        TENSOR_W "UCUDNN_TENSOR_W"
        TENSOR_Y "UCUDNN_TENSOR_Y"
    enum:
        OPERAND_A "UCUDNN_OPERAND_A"
        OPERAND_B "UCUDNN_OPERAND_B"
        OPERAND_OUT "UCUDNN_OPERAND_OUT"
    ctypedef struct ucudnn_op_roles:
        int operand[3]
        int out
        int accumulates
        int n_algos
    const ucudnn_op_roles OP_ROLES "UCUDNN_OP_ROLES"[3]
