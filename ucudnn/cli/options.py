"""The plan settings on the command line, one validation for ``ucudnn plan`` and ``ucudnn
prototxt``: which options there are, what each may be combined with, and the
:class:`~ucudnn.plan.settings.PlanSettings` fields they give.

Note [Settings options]
    ``--policy`` or ``--sizes`` (not both: explicit sizes replace the policy), ``--limit``
    (bytes per cuDNN call), ``--budget`` (the net's total for ``ilp`` or ``shared``, Note
    [Workspace budget] in ucudnn/plan/settings.py: 0 is zero bytes), ``--optimizer`` (default
    ``ilp`` when ``--budget`` is given, else what the prototxt says, else ``dp``),
    ``--math``, ``--engines`` (the families of choices: ``ucudnn plan`` plans BOTH from the
    legacy data and refuses GRAPH, Note [Predictions from legacy measurements] in
    ucudnn/measure/sources.py); enumerations in any spelling (Note [Enum spellings] in
    ucudnn/vocab.py). ``ucudnn plan`` also takes ``--deterministic``: plan only the choices
    cuDNN calls deterministic (Note [Deterministic plans] in ucudnn/plan/dp.py); ``ucudnn
    prototxt`` does not, as caffe.proto's ``ucudnn_param`` has no field for it.
    ``--budget`` with ``--optimizer dp`` is refused: the DP has no net-wide budget. A size in
    ``--sizes`` larger than the net's mini-batch is refused once the net is read
    (:func:`check_sizes`). Options not given leave the prototxt's ``ucudnn_param`` (or the
    defaults, Note [Default settings]) as they are.
    ``ucudnn plan`` also takes ``--ilp-time-limit SECONDS`` (:func:`add_time_limit_option`),
    how long the ILP's solver may search: not a setting of the plan (a prototxt has no field
    for it), it bounds the solve (Note [ILP time limit] in ucudnn/plan/ilp.py).
"""
from __future__ import annotations

import argparse
import math
from typing import Dict, Optional, Sequence

from ..plan.ilp import DEFAULT_TIME_LIMIT
from ..plan.settings import DEFAULTS, PlanSettings
from ..vocab import (ENGINE, ENGINES, MATH, MATH_MODES, OPTIMIZER, OPTIMIZERS, POLICIES, POLICY,
                     InputError)
from . import common as c

__all__ = ["add_settings_options", "settings_given", "check_sizes", "apply",
           "add_time_limit_option", "time_limit"]


