"""groundrl.coco against pycocotools 2.0.11: the committed fixture and random cases, compared exactly
(np.array_equal on the 12 stats and the precision and recall arrays; the printed summary as text)."""

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


def run(coco_cls, eval_cls, gt_path, dt, narrow=None):
    """evaluate / accumulate / summarize; returns the evaluator and the printed summary."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        gt = coco_cls(str(gt_path))
        ev = eval_cls(gt, gt.loadRes(dt), "bbox")
        if narrow:
            narrow(ev.params)
        ev.evaluate()
        ev.accumulate()
        out.truncate(0)
        out.seek(0)
        ev.summarize()
    return ev, out.getvalue()


def assert_same(gt_path, dt, narrow=None):
    ref, ref_text = run(RefCOCO, RefCOCOeval, gt_path, dt, narrow)
    ours, our_text = run(COCO, COCOeval, gt_path, dt, narrow)
    assert np.array_equal(ours.stats, ref.stats), (ours.stats, ref.stats)
    for key in ("precision", "recall"):
        assert ours.eval[key].shape == ref.eval[key].shape
        assert np.array_equal(ours.eval[key], ref.eval[key]), key
    assert ours.eval["counts"] == ref.eval["counts"]
    assert our_text == ref_text


def test_the_committed_fixture_from_files():
    assert_same(COCO_FIXTURE / "gt.json", str(COCO_FIXTURE / "dt.json"))


def test_the_committed_fixture_with_results_as_a_list():
    assert_same(COCO_FIXTURE / "gt.json", json.loads((COCO_FIXTURE / "dt.json").read_text()))


def test_the_fixture_stats_are_the_committed_values():
    ev, _ = run(COCO, COCOeval, COCO_FIXTURE / "gt.json", str(COCO_FIXTURE / "dt.json"))
    expected = json.loads((COCO_FIXTURE / "expected_stats.json").read_text())
    assert ev.stats.tolist() == list(expected.values())


def test_narrowed_image_and_category_ids(tmp_path):
    gt_path = COCO_FIXTURE / "gt.json"
    image_ids = sorted(i["id"] for i in json.loads(gt_path.read_text())["images"])
    cat_ids = sorted(c["id"] for c in json.loads(gt_path.read_text())["categories"])

    def narrow(params):
        params.imgIds = image_ids[:3]
        params.catIds = cat_ids[:2]

    assert_same(gt_path, str(COCO_FIXTURE / "dt.json"), narrow)


@pytest.mark.parametrize("index", range(CASES))
def test_random_case(tmp_path, index):
    from coco_parity import make_case  # scripts/parity: the generator the CLI's parity script uses

    gt, dt = make_case(random.Random(SEED + index), index)
    gt_path = tmp_path / "gt.json"
    gt_path.write_text(json.dumps(gt))
    assert_same(gt_path, dt)


def test_lookups_follow_pycocotools():
    with contextlib.redirect_stdout(io.StringIO()):
        ours, ref = COCO(str(COCO_FIXTURE / "gt.json")), RefCOCO(str(COCO_FIXTURE / "gt.json"))
    assert sorted(ours.getImgIds()) == sorted(ref.getImgIds())
    assert ours.getCatIds() == ref.getCatIds()
    cat = ref.getCatIds()[0]
    assert sorted(ours.getImgIds(catIds=[cat])) == sorted(ref.getImgIds(catIds=[cat]))
    assert ours.getAnnIds(imgIds=ref.getImgIds()[:2]) == ref.getAnnIds(imgIds=ref.getImgIds()[:2])
    assert ours.getAnnIds(catIds=cat, iscrowd=False) == ref.getAnnIds(catIds=cat, iscrowd=False)
    assert ours.loadAnns(ref.getAnnIds()[:3]) == ref.loadAnns(ref.getAnnIds()[:3])


def test_unsupported_settings_say_so():
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(COCO_FIXTURE / "gt.json"))
        ev = COCOeval(gt, gt.loadRes(str(COCO_FIXTURE / "dt.json")))
        ev.params.maxDets = [1, 10, 50]
        with pytest.raises(NotImplementedError, match="params.maxDets"):
            ev.evaluate()
    with pytest.raises(NotImplementedError, match="segm"):
        COCOeval(gt, gt, "segm")


def test_bad_detections_raise_naming_the_record():
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(COCO_FIXTURE / "gt.json"))
        image = gt.getImgIds()[0]
        with pytest.raises(groundrl.CocoError, match="unknown image ids"):
            gt.loadRes([{"image_id": -5, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 1.0}])
        dt = gt.loadRes([{"image_id": image, "category_id": gt.getCatIds()[0], "bbox": [0, 0, float("inf"), 1], "score": 1.0}])
        with pytest.raises(groundrl.CocoError, match=r"detection|result|\[0\]"):
            ev = COCOeval(gt, dt)
            ev.evaluate()
