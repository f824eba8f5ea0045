"""groundrl.coco against pycocotools 2.0.11, compared exactly: the 12 stats, eval["precision"],
eval["recall"] and eval["scores"] (np.array_equal, same shape), every evalImgs entry (same keys,
equal values, same array dtypes and shapes) and the printed summary, on the committed fixture and
on random cases, with default and custom params, results as a file, a list (numpy scalars too) and
an Nx7 array."""

import contextlib
import io
import json
import random

import numpy as np
import pytest
from conftest import COCO_FIXTURE
from pycocotools.coco import COCO as RefCOCO
from pycocotools.cocoeval import COCOeval as RefCOCOeval

import groundrl
from groundrl.coco import COCO, COCOeval

CASES = 30
SEED = 20261126
GT = COCO_FIXTURE / "gt.json"
DT = COCO_FIXTURE / "dt.json"


def run(coco_cls, eval_cls, gt_path, dt, narrow=None, accumulate_params=None, prepare=None):
    """Load, evaluate, accumulate, summarize; returns the evaluator and the printed summary."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gt = coco_cls(str(gt_path))
        dt = gt.loadRes(dt() if callable(dt) else dt)
        if prepare:
            prepare(gt, dt)
        ev = eval_cls(gt, dt, "bbox")
        if narrow:
            narrow(ev.params)
        ev.evaluate()
        ev.accumulate(accumulate_params(ev.params) if accumulate_params else None)
        out.truncate(0)
        out.seek(0)
        ev.summarize()
    return ev, out.getvalue()


def assert_same_eval_imgs(ours, ref):
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        if b is None:
            assert a is None, i
            continue
        assert a is not None and a.keys() == b.keys(), i
        for key, expected in b.items():
            value = a[key]
            if isinstance(expected, np.ndarray):
                assert isinstance(value, np.ndarray) and value.dtype == expected.dtype, (i, key)
                assert value.shape == expected.shape and np.array_equal(value, expected), (i, key)
            else:
                assert value == expected, (i, key, value, expected)


def assert_same(gt_path, dt, narrow=None, eval_imgs=True, **kwargs):
    ref, ref_text = run(RefCOCO, RefCOCOeval, gt_path, dt, narrow, **kwargs)
    ours, our_text = run(COCO, COCOeval, gt_path, dt, narrow, **kwargs)
    assert np.array_equal(ours.stats, ref.stats), (ours.stats, ref.stats)
    for key in ("precision", "recall", "scores"):
        assert ours.eval[key].shape == ref.eval[key].shape, key
        assert np.array_equal(ours.eval[key], ref.eval[key]), key
    assert ours.eval["counts"] == ref.eval["counts"]
    assert our_text == ref_text
    if eval_imgs:
        assert_same_eval_imgs(ours.evalImgs, ref.evalImgs)
    return ours, ref


def fixture_results():
    return json.loads(DT.read_text())


def test_the_committed_fixture_from_files():
    ours, _ = assert_same(GT, str(DT))
    assert ours.eval["precision"].shape == (10, 101, len(ours.params.catIds), 4, 3)


def test_the_committed_fixture_with_results_as_a_list():
    assert_same(GT, fixture_results)


def test_the_fixture_stats_are_the_committed_values():
    ev, _ = run(COCO, COCOeval, GT, str(DT))
    expected = json.loads((COCO_FIXTURE / "expected_stats.json").read_text())
    assert ev.stats.tolist() == list(expected.values())


def image_and_category_ids():
    gt = json.loads(GT.read_text())
    return sorted(i["id"] for i in gt["images"]), sorted(c["id"] for c in gt["categories"])


def test_narrowed_image_and_category_ids():
    image_ids, cat_ids = image_and_category_ids()

    def narrow(params):
        params.imgIds = image_ids[:3]
        params.catIds = cat_ids[:2]

    assert_same(GT, str(DT), narrow)


# Params pycocotools takes: each case changes one or more fields of `params` before evaluate().
PARAMS = {
    "useCats=0": lambda p: setattr(p, "useCats", 0),
    "useCats=0, narrowed": lambda p: (setattr(p, "useCats", 0), setattr(p, "catIds", p.catIds[1:]), setattr(p, "imgIds", p.imgIds[::2])),
    "maxDets [5, 20, 50]": lambda p: setattr(p, "maxDets", [5, 20, 50]),
    "maxDets unsorted [100, 1, 10]": lambda p: setattr(p, "maxDets", [100, 1, 10]),
    "maxDets [1, 3, 4, 200]": lambda p: setattr(p, "maxDets", [1, 3, 4, 200]),
    "iouThrs 0.1..0.9": lambda p: setattr(p, "iouThrs", np.linspace(0.1, 0.9, 9)),
    "iouThrs 70 values past one word": lambda p: setattr(p, "iouThrs", np.linspace(0.3, 1.0, 70)),
    "iouThrs unsorted, with 1.0": lambda p: setattr(p, "iouThrs", np.array([0.75, 0.5, 1.0, 0.95])),
    "recThrs coarse": lambda p: setattr(p, "recThrs", np.linspace(0, 1, 11)),
    "recThrs negative, zero, above one, unsorted": lambda p: setattr(p, "recThrs", np.array([-0.5, 0.0, 0.3, 0.2, 1.0, 1.5])),
    "areaRng custom": lambda p: (setattr(p, "areaRng", [[0, 1e10], [0, 500], [500, 4000], [4000, 1e10]])),
    "areaRng two, labels": lambda p: (setattr(p, "areaRng", [[0, 1e10], [100, 2000]]), setattr(p, "areaRngLbl", ["all", "small"])),
}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_custom_params_on_the_fixture(name):
    assert_same(GT, str(DT), PARAMS[name])


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_custom_params_on_random_cases(name):
    from coco_parity import make_case

    for index in range(4):
        gt, dt = make_case(random.Random(SEED + 1000 + index), index * 3)
        path = _write_gt(gt, f"params-{index}")
        assert_same(path, dt, PARAMS[name], eval_imgs=index < 2)


def test_accumulate_with_other_params():
    # accumulate(p) reads the evaluated images, categories, ranges and caps that p names.
    image_ids, cat_ids = image_and_category_ids()

    def other(params):
        import copy

        p = copy.deepcopy(params)
        p.maxDets = [100, 10, 1]
        p.areaRng = p.areaRng[::-1]
        p.imgIds = p.imgIds[:4]
        p.catIds = p.catIds[1:]
        return p

    assert_same(GT, str(DT), accumulate_params=other, eval_imgs=False)


@pytest.mark.parametrize("index", range(CASES))
def test_random_case(index):
    from coco_parity import make_case  # scripts/parity: the generator the CLI's parity script uses

    gt, dt = make_case(random.Random(SEED + index), index)
    assert_same(_write_gt(gt, f"case-{index}"), dt)


_TMP = {}


def _write_gt(gt, name):
    import tempfile
    from pathlib import Path

    folder = _TMP.setdefault("dir", Path(tempfile.mkdtemp(prefix="groundrl-coco-")))
    path = folder / f"{name}.json"
    path.write_text(json.dumps(gt))
    return path


def numpy_results(results):
    """Results as numpy scalars: float32 boxes and scores, int64 image and category ids."""
    return [
        {"image_id": np.int64(r["image_id"]), "category_id": np.int64(r["category_id"]),
         "bbox": [np.float32(v) for v in r["bbox"]], "score": np.float32(r["score"])}
        for r in results
    ]


def test_numpy_scalars_in_results():
    assert_same(GT, lambda: numpy_results(fixture_results()))
    # float32 boxes with a Python float: numpy's promotion decides the type of w * h.
    mixed = [dict(r, bbox=[np.float32(r["bbox"][0]), r["bbox"][1], np.float32(r["bbox"][2]), float(r["bbox"][3])])
             for r in fixture_results()]
    assert_same(GT, lambda: mixed)


def results_array(dtype):
    rows = [[r["image_id"], *r["bbox"], r["score"], r["category_id"]] for r in fixture_results()]
    return np.array(rows, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_results_as_an_nx7_array(dtype):
    assert_same(GT, lambda: results_array(dtype))


def test_random_cases_with_numpy_results():
    from coco_parity import make_case

    for index in range(5):
        gt, dt = make_case(random.Random(SEED + 2000 + index), index)
        path = _write_gt(gt, f"numpy-{index}")
        assert_same(path, lambda: numpy_results(dt), eval_imgs=False)


def test_edits_through_the_python_objects_count():
    # Once a COCO's Python side is used, the evaluation reads it, as pycocotools does.
    def prepare(gt, dt):
        first = gt.dataset["annotations"][0]
        first["bbox"] = [first["bbox"][0] + 3.0, first["bbox"][1], first["bbox"][2], first["bbox"][3]]
        gt.dataset["annotations"][1]["iscrowd"] = 1
        dt.anns[1]["score"] = 0.999
        dt.anns[2]["area"] = 1e9

    assert_same(GT, str(DT), prepare=prepare)


def test_a_dataset_built_in_python():
    def prepare(gt, dt):
        gt.dataset = json.loads(GT.read_text())
        gt.dataset["annotations"] = gt.dataset["annotations"][::2]
        gt.createIndex()

    assert_same(GT, str(DT), prepare=prepare)


def test_lookups_follow_pycocotools():
    with contextlib.redirect_stdout(io.StringIO()):
        ours, ref = COCO(str(GT)), RefCOCO(str(GT))
        assert ours.getImgIds() == ref.getImgIds()
        assert ours.getCatIds() == ref.getCatIds()
        cat = ref.getCatIds()[0]
        assert sorted(ours.getImgIds(catIds=[cat])) == sorted(ref.getImgIds(catIds=[cat]))
        assert ours.getAnnIds(imgIds=ref.getImgIds()[:2]) == ref.getAnnIds(imgIds=ref.getImgIds()[:2])
        assert ours.getAnnIds(catIds=cat, iscrowd=False) == ref.getAnnIds(catIds=cat, iscrowd=False)
        assert ours.loadAnns(ref.getAnnIds()[:3]) == ref.loadAnns(ref.getAnnIds()[:3])
        assert ours.dataset == ref.dataset and ours.anns == ref.anns and ours.imgToAnns == ref.imgToAnns
        ours_dt, ref_dt = ours.loadRes(str(DT)), ref.loadRes(str(DT))
        assert ours_dt.dataset == ref_dt.dataset
        assert ours_dt.getImgIds() == ref_dt.getImgIds() and ours_dt.getCatIds() == ref_dt.getCatIds()
        numpy_rows = results_array(np.float32)
        assert ours.loadRes(numpy_rows).dataset == ref.loadRes(numpy_rows).dataset
    # The caller's dicts are left as they were (pycocotools adds id, area, iscrowd, segmentation).
    results = fixture_results()
    with contextlib.redirect_stdout(io.StringIO()):
        ours.loadRes(results).dataset
    assert results == fixture_results()


def test_inputs_pycocotools_refuses_are_refused():
    with contextlib.redirect_stdout(io.StringIO()):
        gt, ref = COCO(str(GT)), RefCOCO(str(GT))
        with pytest.raises(IndexError):
            ref.loadRes([])
        with pytest.raises(IndexError, match="empty"):
            gt.loadRes([])
        with pytest.raises(ValueError, match="Nx7"):
            gt.loadRes(np.zeros((3, 6)))


def test_iou_type_is_not_guessed():
    # pycocotools' COCOeval(gt, dt) evaluates masks ('segm'); groundrl evaluates boxes only and says so.
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(GT))
        dt = gt.loadRes(str(DT))
    for args in ((gt, dt), (gt, dt, "segm")):
        with pytest.raises(NotImplementedError, match="segm.*iouType='bbox'"):
            COCOeval(*args)
    with pytest.raises(NotImplementedError, match="keypoints"):
        COCOeval(gt, dt, "keypoints")
    ev = COCOeval(gt, dt, "bbox")
    ev.params.useSegm = 1
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(NotImplementedError, match="segm"):
        ev.evaluate()


def test_bad_detections_raise_naming_the_record():
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(GT))
        image, cat = gt.getImgIds()[0], gt.getCatIds()[0]
        with pytest.raises(groundrl.CocoError, match="unknown image ids"):
            gt.loadRes([{"image_id": -5, "category_id": cat, "bbox": [0, 0, 1, 1], "score": 1.0}])
        good = {"image_id": image, "category_id": cat, "bbox": [0, 0, 1, 1], "score": 1.0}
        cases = [
            (dict(good, bbox=[0, 0, float("inf"), 1]), r"results\[1\] \(image_id \d+\): field `bbox`: .* non-finite"),
            (dict(good, bbox=[0, 0, 1]), r"results\[1\] \(image_id \d+\): field `bbox`: has 3 numbers"),
            (dict(good, score="high"), r"results\[1\] \(image_id \d+\): field `score`: expected a number, got str"),
            (dict(good, category_id=123456), r"results\[1\] \(image_id \d+\): field `category_id`: 123456 is not"),
            ({k: v for k, v in good.items() if k != "score"}, r"results\[1\] \(image_id \d+\): field `score` is missing"),
        ]
        for bad, message in cases:
            with pytest.raises(groundrl.CocoError, match=message):
                ev = COCOeval(gt, gt.loadRes([good, bad]), "bbox")
                ev.evaluate()


def test_more_iou_thresholds_than_supported_say_so():
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(GT))
        ev = COCOeval(gt, gt.loadRes(str(DT)), "bbox")
        ev.params.iouThrs = np.linspace(0.05, 0.95, 129)
        with pytest.raises(NotImplementedError, match="at most 128 IoU thresholds"):
            ev.evaluate()