def add_settings_options(p: argparse.ArgumentParser, *, repeats: bool = False,
                         deterministic: bool = False) -> None:
    """The options of Note [Settings options] (``repeats``: also ``--repeats``;
    ``deterministic``: also ``--deterministic``)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--policy", help=f"micro-batch policy: {', '.join(POLICIES)} (default: the "
                   f"prototxt's, else {DEFAULTS.policy})")
    g.add_argument("--sizes", metavar="LIST", help="explicit micro-batch sizes, e.g. 32,64,256 "
                   "(replace the policy's)")
    p.add_argument("--limit", metavar="SIZE", help="workspace per cuDNN call; 64M = 64MiB, "
                   "sizes are powers of 1024 (default: the prototxt's, else 8MiB, Caffe's)")
    p.add_argument("--budget", metavar="SIZE", help="total workspace of the net's ILP or shared "
                   "arena; 0 is zero bytes (implies --optimizer ilp unless shared is asked; "
                   "default: limit x cuDNN calls)")
    p.add_argument("--optimizer", help=f"{', '.join(OPTIMIZERS)}: each kernel within --limit; "
                   "all kernels divide --budget; every layer reuses one arena of --budget, "
                   "divided among the kernels that run at once (default: ilp with --budget, "
                   "else the prototxt's, else dp)")
    p.add_argument("--math", help=f"math mode: {', '.join(MATH_MODES)} (default: the "
                   "prototxt's, else default)")
    p.add_argument("--engines", help=f"families of cuDNN choices: {', '.join(ENGINES)} "
                   f"(default: the prototxt's, else {DEFAULTS.engines})")
    if deterministic:
        p.add_argument("--deterministic", action="store_true", help="plan only the cuDNN "
                       "choices whose results are bitwise reproducible, as PyTorch's "
                       "torch.backends.cudnn.deterministic (measurements that do not say "
                       "whether a choice is deterministic are measured again on a GPU)")
    if repeats:
        p.add_argument("--repeats", type=int, help="cudnnFind calls per micro-batch size "
                       f"(default: the prototxt's, else {DEFAULTS.repeats})")


def add_time_limit_option(p: argparse.ArgumentParser) -> None:
    """``--ilp-time-limit`` (Note [Settings options])."""
    p.add_argument("--ilp-time-limit", metavar="SECONDS", help="how long the ILP's solver "
                   "(CBC) may search; when the time passes, the best plan it found, else each "
                   "kernel's fastest plan within an equal share of the budget, either said to "
                   "be not proven optimal; 0 or none: no limit (default: "
                   f"{DEFAULT_TIME_LIMIT:g})")


def time_limit(text: Optional[str], option: str = "--ilp-time-limit") -> Optional[float]:
    """Seconds (``0`` or ``none``: None, no limit); the default where ``text`` is None."""
    if text is None:
        return DEFAULT_TIME_LIMIT
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise c.CliError(f"{option}: expected seconds (a number >= 0) or none, got {text!r}")
    return value or None


def _choice(choices, text, option):
    try:
        return choices(text, option)
    except InputError as e:
        raise c.CliError(str(e)) from None


def settings_given(args) -> Dict[str, object]:
    """The PlanSettings fields the command line sets, checked (Note [Settings options])."""
    out: Dict[str, object] = {}
    if args.policy is not None:
        out["policy"] = _choice(POLICY, args.policy, "--policy")
    if args.sizes is not None:
        out["sizes"] = tuple(c.sizes(args.sizes))
    if args.limit is not None:
        out["limit"] = c.size(args.limit, "--limit")
    if args.budget is not None:
        out["budget"] = c.size(args.budget, "--budget")
    if args.optimizer is not None:
        out["optimizer"] = _choice(OPTIMIZER, args.optimizer, "--optimizer")
    elif "budget" in out:
        out["optimizer"] = "ilp"
    if out.get("optimizer") == "dp" and "budget" in out:
        raise c.CliError("--budget: only the ilp and shared optimizers take a total budget "
                         "(use --optimizer ilp or shared, or --limit for dp)")
    if args.math is not None:
        out["math"] = _choice(MATH, args.math, "--math")
    if args.engines is not None:
        out["engines"] = _choice(ENGINE, args.engines, "--engines")
    if getattr(args, "repeats", None) is not None:
        out["repeats"] = c.positive(args.repeats, "--repeats")
    if getattr(args, "deterministic", False):
        out["deterministic"] = True
    return out


def check_sizes(given: Dict[str, object], batches: Sequence[int]) -> None:
    """Refuse ``--sizes`` larger than the smallest mini-batch of the net."""
    sizes = given.get("sizes")
    if sizes and batches and max(sizes) > min(batches):
        raise c.CliError(f"--sizes: {max(sizes)} is larger than the net's mini-batch "
                         f"({min(batches)})")


def apply(base: Optional[PlanSettings], given: Dict[str, object]) -> PlanSettings:
    """``base`` (DEFAULTS where None) with the command line's fields: explicit sizes replace
    a policy and a policy replaces sizes; a net-wide optimizer keeps the budget it finds."""
    base = base or DEFAULTS
    changes = dict(given)
    if "policy" in changes:
        changes.setdefault("sizes", None)
    try:
        return base.replace(**changes)
    except InputError as e:
        raise c.CliError(str(e)) from None
