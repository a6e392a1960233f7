"""`ucudnn reproduce --im2col` (Note [im2col points] in ucudnn/experiments/grid.py): a point
per net whose convolutions run with Caffe's im2col, beside stock Caffe and ucudnn's points;
`--prototxt-dir` takes the nets from another folder; `--force-backward`."""
import json

from repo_paths import DATA
from repo_paths import NETS as SHIPPED
from ucudnn.caffe.proto import load_caffe_pb2, read_net
from ucudnn.cli import main
from ucudnn.experiments import caffe_run, grid, reproduce as rp

MIB = 1 << 20
NETS = DATA / "nets"
DILATED = "dilation8_pascal_voc_deploy"


def test_grid_adds_one_im2col_point_per_net_after_stock():
    pts = grid.grid(["a", "b"], [8 * MIB], ["undivided"], ilp=False, shared=False,
                    unlimited=False, im2col=True)
    assert [p.key for p in pts] == ["a/caffe/-", "a/im2col/-", "a/undivided/8.0MiB",
                                    "b/caffe/-", "b/im2col/-", "b/undivided/8.0MiB"]
    assert grid.Point("a", "im2col").policy is None
    assert "im2col" not in {p.setting for p in grid.grid(["a"], [8 * MIB])}
    # tables sort it beside stock Caffe, before the ucudnn points
    recs = [{"net": "a", "setting": s, "limit_bytes": lim}
            for s, lim in (("undivided", 8 * MIB), ("im2col", None), ("caffe", None))]
    assert [r["setting"] for r in sorted(recs, key=grid.point_order)] == [
        "caffe", "im2col", "undivided"]


def test_variant_prototxt_runs_every_convolution_with_im2col_only_for_im2col(tmp_path):
    pb2 = load_caffe_pb2()
    src = NETS / f"{DILATED}.prototxt"
    n_convs = sum(l.type == "Convolution" for l in read_net(pb2, str(src)).layer)
    assert n_convs > 0

    def engines(setting, limit=None, **kw):
        dest = tmp_path / f"{setting}.prototxt"
        caffe_run.variant_prototxt(pb2, src, grid.Point(DILATED, setting, limit), dest, None,
                                   "powerOfTwo", **kw)
        net = read_net(pb2, str(dest))
        convs = [l for l in net.layer if l.type == "Convolution"]
        assert len(convs) == n_convs
        return net, {pb2.ConvolutionParameter.Engine.Name(l.convolution_param.engine)
                     for l in convs}

    net, eng = engines("im2col")
    assert eng == {"CAFFE"} and not net.HasField("ucudnn_param")
    assert not net.force_backward
    net, eng = engines("caffe", force_backward=True)
    assert eng == {"DEFAULT"} and not net.HasField("ucudnn_param") and net.force_backward
    net, eng = engines("powerOfTwo", 64 * MIB)
    assert eng == {"DEFAULT"} and net.ucudnn_param.workspace_limit == 64 * MIB


def test_predicted_mode_has_no_im2col_points(tmp_path):
    said = []
    doc = rp.run(rp.Options(out=tmp_path / "o", nets=["cifar10"], limits=[MIB],
                            policies=["undivided"], ilp=False, shared=False, predict=True,
                            im2col=True), say=said.append)
    assert doc["points"] and all(r["setting"] != "im2col" for r in doc["points"].values())
    assert any("no im2col points" in m for m in said), said


def test_cli_takes_nets_from_another_folder_and_records_the_options(tmp_path, capsys):
    nets = tmp_path / "nets"
    nets.mkdir()
    (nets / "cifar10.prototxt").write_text((SHIPPED / "cifar10.prototxt").read_text())
    out = tmp_path / "o"
    assert main(["reproduce", "--predict", "--prototxt-dir", str(nets), "--nets", "cifar10",
                 "--limits", "1MiB", "--policies", "undivided", "--no-ilp", "--no-shared",
                 "--im2col", "--force-backward", "--no-pytorch", "--out", str(out)]) == 0
    options = json.loads((out / "reproduce.json").read_text())["meta"]["options"]
    assert options["prototxt_dir"] == str(nets) and options["nets"] == ["cifar10"]
    assert options["im2col"] is True and options["force_backward"] is True
    assert main(["reproduce", "--predict", "--prototxt-dir", str(NETS), "--nets", "cifar10",
                 "--out", str(tmp_path / "p")]) == 2
    assert f"no cifar10.prototxt in {NETS}" in capsys.readouterr().err
