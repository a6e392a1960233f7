"""The comparison of every setting's curves with stock's: one run each (:func:`compare`), and
over several seeds (:func:`compare_seeds`); the targets they are judged by.

Note [Training equivalence]
    The settings differ only in how each convolution is computed: which cuDNN algorithm
    (stock Caffe takes cuDNN's heuristic choice within its 8 MiB per layer; ucudnn the fastest
    benchmarked one within the limit, per micro-batch size) and, for the micro-batched plans,
    in how many pieces. Forward and backward-data compute every sample on its own, so splitting
    the batch changes nothing but the algorithm that computes a sample. Backward-filter sums
    over the batch: a plan of k micro-batches adds k partial sums (cuDNN's beta = 1
    accumulation), another summation order than one call over the whole batch -- as another
    algorithm is. In fp32 each such gradient differs by a few units of rounding (relative
    1e-7 .. 1e-6). Several cuDNN algorithms are not deterministic (atomics), so stock Caffe
    differs from itself from one process to the next; ``stock-rerun`` (a second stock
    process) measures that floor.

    ReLU makes single elements differ by O(1), not by rounding: its gradient jumps at 0, so a
    convolution output that one algorithm computes as +1e-7 and another as -1e-7 passes its
    upstream gradient in one run and none in the other (Note [pycaffe comparisons] in
    tests/gpu/test_pycaffe_gpu.py). Every setting that picks another forward algorithm than stock
    does this, micro-batched or not; SGD then carries it on.

    So bitwise equality is not expected. What is expected:

    * the same initial weights in every setting (the solver's ``random_seed``; the SHA-256 of
      the weights before the first update is recorded per run and must agree);
    * iteration 0 (same weights, same batch, only the forward algorithms differ): losses equal
      to fp32 rounding, relative difference <= 1e-5;
    * afterwards the differences grow -- SGD on a non-convex net amplifies perturbations.
      :func:`compare` holds one run against stock's: training loss within
      :data:`LOSS_TARGET` (relative) at every recorded iteration, final held-out accuracy
      within :data:`ACCURACY_TARGET_PP`. Stock against its own re-run can miss these bounds
      (results/h200/training/), so they are reported, not relied on. Where stock picks only
      deterministic algorithms, ``stock-rerun`` is bitwise equal and shows no floor.
    * several seeds (``--seeds``, :func:`compare_seeds`) test whether micro-batching moves the
      curves more than run-to-run noise does: over k seeds (each its own initial weights and
      batch order), the difference of the seeds' mean accuracies (last
      :data:`LAST_EVALUATIONS` evaluations of each run) within 2 standard errors, and the
      seed-averaged trailing-mean loss no further from stock's than 1.5 times stock's own
      re-run is.
    * a relative difference of single-iteration losses is most fragile where the loss is near
      zero (digits reaches ~0.005: 1 % is then 5e-5 absolute), so the summary also gives the
      difference of :data:`SMOOTHING`-iteration means and of the held-out accuracy, and the
      relative L2 difference of the final weights to stock's.

    TF32 would hide all of this: with TF32 tensor cores an fp32 convolution is only ~1e-3
    accurate, four orders of magnitude above the summation-order effect. ucudnn's settings run
    with ``math: FMA``; stock Caffe has no such field and uses cuDNN's default math, which may
    use TF32 for fp32 data. Every setting's process therefore runs with
    ``NVIDIA_TF32_OVERRIDE=0`` (:data:`.child.STRICT_FP32_ENV`: no TF32 in cuDNN or cuBLAS),
    which makes all of them strict fp32; the metadata records it.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .curves import Row, by_setting
from .settings import setting_order

#: the targets of one run against stock: relative training-loss difference, and final held-out
#: accuracy difference in percentage points
LOSS_TARGET = 0.01
ACCURACY_TARGET_PP = 0.5

#: iterations of the trailing mean in ``max_rel_smoothed_loss_diff`` (the batch-to-batch
#: noise of a single iteration's loss averaged out, as Caffe's ``average_loss`` does)
SMOOTHING = 20

#: held-out evaluations averaged at the end of a run (one evaluation of 1,024 samples swings
#: by a few percentage points between neighbouring evaluations of one run)
LAST_EVALUATIONS = 5


def rel_diff(a: float, b: float) -> float:
    """|a - b| / |b|; 0 where equal, inf where only b is 0."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def compare(rows: Iterable[Row], reference: str = "stock",
            plans: Optional[Mapping[str, Mapping[str, dict]]] = None) -> dict:
    """Per net and setting, the differences to ``reference`` over the iterations both
    recorded: ``max_rel_loss_diff`` (max |loss - ref| / ref) and the iteration where it is
    largest, ``rel_loss_diff_iteration0``, ``median_rel_loss_diff``, ``max_rel_loss_diff_first``
    (over the first 10 % of the iterations), the final held-out accuracy of both and
    ``final_accuracy_diff_pp`` (percentage points, at the last iteration both evaluated),
    ``max_abs_accuracy_diff_pp``, ``bitwise_equal`` (every loss and accuracy identical), and
    whether the targets hold (:data:`LOSS_TARGET`, :data:`ACCURACY_TARGET_PP`).
    ``plans``: {net: {setting: run record}} adds how many kernels each plan split."""
    out: Dict[str, Dict[str, dict]] = {}
    for net, per in by_setting(rows).items():
        ref = per.get(reference)
        res: Dict[str, dict] = {}
        for setting in sorted(per, key=setting_order):
            rows_s = per[setting]
            rec: Dict[str, Any] = {"iterations": len(rows_s),
                                   "last_iteration": rows_s[-1].iteration if rows_s else None}
            acc = [r for r in rows_s if r.test_accuracy is not None]
            rec["final_accuracy"] = acc[-1].test_accuracy if acc else None
            rec["final_loss"] = next((r.loss for r in reversed(rows_s) if r.loss is not None),
                                     None)
            if ref is not None and setting != reference:
                rec.update(_diff(rows_s, ref))
            run = ((plans or {}).get(net) or {}).get(setting)
            if run:
                rec.update(_plan_facts(run))
            res[setting] = rec
        out[net] = res
    return {"reference": reference, "loss_target": LOSS_TARGET,
            "accuracy_target_pp": ACCURACY_TARGET_PP, "nets": out}


