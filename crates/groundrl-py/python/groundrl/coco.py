"""A drop-in for pycocotools' ``COCO`` and ``COCOeval`` (bbox), evaluated in Rust.

``from groundrl.coco import COCO, COCOeval`` replaces ``from pycocotools.coco import COCO`` and
``from pycocotools.cocoeval import COCOeval``: same constructors, ``params``, ``evaluate()``,
``accumulate()``, ``summarize()`` (the same 12 printed lines), ``stats`` and ``eval["precision"]`` /
``eval["recall"]``, equal to pycocotools 2.0.11 to the last bit (tests/test_coco_parity.py).

Not supported: segm and keypoints (``iouType`` must be ``"bbox"``); non-default ``iouThrs``,
``recThrs``, ``maxDets``, ``areaRng`` or ``useCats=0`` (``evaluate()`` raises NotImplementedError);
``evalImgs`` and ``eval["scores"]``, which are not computed. ``params.imgIds`` and ``params.catIds``
may be narrowed. Input pycocotools would silently mishandle (unknown image ids, non-finite boxes,
repeated ids) raises :class:`groundrl.CocoError` naming the record.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import time
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _groundrl

__all__ = ["COCO", "COCOeval", "Params"]

Ids = Union[int, Iterable[int]]


def _ids(ids: Ids) -> List[int]:
    return list(ids) if isinstance(ids, Iterable) else [ids]


class COCO:
    """A COCO annotation file with pycocotools' index and lookups (``getImgIds``, ``loadAnns``, ...)."""

    def __init__(self, annotation_file: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        self.dataset: Dict[str, Any] = {}
        self.anns: Dict[int, Dict[str, Any]] = {}
        self.cats: Dict[int, Dict[str, Any]] = {}
        self.imgs: Dict[int, Dict[str, Any]] = {}
        self.imgToAnns: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
        self.catToImgs: Dict[int, List[int]] = defaultdict(list)
        # The JSON text as read, handed to the evaluation as it is; None once the index is rebuilt
        # (the dataset may have been edited), and then the dataset is serialized instead.
        self._json: Optional[bytes] = None
        # That text parsed natively at load time (a ground truth, or the detections of loadRes), so
        # that evaluate() times the evaluation alone, as pycocotools' does; None when not parsed.
        self._parsed: Optional[Any] = None
        if annotation_file is not None:
            print("loading annotations into memory...")
            tic = time.time()
            with open(annotation_file, "rb") as f:
                raw = f.read()
            dataset = json.loads(raw)
            if not isinstance(dataset, dict):
                raise TypeError(f"annotation file format {type(dataset).__name__} not supported")
            print(f"Done (t={time.time() - tic:0.2f}s)")
            self.dataset = dataset
            self.createIndex()
            self._json = raw
            try:
                self._parsed = _groundrl.coco_parse_ground_truth(raw)
            except _groundrl.CocoError:
                self._parsed = None  # not a bbox ground truth groundrl reads; evaluate() says why

    def createIndex(self) -> None:
        print("creating index...")
        self._json = None
        self._parsed = None
        anns, cats, imgs = {}, {}, {}
        img_to_anns, cat_to_imgs = defaultdict(list), defaultdict(list)
        for ann in self.dataset.get("annotations", []):
            img_to_anns[ann["image_id"]].append(ann)
            anns[ann["id"]] = ann
        for img in self.dataset.get("images", []):
            imgs[img["id"]] = img
        for cat in self.dataset.get("categories", []):
            cats[cat["id"]] = cat
        if "annotations" in self.dataset and "categories" in self.dataset:
            for ann in self.dataset["annotations"]:
                cat_to_imgs[ann["category_id"]].append(ann["image_id"])
        print("index created!")
        self.anns, self.cats, self.imgs = anns, cats, imgs
        self.imgToAnns, self.catToImgs = img_to_anns, cat_to_imgs

    def info(self) -> None:
        for key, value in self.dataset.get("info", {}).items():
            print(f"{key}: {value}")

    def getAnnIds(self, imgIds: Ids = [], catIds: Ids = [], areaRng: Sequence[float] = [], iscrowd: Optional[bool] = None) -> List[int]:
        img_ids, cat_ids = _ids(imgIds), _ids(catIds)
        if img_ids:
            anns = [a for i in img_ids if i in self.imgToAnns for a in self.imgToAnns[i]]
        else:
            anns = self.dataset.get("annotations", [])
        if cat_ids:
            wanted = set(cat_ids)
            anns = [a for a in anns if a["category_id"] in wanted]
        if areaRng:
            anns = [a for a in anns if areaRng[0] < a["area"] < areaRng[1]]
        if iscrowd is not None:
            return [a["id"] for a in anns if a["iscrowd"] == iscrowd]
        return [a["id"] for a in anns]

    def getCatIds(self, catNms: Sequence[str] = [], supNms: Sequence[str] = [], catIds: Ids = []) -> List[int]:
        names, supers, ids = _names(catNms), _names(supNms), _ids(catIds)
        cats = self.dataset.get("categories", [])
        if names:
            cats = [c for c in cats if c["name"] in names]
        if supers:
            cats = [c for c in cats if c.get("supercategory") in supers]
        if ids:
            cats = [c for c in cats if c["id"] in ids]
        return [c["id"] for c in cats]

    def getImgIds(self, imgIds: Ids = [], catIds: Ids = []) -> List[int]:
        img_ids, cat_ids = _ids(imgIds), _ids(catIds)
        ids = set(img_ids) if img_ids else set(self.imgs.keys())
        for i, cat_id in enumerate(cat_ids):
            with_cat = set(self.catToImgs[cat_id])
            ids = with_cat if i == 0 and not img_ids else ids & with_cat
        return list(ids)

    def loadAnns(self, ids: Ids = []) -> List[Dict[str, Any]]:
        return [self.anns[i] for i in _ids(ids)]

    def loadCats(self, ids: Ids = []) -> List[Dict[str, Any]]:
        return [self.cats[i] for i in _ids(ids)]

    def loadImgs(self, ids: Ids = []) -> List[Dict[str, Any]]:
        return [self.imgs[i] for i in _ids(ids)]

    def loadRes(self, resFile: Union[str, "os.PathLike[str]", List[Dict[str, Any]]]) -> "COCO":
        """Detections (a results file or list) as a COCO over this one's images and categories.

        As pycocotools: each detection gets ``id`` (1, 2, ...), ``area`` (w * h) and ``iscrowd`` 0.
        """
        res = COCO()
        res.dataset["images"] = list(self.dataset.get("images", []))
        print("Loading and preparing results...")
        tic = time.time()
        raw: Optional[bytes] = None
        if isinstance(resFile, (str, os.PathLike)):
            with open(resFile, "rb") as f:
                raw = f.read()
            anns = json.loads(raw)
        elif isinstance(resFile, np.ndarray):
            raise NotImplementedError("loadRes: numpy arrays of results are not supported; pass a list of dicts")
        else:
            anns = resFile
        if not isinstance(anns, list):
            raise TypeError("results do not correspond to current coco set: expected a list of detections")
        missing = {a.get("image_id") for a in anns if isinstance(a, dict)} - set(self.getImgIds())
        if missing:
            raise _groundrl.CocoError(f"results do not correspond to current coco set: unknown image ids {sorted(missing, key=str)[:5]}")
        if anns and "bbox" not in anns[0]:
            raise NotImplementedError("loadRes: only bbox results are supported")
        res.dataset["categories"] = copy.deepcopy(self.dataset.get("categories", []))
        res.dataset["annotations"] = [_result_annotation(i, a) for i, a in enumerate(anns)]
        print(f"DONE (t={time.time() - tic:0.2f}s)")
        res.createIndex()
        res._json = raw if raw is not None else json.dumps(anns).encode()
        try:
            res._parsed = _groundrl.coco_parse_detections(res._json)
        except _groundrl.CocoError:
            res._parsed = None  # evaluate() reads the text again and names the bad record
        return res


def _names(names: Union[str, Sequence[str]]) -> List[str]:
    return [names] if isinstance(names, str) else list(names)


def _result_annotation(index: int, ann: Dict[str, Any]) -> Dict[str, Any]:
    if not isinstance(ann, dict) or "bbox" not in ann:
        raise _groundrl.CocoError(f"results[{index}]: bbox: missing")
    ann = dict(ann)
    x, y, w, h = ann["bbox"]
    if "segmentation" not in ann:
        ann["segmentation"] = [[x, y, x, y + h, x + w, y + h, x + w, y]]
    ann["area"] = w * h
    ann["id"] = index + 1
    ann["iscrowd"] = 0
    return ann


class Params:
    """pycocotools' evaluation parameters for bbox."""

    def __init__(self, iouType: str = "bbox") -> None:
        if iouType != "bbox":
            raise NotImplementedError(f"iouType {iouType!r}: only 'bbox' is supported")
        self.iouType = iouType
        self.imgIds: List[int] = []
        self.catIds: List[int] = []
        self.iouThrs = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
        self.recThrs = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
        self.maxDets = [1, 10, 100]
        self.areaRng = [[0**2, 1e5**2], [0**2, 32**2], [32**2, 96**2], [96**2, 1e5**2]]
        self.areaRngLbl = ["all", "small", "medium", "large"]
        self.useCats = 1

    def unsupported(self) -> Optional[str]:
        """The first setting the evaluation cannot follow, if any."""
        default = Params()
        for name in ("iouThrs", "recThrs"):
            if not np.array_equal(getattr(self, name), getattr(default, name)):
                return name
        for name in ("maxDets", "areaRng", "useCats"):
            if np.asarray(getattr(self, name)).tolist() != np.asarray(getattr(default, name)).tolist():
                return name
        return None


class COCOeval:
    """pycocotools' ``COCOeval`` for bbox: ``evaluate()``, ``accumulate()``, ``summarize()``."""

    def __init__(self, cocoGt: Optional[COCO] = None, cocoDt: Optional[COCO] = None, iouType: str = "bbox") -> None:
        self.cocoGt = cocoGt
        self.cocoDt = cocoDt
        self.params = Params(iouType)
        self.evalImgs: List[Any] = []
        self.eval: Dict[str, Any] = {}
        self.stats: np.ndarray = np.array([])
        # What the native evaluation returned: stats, summary text, K, precision and recall bytes.
        self._result: Optional[Tuple[List[float], str, int, bytes, bytes]] = None
        if cocoGt is not None:
            self.params.imgIds = sorted(cocoGt.getImgIds())
            self.params.catIds = sorted(cocoGt.getCatIds())

    def evaluate(self) -> None:
        """Matches and accumulates in Rust; ``accumulate()`` then only arranges the arrays."""
        tic = time.time()
        print("Running per image evaluation...")
        unsupported = self.params.unsupported()
        if unsupported is not None:
            raise NotImplementedError(f"params.{unsupported}: only pycocotools' default is supported")
        if self.cocoGt is None or self.cocoDt is None:
            raise ValueError("COCOeval needs cocoGt and cocoDt")
        print(f"Evaluate annotation type *{self.params.iouType}*")
        self.params.imgIds = list(np.unique(self.params.imgIds).tolist())
        self.params.catIds = list(np.unique(self.params.catIds).tolist())
        if self._whole() and self.cocoGt._parsed is not None and self.cocoDt._parsed is not None:
            self._result = _groundrl.coco_evaluate_parsed(self.cocoGt._parsed, self.cocoDt._parsed)
        else:
            gt_json, dt_json = self._inputs()
            self._result = _groundrl.coco_evaluate(gt_json, dt_json)
        print(f"DONE (t={time.time() - tic:0.2f}s).")

    def _inputs(self) -> "tuple[bytes, bytes]":
        """The ground truth and detections as JSON, narrowed to ``params.imgIds`` and ``catIds``."""
        gt, dt = self.cocoGt, self.cocoDt
        assert gt is not None and dt is not None
        if self._whole():
            return _json_of(gt), _detections_json(dt)
        img_ids, cat_ids = set(self.params.imgIds), set(self.params.catIds)
        dataset = dict(gt.dataset)
        dataset["images"] = [i for i in gt.dataset.get("images", []) if i["id"] in img_ids]
        dataset["categories"] = [c for c in gt.dataset.get("categories", []) if c["id"] in cat_ids]
        dataset["annotations"] = [a for a in gt.dataset.get("annotations", []) if a["image_id"] in img_ids and a["category_id"] in cat_ids]
        dets = [_detection(a) for a in dt.dataset.get("annotations", []) if a["image_id"] in img_ids and a["category_id"] in cat_ids]
        return json.dumps(dataset).encode(), json.dumps(dets).encode()

    def _whole(self) -> bool:
        """Whether ``params`` keep every image and category of the ground truth."""
        gt = self.cocoGt
        assert gt is not None
        return self.params.imgIds == sorted(gt.getImgIds()) and self.params.catIds == sorted(gt.getCatIds())

    def accumulate(self, p: Optional[Params] = None) -> None:
        print("Accumulating evaluation results...")
        tic = time.time()
        if self._result is None:
            print("Please run evaluate() first")
            return
        _, _, k_count, precision, recall = self._result
        t, r, a, m = len(self.params.iouThrs), len(self.params.recThrs), len(self.params.areaRng), len(self.params.maxDets)
        self.eval = {
            "params": p if p is not None else self.params,
            "counts": [t, r, k_count, a, m],
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "precision": np.frombuffer(precision, dtype=np.float64).reshape(t, r, k_count, a, m).copy(),
            "recall": np.frombuffer(recall, dtype=np.float64).reshape(t, k_count, a, m).copy(),
        }
        print(f"DONE (t={time.time() - tic:0.2f}s).")

    def summarize(self) -> None:
        """Prints the 12 lines pycocotools prints and sets ``stats``."""
        if not self.eval or self._result is None:
            raise Exception("Please run accumulate() first")
        stats, text, _, _, _ = self._result
        print(text, end="" if text.endswith("\n") else "\n")
        self.stats = np.asarray(stats, dtype=np.float64)

    def __str__(self) -> str:
        self.summarize()
        return ""


def _json_of(coco: COCO) -> bytes:
    return coco._json if coco._json is not None else json.dumps(coco.dataset).encode()


def _detections_json(dt: COCO) -> bytes:
    if dt._json is not None:
        return dt._json
    return json.dumps([_detection(a) for a in dt.dataset.get("annotations", [])]).encode()


def _detection(ann: Dict[str, Any]) -> Dict[str, Any]:
    return {"image_id": ann["image_id"], "category_id": ann["category_id"], "bbox": ann["bbox"], "score": ann["score"]}
