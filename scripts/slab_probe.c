/* Slabs on cuDNN's graph engines (Note [Slabs below one sample] in ucudnn/plan/slabs.py):
 * do they build plans with unequal pre/post padding along depth and with tensor views into
 * a larger tensor, how much workspace and time do the pieces take, and are their results
 * right? nnU-Net's 32->32 3x3x3 convolution (pad 1) at 128^3, batch 1, NCDHW, all three
 * ops: the undivided convolution, its two slabs (unequal pads) and an inner slab of four
 * (equal pads, a view); for each, every engine config of heuristics modes A (the first
 * maxcfg) and FALLBACK, built, run, timed (best of 3, CUDA events) and compared with the
 * undivided result of the first FALLBACK config that runs (for backward-filter, that
 * config on dy with the rows outside the slab zeroed): max |got - ref| / max |ref|.
 *
 * Build and run on a GPU host, with the core installed (its _build_config.json names the
 * cuDNN that torch loads), from the repository root:
 *   FL=$(python3 -P -c 'import json,ucudnn,os;c=json.load(open(os.path.join(os.path.dirname(
 *       ucudnn.__file__),"_build_config.json")));print(" ".join(["-I"+i for i in
 *       c["include_dirs"]]+c["libraries"]+["-Wl,-rpath,"+d for d in c["library_dirs"]]))')
 *   gcc -O2 -Icython/ucudnn scripts/slab_probe.c -o /tmp/slab_probe $FL -lm
 *   /tmp/slab_probe bf16 24 > results/h100/slabs/probe_bf16.txt
 *   /tmp/slab_probe fp32 16 > results/h100/slabs/probe_fp32.txt
 * Usage: slab_probe bf16|fp32 [maxcfg] */
#include <cuda_runtime.h>
#include <math.h>
#include "graph.h"

#define C 32
#define K 32
#define S 128
#define V ((size_t)S * S * S)
typedef struct { int op, x0, x1, y0, y1, pre, post; const char *name; } Case;
static int bf16 = 1;
static size_t esz = 2;
static cudnnHandle_t h;

static float h2f(const void *p, size_t i) {
  if (bf16) { uint32_t u = ((const uint16_t *)p)[i]; u <<= 16; float f; memcpy(&f, &u, 4); return f; }
  return ((const float *)p)[i];
}
static void *rnd(size_t n, unsigned seed) {
  void *hbuf = malloc(n * esz), *d = NULL;
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float f = ((s >> 8) / 16777216.0f) * 2.f - 1.f;
    if (bf16) { uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)hbuf)[i] = (uint16_t)((u + 0x8000) >> 16); }
    else ((float *)hbuf)[i] = f;
  }
  cudaMalloc(&d, n * esz); cudaMemcpy(d, hbuf, n * esz, cudaMemcpyHostToDevice); free(hbuf);
  return d;
}
static void *dalloc(size_t n) { void *d = NULL; cudaMalloc(&d, n * esz); return d; }

static void geom_of(const Case *c, ucudnn_graph_geom *g) {
  int64_t cs[5] = {C * V, V, S * S, S, 1}, ks[5] = {K * V, V, S * S, S, 1};
  memset(g, 0, sizeof *g);
  g->op = c->op; g->dtype = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; g->compute = CUDNN_DATA_FLOAT;
  g->nbdims = 5; g->align = 16;
  int64_t xd[5] = {1, C, c->x1 - c->x0, S, S}, yd[5] = {1, K, c->y1 - c->y0, S, S}, wd[5] = {K, C, 3, 3, 3};
  int64_t ws[5] = {C * 27, 27, 9, 3, 1};
  memcpy(g->xdim, xd, sizeof xd); memcpy(g->ydim, yd, sizeof yd); memcpy(g->wdim, wd, sizeof wd);
  memcpy(g->xstr, cs, sizeof cs); memcpy(g->ystr, ks, sizeof ks); memcpy(g->wstr, ws, sizeof ws);
  for (int i = 0; i < 3; ++i) { g->pad[i] = g->post[i] = 1; g->stride[i] = g->dil[i] = 1; }
  g->pad[0] = c->pre; g->post[0] = c->post;
}

/* max |a-r| / max |r| over n elements at device a, r, both with row segments: `segs` segments
 * of `len` elements at pitch `pitch` starting at offset `off` */
