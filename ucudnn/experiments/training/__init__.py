"""Training curves with and without micro-batching (``ucudnn training``).

The same net is trained from the same initial weights on the same batches under every setting,
one setting per process, through pycaffe, and the curves are compared with stock Caffe's (Note
[Training equivalence] in :mod:`.comparison`). The modules, pure parts first (they run on a CPU
without Caffe):

* :mod:`.settings` -- the settings compared (:data:`~.settings.SETTINGS`), a net's variant
  prototxt per setting, and :class:`~.settings.TrainingError`;
* :mod:`.nets` -- the nets (the digits LeNet, CIFAR-10 quick), their solvers, and the data they
  train on (scikit-learn's digits, a synthetic set);
* :mod:`.options` -- one invocation's options, their defaults and checks;
* :mod:`.curves` -- ``curves.csv`` and its rows;
* :mod:`.comparison` -- each setting against stock, one run (``compare``) and several seeds
  (``compare_seeds``), and the targets;
* :mod:`.report` -- the summaries in Markdown and the figure;
* :mod:`.child` -- the pycaffe child process and what passes between it and the runner
  (started as ``python -m ucudnn.experiments.training --child SPEC``: :mod:`.__main__`);
* :mod:`.metadata` -- ``metadata.json``;
* :mod:`.runner` -- what ``ucudnn training`` calls: ``run``, ``regenerate``,
  ``regenerate_seeds``.

Callers import a name from the module that holds it; this package exposes nothing itself.
Imports :mod:`ucudnn.caffe`, :mod:`ucudnn.measure`, :mod:`ucudnn.plan`, :mod:`ucudnn.vocab`,
:mod:`ucudnn.paths` and, of the experiments, :mod:`~ucudnn.experiments.caffe_run` and
:mod:`~ucudnn.experiments.reproduce`; never :mod:`ucudnn.cli` (Note [Layers of the package] in
:mod:`ucudnn`).
"""