def _diff(rows: List[Row], ref: List[Row]) -> dict:
    by_it = {r.iteration: r for r in ref}
    pairs = [(r, by_it[r.iteration]) for r in rows if r.iteration in by_it]
    losses = [(r.iteration, rel_diff(r.loss, s.loss)) for r, s in pairs
              if r.loss is not None and s.loss is not None]
    accs = [(r.iteration, 100.0 * (r.test_accuracy - s.test_accuracy)) for r, s in pairs
            if r.test_accuracy is not None and s.test_accuracy is not None]
    d: Dict[str, Any] = {"compared_iterations": len(losses)}
    if losses:
        it_max, mx = max(losses, key=lambda p: (p[1], -p[0]))
        last = max(i for i, _ in losses)
        first = [v for i, v in losses if i <= max(1, last // 10)]
        d.update({"max_rel_loss_diff": mx, "max_rel_loss_diff_iteration": it_max,
                  "rel_loss_diff_iteration0": dict(losses).get(0),
                  "median_rel_loss_diff": statistics.median(v for _, v in losses),
                  "max_rel_loss_diff_first": max(first) if first else None,
                  "max_rel_smoothed_loss_diff": _smoothed_diff(pairs),
                  "loss_within_target": mx <= LOSS_TARGET})
    if accs:
        d.update({"final_accuracy_diff_pp": accs[-1][1],
                  "final_accuracy_iteration": accs[-1][0],
                  "max_abs_accuracy_diff_pp": max(abs(v) for _, v in accs),
                  "accuracy_within_target": abs(accs[-1][1]) <= ACCURACY_TARGET_PP})
    d["bitwise_equal"] = bool(pairs) and all(
        r.loss == s.loss and r.test_accuracy == s.test_accuracy for r, s in pairs)
    return d


def _smoothed_diff(pairs) -> Optional[float]:
    """max over iterations of |mean - ref mean| / ref mean of the trailing
    :data:`SMOOTHING`-iteration means of the loss (over iterations both recorded)."""
    both = [(r.loss, s.loss) for r, s in pairs if r.loss is not None and s.loss is not None]
    if len(both) < SMOOTHING:
        return None
    out = 0.0
    for i in range(SMOOTHING, len(both) + 1):
        window = both[i - SMOOTHING:i]
        out = max(out, rel_diff(sum(a for a, _ in window), sum(b for _, b in window)))
    return out


def _plan_facts(run: dict) -> dict:
    """What a run record says of its plans (how many kernels split the batch) and weights."""
    kernels = run.get("kernels") or {}
    return {"kernels": len(kernels), "kernels_split": sum(1 for k in kernels.values()
                                                          if k.get("split")),
            "split_kernels": sorted(k for k, v in kernels.items() if v.get("split")),
            "initial_weights_sha256": run.get("initial_weights_sha256"),
            "final_weights_rel_diff": run.get("final_weights_rel_diff")}


def _mean_sd(xs: Sequence[float]) -> Tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _trailing_means(rows: List[Row]) -> Dict[int, float]:
    """{iteration: mean loss of the SMOOTHING iterations ending there} (rows with a loss)."""
    pts = [(r.iteration, r.loss) for r in rows if r.loss is not None]
    return {pts[i - 1][0]: sum(l for _, l in pts[i - SMOOTHING:i]) / SMOOTHING
            for i in range(SMOOTHING, len(pts) + 1)}


def compare_seeds(runs: Mapping[int, Iterable[Row]], reference: str = "stock",
                  control: str = "stock-rerun") -> dict:
    """Note [Training equivalence], several seeds: per net and setting, over the seeds (each
    seed its own initial weights and batch order, every setting of a seed the same ones):

    * ``accuracy``: the mean of the last :data:`LAST_EVALUATIONS` held-out accuracies of each
      seed, their mean and standard deviation over the seeds, the difference of means to
      ``reference`` in percentage points and its standard error;
    * ``seed_mean_loss_diff``: max over iterations of the relative difference between the
      seed-averaged, :data:`SMOOTHING`-iteration trailing-mean loss of the setting and of
      ``reference``;
    * ``paired_loss_diff``: per seed, the max relative difference of trailing means to the
      same seed's ``reference`` run (what one pair of runs shows);
    * ``within_noise``: |difference of mean accuracies| <= 2 standard errors, and the
      seed-mean loss difference no more than 1.5 times ``control``'s (stock against itself:
      the floor that run-to-run noise sets); ``issue_targets``: the one-run targets applied to
      the seed means (loss within 1 % at every iteration, accuracy within 0.5 pp)."""
    per_seed = {seed: by_setting(rows) for seed, rows in runs.items()}
    seeds = sorted(per_seed)
    nets = sorted({net for c in per_seed.values() for net in c})
    out: Dict[str, Any] = {"reference": reference, "control": control, "seeds": seeds,
                           "smoothing": SMOOTHING, "last_evaluations": LAST_EVALUATIONS,
                           "nets": {}}
    for net in nets:
        settings = sorted({s for c in per_seed.values() for s in c.get(net, {})},
                          key=setting_order)
        have = [s for s in settings if all(s in per_seed[k].get(net, {}) for k in seeds)]
        if reference not in have:
            continue
        stats: Dict[str, dict] = {}
        means: Dict[str, Dict[int, float]] = {}
        trail = {s: [_trailing_means(per_seed[k][net][s]) for k in seeds] for s in have}
        for s in have:
            accs, paired, traj = [], [], trail[s]
            for k, mine, ref in zip(seeds, traj, trail[reference]):
                ev = [r.test_accuracy for r in per_seed[k][net][s] if r.test_accuracy is not None]
                if ev:
                    accs.append(100.0 * statistics.fmean(ev[-LAST_EVALUATIONS:]))
                if s != reference:
                    paired.append(max((rel_diff(mine[i], ref[i]) for i in mine if i in ref),
                                      default=0.0))
            its = sorted(set.intersection(*(set(t) for t in traj))) if traj else []
            means[s] = {i: statistics.fmean(t[i] for t in traj) for i in its}
            m, sd = _mean_sd(accs) if accs else (None, None)
            stats[s] = {"accuracy_mean_pp": m, "accuracy_sd_pp": sd, "accuracy_per_seed": accs,
                        "paired_loss_diff": paired,
                        "paired_loss_diff_median": statistics.median(paired) if paired else None}
        ref = stats[reference]
        for s in have:
            if s == reference:
                continue
            st = stats[s]
            common = [i for i in means[s] if i in means[reference]]
            st["seed_mean_loss_diff"] = max((rel_diff(means[s][i], means[reference][i])
                                             for i in common), default=None)
            if st["accuracy_mean_pp"] is not None and ref["accuracy_mean_pp"] is not None:
                k = len(seeds)
                st["accuracy_diff_pp"] = st["accuracy_mean_pp"] - ref["accuracy_mean_pp"]
                st["accuracy_diff_se_pp"] = math.sqrt((st["accuracy_sd_pp"] ** 2
                                                       + ref["accuracy_sd_pp"] ** 2) / k)
        ctl = stats.get(control, {}).get("seed_mean_loss_diff")
        for s in have:
            st = stats[s]
            if s == reference or st.get("accuracy_diff_pp") is None:
                continue
            acc_ok = abs(st["accuracy_diff_pp"]) <= 2.0 * st["accuracy_diff_se_pp"]
            loss_ok = (st["seed_mean_loss_diff"] is not None and ctl is not None
                       and st["seed_mean_loss_diff"] <= 1.5 * ctl) if s != control else True
            st["within_noise"] = bool(acc_ok and loss_ok)
            st["issue_targets"] = bool(st["seed_mean_loss_diff"] is not None
                                       and st["seed_mean_loss_diff"] <= LOSS_TARGET
                                       and abs(st["accuracy_diff_pp"]) <= ACCURACY_TARGET_PP)
        out["nets"][net] = stats
    return out