static double relerr(const void *a, const void *r, size_t off, size_t len, size_t pitch, int segs) {
  size_t n = len * segs;
  char *ha = malloc(n * esz), *hr = malloc(n * esz);
  cudaMemcpy2D(ha, len * esz, (const char *)a + off * esz, pitch * esz, len * esz, segs, cudaMemcpyDeviceToHost);
  cudaMemcpy2D(hr, len * esz, (const char *)r + off * esz, pitch * esz, len * esz, segs, cudaMemcpyDeviceToHost);
  double m = 0, e = 0;
  for (size_t i = 0; i < n; ++i) {
    float x = h2f(ha, i), y = h2f(hr, i);
    if (isnan(x) || isinf(x)) { e = INFINITY; break; }
    if (fabs(y) > m) m = fabs(y);
    if (fabs(x - y) > e) e = fabs(x - y);
  }
  free(ha); free(hr);
  return m > 0 ? e / m : e;
}

static int same_cfg(const ucudnn_engine_config *a, const ucudnn_engine_config *b) {
  if (a->engine != b->engine || a->n_knobs != b->n_knobs) return 0;
  for (int i = 0; i < a->n_knobs; ++i)
    if (a->knob_type[i] != b->knob_type[i] || a->knob_value[i] != b->knob_value[i]) return 0;
  return 1;
}
static int configs(const ucg_graph *g, ucudnn_engine_config *out, int maxcfg) {
  char msg[256];
  int n = 0, got = 0;
  ucudnn_engine_config tmp[UCG_MAX_CONFIGS];
  int modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  for (int m = 0; m < 2; ++m) {
    got = 0;
    ucg_heuristics(g, modes[m], tmp, m ? 16 : maxcfg, &got, msg, sizeof msg);
    for (int i = 0; i < got; ++i) {
      int dup = 0;
      for (int j = 0; j < n; ++j) dup |= same_cfg(&tmp[i], &out[j]);
      if (!dup && n < 2 * UCG_MAX_CONFIGS) out[n++] = tmp[i];
    }
  }
  return n;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "fp32")) { bf16 = 0; esz = 4; }
  int maxcfg = argc > 2 ? atoi(argv[2]) : 24;
  cudnnCreate(&h);
  void *X = rnd(C * V, 1), *W = rnd(K * C * 27, 2), *DY = rnd(K * V, 3);
  void *Y = dalloc(K * V), *Yr = dalloc(K * V), *DX = dalloc(C * V), *DXr = dalloc(C * V);
  void *DW = dalloc(K * C * 27), *DWr = dalloc(K * C * 27), *DYm = dalloc(K * V);
  static const Case cases[] = {
      {0, 0, 128, 0, 128, 1, 1, "fwd full"},
      {0, 0, 65, 0, 64, 1, 0, "fwd 2/0 pre1 post0"},
      {0, 63, 128, 64, 128, 0, 1, "fwd 2/1 pre0 post1"},
      {0, 31, 65, 32, 64, 0, 0, "fwd 4/1 pads0 (view)"},
      {1, 0, 128, 0, 128, 1, 1, "bwd_data full"},
      {1, 0, 64, 0, 65, 1, 2, "bwd_data 2/0 pre1 post2"},
      {1, 64, 128, 63, 128, 2, 1, "bwd_data 2/1 pre2 post1"},
      {1, 32, 64, 31, 65, 2, 2, "bwd_data 4/1 pre2 post2"},
      {2, 0, 128, 0, 128, 1, 1, "bwd_filter full"},
      {2, 0, 65, 0, 64, 1, 0, "bwd_filter 2/0 pre1 post0"},
      {2, 63, 128, 64, 128, 0, 1, "bwd_filter 2/1 pre0 post1"},
      {2, 31, 65, 32, 64, 0, 0, "bwd_filter 4/1 pads0 (view)"},
  };
  ucudnn_engine_config cf[2 * UCG_MAX_CONFIGS];
  ucg_plan ref;
  ucg_graph refg;
  memset(&ref, 0, sizeof ref);
  memset(&refg, 0, sizeof refg);
  void *refws = NULL;
  char msg[512];
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  printf("dtype %s\n", bf16 ? "bf16" : "fp32");
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ++ci) {
    const Case *c = &cases[ci];
    ucudnn_graph_geom geom;
    ucg_graph g;
    geom_of(c, &geom);
    cudnnStatus_t st = ucg_graph_build(h, &geom, 1, 0.0, &g, msg, sizeof msg);
    if (st) { printf("%s: graph %s\n", c->name, msg); ucg_graph_destroy(&g); continue; }
    int n = configs(&g, cf, maxcfg);
    int full = c->x0 == 0 && c->x1 == S && c->y0 == 0 && c->y1 == S;
    size_t xo = (size_t)c->x0 * S * S, yo = (size_t)c->y0 * S * S;
    const void *xs, *ys; void *out; const void *r;
    if (c->op == 0) { xs = (char *)X + xo * esz; ys = (char *)Y + yo * esz; out = Y; r = Yr; }
    else if (c->op == 1) { xs = (char *)DX + xo * esz; ys = (char *)DY + yo * esz; out = DX; r = DXr; }
    else { xs = (char *)X + xo * esz; ys = (char *)DY + yo * esz; out = DW; r = DWr; }
    const void *wp = c->op == 2 ? DW : W;
    if (full) {  /* the reference: the first fallback-listed config that runs */
      ucg_graph_destroy(&refg); ucg_plan_destroy(&ref); cudaFree(refws); refws = NULL;
      memset(&refg, 0, sizeof refg);
      ucg_graph_build(h, &geom, 1, 0.0, &refg, msg, sizeof msg);
      ucudnn_engine_config fb[UCG_MAX_CONFIGS]; int nf = 0;
      ucg_heuristics(&refg, CUDNN_HEUR_MODE_FALLBACK, fb, 16, &nf, msg, sizeof msg);
      int okr = 0;
      for (int i = 0; i < nf && !okr; ++i) {
        if (ucg_plan_build(h, &refg, &fb[i], &ref, msg, sizeof msg)) { ucg_plan_destroy(&ref); continue; }
        cudaMalloc(&refws, ref.ws_bytes + 1);
        okr = ucg_execute(h, &ref, c->op == 1 ? DX : X, c->op == 2 ? DW : W, c->op == 0 ? Y : DY, refws) == 0;
        okr = okr && cudaDeviceSynchronize() == cudaSuccess;
        if (!okr) { ucg_plan_destroy(&ref); cudaFree(refws); refws = NULL; continue; }
        printf("%s: reference eng%lld ws %.1f MiB\n", c->name, (long long)fb[i].engine, ref.ws_bytes / 1048576.0);
      }
      /* run the reference into r */
      if (c->op == 0) ucg_execute(h, &ref, X, W, Yr, refws);
      else if (c->op == 1) ucg_execute(h, &ref, DXr, W, DY, refws);
      cudaDeviceSynchronize();
    }
    if (c->op == 2) {  /* reference partial sum: dy masked to the slab's rows */
      cudaMemset(DYm, 0, K * V * esz);
      cudaMemcpy2D((char *)DYm + yo * esz, V * esz, (char *)DY + yo * esz, V * esz,
                   (size_t)(c->y1 - c->y0) * S * S * esz, K, cudaMemcpyDeviceToDevice);
      ucg_execute(h, &ref, X, DWr, DYm, refws);
      cudaDeviceSynchronize();
    }
    printf("%s: %d configs\n", c->name, n);
    for (int i = 0; i < n; ++i) {
      ucg_plan p;
      char knobs[160] = "";
      for (int k = 0; k < cf[i].n_knobs && strlen(knobs) < 140; ++k)
        snprintf(knobs + strlen(knobs), 20, "%lld=%lld,", (long long)cf[i].knob_type[k], (long long)cf[i].knob_value[k]);
      st = ucg_plan_build(h, &g, &cf[i], &p, msg, sizeof msg);
      if (st) { printf("  eng%-3lld %-40s build FAIL %s\n", (long long)cf[i].engine, knobs, msg); ucg_plan_destroy(&p); continue; }
      void *ws = NULL;
      if (cudaMalloc(&ws, p.ws_bytes + 1)) { printf("  eng%lld ws alloc fail\n", (long long)cf[i].engine); ucg_plan_destroy(&p); continue; }
      size_t on = c->op == 0 ? K * V : c->op == 1 ? C * V : (size_t)K * C * 27;
      cudaMemset(out, 0xFF, on * esz);
      st = ucg_execute(h, &p, xs, wp, ys, ws);
      cudaError_t ce = cudaDeviceSynchronize();
      if (st || ce) { printf("  eng%-3lld %-40s exec FAIL %s / %s\n", (long long)cf[i].engine, knobs, cudnnGetErrorString(st), cudaGetErrorString(ce)); cudaGetLastError(); cudaFree(ws); ucg_plan_destroy(&p); continue; }
      double err;
      if (c->op == 0) err = relerr(out, r, yo, (size_t)(c->y1 - c->y0) * S * S, V, K);
      else if (c->op == 1) err = relerr(out, r, xo, (size_t)(c->x1 - c->x0) * S * S, V, C);
      else err = relerr(out, r, 0, (size_t)K * C * 27, (size_t)K * C * 27, 1);
      float best = 1e30f;
      for (int rep = 0; rep < 3; ++rep) {
        float ms;
        cudaEventRecord(e0, 0);
        ucg_execute(h, &p, xs, wp, ys, ws);
        cudaEventRecord(e1, 0); cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best) best = ms;
      }
      printf("  eng%-3lld %-40s ws %8.2f MiB  %8.3f ms  relerr %.2e\n", (long long)cf[i].engine, knobs,
             p.ws_bytes / 1048576.0, best, err);
      fflush(stdout);
      cudaFree(ws); ucg_plan_destroy(&p);
    }
    ucg_graph_destroy(&g);
  }
  return 0;
}
