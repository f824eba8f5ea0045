"""A drop-in for pycocotools' ``COCO`` and ``COCOeval`` (iouType ``"bbox"``), evaluated in Rust.

``from groundrl.coco import COCO, COCOeval`` replaces ``from pycocotools.coco import COCO`` and
``from pycocotools.cocoeval import COCOeval``: same constructors, ``params`` (every field: ``imgIds``,
``catIds``, ``iouThrs``, ``recThrs``, ``maxDets``, ``areaRng``, ``areaRngLbl``, ``useCats``),
``evaluate()``, ``accumulate(p=None)``, ``summarize()`` (the same printed lines), ``stats``,
``evalImgs`` and ``eval["precision"]``, ``eval["recall"]``, ``eval["scores"]``, equal to pycocotools
2.0.11's (tests/test_coco_parity.py).

Files are parsed in Rust; a ``COCO``'s Python objects (``dataset``, ``anns``, ``imgs``, ``cats``,
``imgToAnns``, ``catToImgs``) are built the first time one of them is used, and from then on the
evaluation reads them, as pycocotools does, so edits made through them count. ``evalImgs`` is built
the first time it is read.

Not supported: ``iouType`` ``"segm"`` (pycocotools' default when no iouType is given) and
``"keypoints"``, which raise NotImplementedError; masks (``annToRLE``, ``annToMask``) and ``showAnns``.
Input pycocotools would silently mishandle (non-finite boxes or scores, repeated annotation ids,
records of images or categories the ground truth does not list) raises :class:`groundrl.CocoError`
naming the record.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import os
import time
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _groundrl
from ._groundrl import CocoError

__all__ = ["COCO", "COCOeval", "Params"]

# numpy 2 computes np.float32 * (Python float) in float32 (NEP 50), numpy 1 in float64: loadRes's
# `area = w * h` follows the numpy that is installed.
_WEAK_PYTHON_SCALARS = int(np.__version__.split(".")[0]) >= 2

Ids = Union[int, Iterable[int]]
Dataset = Dict[str, Any]


def _is_array_like(obj: Any) -> bool:
    return hasattr(obj, "__iter__") and hasattr(obj, "__len__")


def _listed(ids: Any) -> Any:
    return ids if _is_array_like(ids) else [ids]


def _membership(values: Any) -> Any:
    """A set for fast `in` tests when every value hashes, else the values themselves."""
    try:
        return set(values)
    except TypeError:
        return values


class _Index:
    """pycocotools' `createIndex()` of one dataset."""

    def __init__(self, dataset: Dataset) -> None:
        self.anns: Dict[Any, Any] = {}
        self.cats: Dict[Any, Any] = {}
        self.imgs: Dict[Any, Any] = {}
        self.imgToAnns: Dict[Any, List[Any]] = defaultdict(list)
        self.catToImgs: Dict[Any, List[Any]] = defaultdict(list)
        if "annotations" in dataset:
            for ann in dataset["annotations"]:
                self.imgToAnns[ann["image_id"]].append(ann)
                self.anns[ann["id"]] = ann
        if "images" in dataset:
            for img in dataset["images"]:
                self.imgs[img["id"]] = img
        if "categories" in dataset:
            for cat in dataset["categories"]:
                self.cats[cat["id"]] = cat
        if "annotations" in dataset and "categories" in dataset:
            for ann in dataset["annotations"]:
                self.catToImgs[ann["category_id"]].append(ann["image_id"])


def _index_member(name: str) -> property:
    def get(self: "COCO") -> Any:
        return getattr(self._ensure_index(), name)

    def set_(self: "COCO", value: Any) -> None:
        setattr(self._ensure_index(), name, value)

    return property(get, set_, doc=f"pycocotools' `{name}` (built on first use)")


class COCO:
    """A COCO annotation file with pycocotools' index and lookups (``getImgIds``, ``loadAnns``, ...)."""

    def __init__(self, annotation_file: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        self._dataset: Dataset = {}
        # Builds `dataset` on first use (file loaded natively); None once built, or when Python
        # objects are the source: the native records below are used only while this is set.
        self._build: Optional[Callable[[], Dataset]] = None
        self._index: Optional[_Index] = _Index({})
        self._native_gt: Optional[Any] = None
        self._native_dt: Optional[Any] = None
        # Image and category ids while `dataset` is not built (getImgIds() / getCatIds()).
        self._image_ids: Optional[List[int]] = None
        self._category_ids: Optional[List[int]] = None
        # The annotation file's bytes, for `dataset` and for what loadRes copies from it.
        self._raw: Optional[bytes] = None
        if annotation_file is None:
            return
        print("loading annotations into memory...")
        tic = time.time()
        with open(annotation_file, "rb") as f:
            raw = f.read()
        try:
            self._native_gt = _groundrl.coco_ground_truth_json(raw)
        except CocoError:
            self._native_gt = None  # not a box ground truth read natively: Python reads it now
        if self._native_gt is None:
            dataset = json.loads(raw)
            if type(dataset) is not dict:
                raise TypeError(f"annotation file format {type(dataset)} not supported")
            self._dataset = dataset
        else:
            self._build = lambda: json.loads(raw)
            self._image_ids = self._native_gt.image_ids()
            self._category_ids = self._native_gt.category_ids()
        self._raw = raw
        print(f"Done (t={time.time() - tic:0.2f}s)")
        self._index_later()

    # -- the Python objects, built on first use -------------------------------------------------

    def _materialized(self) -> bool:
        return self._build is None

    @property
    def dataset(self) -> Dataset:
        """The annotation file's content, as pycocotools holds it (built on first use)."""
        if self._build is not None:
            build, self._build = self._build, None
            self._dataset = build()
        return self._dataset

    @dataset.setter
    def dataset(self, value: Dataset) -> None:
        # pycocotools keeps the old index until createIndex(): build it from the old dataset first.
        self._ensure_index()
        self._build = None
        self._dataset = value

    def _ensure_index(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.dataset)
        return self._index

    def _index_later(self) -> None:
        print("creating index...")
        self._index = None
        print("index created!")

    anns = _index_member("anns")
    cats = _index_member("cats")
    imgs = _index_member("imgs")
    imgToAnns = _index_member("imgToAnns")
    catToImgs = _index_member("catToImgs")

    def createIndex(self) -> None:
        print("creating index...")
        self._index = _Index(self.dataset)
        print("index created!")

    def info(self) -> None:
        for key, value in self.dataset["info"].items():
            print(f"{key}: {value}")

    # -- lookups, as pycocotools answers them ----------------------------------------------------

    def getAnnIds(self, imgIds: Any = [], catIds: Any = [], areaRng: Any = [], iscrowd: Optional[bool] = None) -> List[Any]:
        img_ids, cat_ids = _listed(imgIds), _listed(catIds)
        if len(img_ids) == len(cat_ids) == len(areaRng) == 0:
            anns = self.dataset["annotations"]
        else:
            if len(img_ids) != 0:
                by_image = self.imgToAnns
                anns = list(itertools.chain.from_iterable(by_image[i] for i in img_ids if i in by_image))
            else:
                anns = self.dataset["annotations"]
            if len(cat_ids) != 0:
                wanted = _membership(cat_ids)
                anns = [a for a in anns if a["category_id"] in wanted]
            if len(areaRng) != 0:
                anns = [a for a in anns if areaRng[0] < a["area"] < areaRng[1]]
        if iscrowd is not None:
            return [a["id"] for a in anns if a["iscrowd"] == iscrowd]
        return [a["id"] for a in anns]

    def getCatIds(self, catNms: Any = [], supNms: Any = [], catIds: Any = []) -> List[Any]:
        names, supers, ids = _listed(catNms), _listed(supNms), _listed(catIds)
        if len(names) == len(supers) == len(ids) == 0 and self._category_ids is not None and not self._materialized():
            return list(self._category_ids)
        cats = self.dataset["categories"]
        if len(names) != 0:
            cats = [c for c in cats if c["name"] in names]
        if len(supers) != 0:
            cats = [c for c in cats if c["supercategory"] in supers]
        if len(ids) != 0:
            cats = [c for c in cats if c["id"] in ids]
        return [c["id"] for c in cats]

    def getImgIds(self, imgIds: Any = [], catIds: Any = []) -> List[Any]:
        img_ids, cat_ids = _listed(imgIds), _listed(catIds)
        if len(img_ids) == len(cat_ids) == 0:
            if self._index is None and self._image_ids is not None and not self._materialized():
                return list(self._image_ids)
            return list(self.imgs.keys())
        ids = set(img_ids)
        for i, cat_id in enumerate(cat_ids):
            with_cat = set(self.catToImgs[cat_id])
            ids = with_cat if i == 0 and len(ids) == 0 else ids & with_cat
        return list(ids)

    def loadAnns(self, ids: Any = []) -> Optional[List[Any]]:
        return _load(self.anns, ids)

    def loadCats(self, ids: Any = []) -> Optional[List[Any]]:
        return _load(self.cats, ids)

    def loadImgs(self, ids: Any = []) -> Optional[List[Any]]:
        return _load(self.imgs, ids)

    def showAnns(self, anns: Any, draw_bbox: bool = False) -> None:
        raise NotImplementedError("showAnns: groundrl.coco draws nothing; use pycocotools for display")

    def annToRLE(self, ann: Any) -> Any:
        raise NotImplementedError("annToRLE: masks are not supported (groundrl evaluates boxes)")

    def annToMask(self, ann: Any) -> Any:
        raise NotImplementedError("annToMask: masks are not supported (groundrl evaluates boxes)")

    # -- results ---------------------------------------------------------------------------------

    def loadRes(self, resFile: Any) -> "COCO":
        """Detections (a results file, a list of dicts, or an ``Nx7`` array of ``[image_id, x, y, w,
        h, score, category_id]`` rows) as a COCO over this one's images and categories.

        As pycocotools: each detection gets ``id`` (1, 2, ...), ``area`` (``w * h``), ``iscrowd`` 0
        and a box polygon as ``segmentation`` when it has none; the image ids must be this COCO's.
        The caller's dicts are not modified (pycocotools adds those fields to them).
        """
        res = COCO()
        print("Loading and preparing results...")
        tic = time.time()
        image_ids = self.getImgIds()
        snapshot = self._snapshot_for_results()
        if isinstance(resFile, (str, os.PathLike)):
            with open(resFile, "rb") as f:
                raw = f.read()
            try:
                native = _groundrl.coco_results_json(raw, image_ids)
                source: Callable[[], List[Any]] = lambda: json.loads(raw)
            except CocoError:
                anns = json.loads(raw)  # not plain box results: the list path says what is wrong
                native, source = self._results_list(anns, image_ids)
            if len(native) == 0:
                raise IndexError("loadRes: the results file holds no detection (pycocotools raises IndexError on it too)")
        elif isinstance(resFile, np.ndarray):
            native, source = self._results_array(resFile, image_ids)
        else:
            native, source = self._results_list(resFile, image_ids)
        res._native_dt = native
        res._image_ids = list(image_ids)
        res._category_ids = self.getCatIds()
        res._build = lambda: _results_dataset(snapshot(), source())
        print(f"DONE (t={time.time() - tic:0.2f}s)")
        res._index_later()
        return res

    def _snapshot_for_results(self) -> Callable[[], Dataset]:
        """What loadRes copies from this dataset (info, images, categories), taken now."""
        raw = self._raw
        if self._materialized() or raw is None:
            taken = {
                "info": copy.deepcopy(self.dataset.get("info", {})),
                "images": [img for img in self.dataset["images"]],
                "categories": copy.deepcopy(self.dataset.get("categories")),
            }
            return lambda: taken

        def from_file() -> Dataset:
            d = json.loads(raw)
            return {"info": d.get("info", {}), "images": d["images"], "categories": d.get("categories")}

        return from_file

    @staticmethod
    def _results_list(anns: Any, image_ids: List[int]) -> "tuple[Any, Callable[[], List[Any]]]":
        if type(anns) is not list:
            raise TypeError(f"results in not an array of objects: got {type(anns).__name__}")
        if len(anns) == 0:
            raise IndexError("loadRes: the results list is empty (pycocotools raises IndexError on it too)")
        first = anns[0]
        if isinstance(first, dict) and "caption" in first:
            raise NotImplementedError("loadRes: caption results are not supported")
        has_box = isinstance(first, dict) and "bbox" in first and not _is_empty_list(first["bbox"])
        if not has_box and isinstance(first, dict) and ("segmentation" in first or "keypoints" in first):
            kind = "segmentation" if "segmentation" in first else "keypoints"
            raise NotImplementedError(f"loadRes: {kind} results without boxes are not supported (groundrl evaluates boxes)")
        native = _groundrl.coco_results_list(anns, image_ids, _WEAK_PYTHON_SCALARS)
        taken = list(anns)
        return native, lambda: [dict(a) for a in taken]

    @staticmethod
    def _results_array(data: np.ndarray, image_ids: List[int]) -> "tuple[Any, Callable[[], List[Any]]]":
        print("Converting ndarray to lists...")
        print(data.shape)
        if data.ndim != 2 or data.shape[1] != 7:
            raise ValueError(f"loadRes: an array of results must be Nx7 ([image_id, x, y, w, h, score, category_id]), got shape {data.shape}")
        if data.shape[0] == 0:
            raise IndexError("loadRes: the results array has no row (pycocotools raises IndexError on it too)")
        float32 = data.dtype == np.float32
        values = np.ascontiguousarray(data, dtype=np.float32 if float32 else np.float64)
        native = _groundrl.coco_results_array(values.tobytes(), float32, image_ids)
        kept = data.copy()

        def rows() -> List[Any]:
            return [
                {"image_id": int(row[0]), "bbox": [row[1], row[2], row[3], row[4]], "score": row[5], "category_id": int(row[6])}
                for row in kept
            ]

        return native, rows


def _is_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 0


def _load(table: Dict[Any, Any], ids: Any) -> Optional[List[Any]]:
    if _is_array_like(ids):
        return [table[i] for i in ids]
    if type(ids) is int:
        return [table[ids]]
    return None


def _results_dataset(base: Dataset, anns: List[Dict[str, Any]]) -> Dataset:
    """The dataset loadRes builds: the ground truth's info, images and categories, and the results
    with the fields it adds."""
    for i, ann in enumerate(anns):
        bb = ann["bbox"]
        x1, x2, y1, y2 = bb[0], bb[0] + bb[2], bb[1], bb[1] + bb[3]
        if "segmentation" not in ann:
            ann["segmentation"] = [[x1, y1, x1, y2, x2, y2, x2, y1]]
        ann["area"] = bb[2] * bb[3]
        ann["id"] = i + 1
        ann["iscrowd"] = 0
    return {"info": base["info"], "images": list(base["images"]), "categories": copy.deepcopy(base["categories"]), "annotations": anns}


class Params:
    """pycocotools' evaluation parameters (``setDetParams`` for bbox and segm, ``setKpParams``)."""

    def __init__(self, iouType: str = "segm") -> None:
        if iouType in ("segm", "bbox"):
            self._detection_defaults()
        elif iouType == "keypoints":
            self._keypoint_defaults()
        else:
            raise Exception("iouType not supported")
        self.iouType = iouType
        self.useSegm: Optional[int] = None  # deprecated in pycocotools; still read by evaluate()

    def _common(self) -> None:
        self.imgIds: List[Any] = []
        self.catIds: List[Any] = []
        self.iouThrs = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
        self.recThrs = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
        self.useCats = 1

    def _detection_defaults(self) -> None:
        self._common()
        self.maxDets = [1, 10, 100]
        self.areaRng = [[0**2, 1e5**2], [0**2, 32**2], [32**2, 96**2], [96**2, 1e5**2]]
        self.areaRngLbl = ["all", "small", "medium", "large"]

    def _keypoint_defaults(self) -> None:
        self._common()
        self.maxDets = [20]
        self.areaRng = [[0**2, 1e5**2], [32**2, 96**2], [96**2, 1e5**2]]
        self.areaRngLbl = ["all", "medium", "large"]
        self.kpt_oks_sigmas = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89]) / 10.0


def _refuse_iou_type(iou_type: str) -> None:
    if iou_type == "segm":
        raise NotImplementedError(
            "iouType 'segm' (masks; pycocotools' default when no iouType is given): groundrl evaluates "
            "boxes only, pass iouType='bbox'"
        )
    if iou_type != "bbox":
        raise NotImplementedError(f"iouType {iou_type!r}: groundrl evaluates boxes only, pass iouType='bbox'")


class COCOeval:
    """pycocotools' ``COCOeval`` for boxes: ``evaluate()``, ``accumulate()``, ``summarize()``."""

    def __init__(self, cocoGt: Optional[COCO] = None, cocoDt: Optional[COCO] = None, iouType: str = "segm") -> None:
        if not iouType:
            print("iouType not specified. use default iouType segm")
        _refuse_iou_type(iouType or "segm")
        self.cocoGt = cocoGt
        self.cocoDt = cocoDt
        self._evalImgs: Any = defaultdict(list)
        self.eval: Dict[str, Any] = {}
        # pycocotools' per-(image, category) annotation lists and IoU matrices are not kept.
        self._gts: Dict[Any, Any] = defaultdict(list)
        self._dts: Dict[Any, Any] = defaultdict(list)
        self.params = Params(iouType=iouType)
        self._paramsEval: Any = {}
        self.stats: Any = []
        self.ious: Dict[Any, Any] = {}
        self._native: Optional[Any] = None
        self._evaluated: Optional[Dict[str, Any]] = None
        if cocoGt is not None:
            self.params.imgIds = sorted(cocoGt.getImgIds())
            self.params.catIds = sorted(cocoGt.getCatIds())

    @property
    def evalImgs(self) -> Any:
        """pycocotools' ``evalImgs`` (per category, area range and image; None where the image has
        neither ground truth nor detection of the category), built on first use."""
        if self._evalImgs is None:
            self._evalImgs = self._eval_imgs()
        return self._evalImgs

    @evalImgs.setter
    def evalImgs(self, value: Any) -> None:
        self._evalImgs = value

    def evaluate(self) -> None:
        """Matches every image and category (in Rust, all cores, the GIL released)."""
        tic = time.time()
        print("Running per image evaluation...")
        p = self.params
        if p.useSegm is not None:
            p.iouType = "segm" if p.useSegm == 1 else "bbox"
            print(f"useSegm (deprecated) is not None. Running {p.iouType} evaluation")
        print(f"Evaluate annotation type *{p.iouType}*")
        _refuse_iou_type(p.iouType)
        if self.cocoGt is None or self.cocoDt is None:
            raise ValueError("COCOeval needs cocoGt and cocoDt")
        p.imgIds = list(np.unique(p.imgIds))
        if p.useCats:
            p.catIds = list(np.unique(p.catIds))
        p.maxDets = sorted(p.maxDets)
        self.params = p
        cap = p.maxDets[-1]
        gt, dt = self._inputs()
        self._native = _groundrl.coco_evaluate(
            gt,
            dt,
            _ints(p.imgIds),
            _ints(p.catIds),
            bool(p.useCats),
            [float(t) for t in p.iouThrs],
            _ints(p.maxDets),
            [[float(r[0]), float(r[1])] for r in p.areaRng],
        )
        self._evaluated = {
            "imgIds": list(p.imgIds),
            "catIds": list(p.catIds) if p.useCats else [-1],
            "areaRng": list(p.areaRng),
            "maxDet": cap,
            "T": len(p.iouThrs),
        }
        self._evalImgs = None
        self.eval = {}
        self._paramsEval = _copy_params(self.params)
        print(f"DONE (t={time.time() - tic:0.2f}s).")

    def _inputs(self) -> "tuple[Any, Any]":
        """The records to evaluate: parsed at load time while the COCO objects' Python side is
        untouched; otherwise read from their index as pycocotools' ``_prepare`` reads it."""
        gt, dt, p = self.cocoGt, self.cocoDt, self.params
        assert gt is not None and dt is not None

        def selected(coco: COCO) -> Any:
            ids = coco.getAnnIds(imgIds=p.imgIds, catIds=p.catIds) if p.useCats else coco.getAnnIds(imgIds=p.imgIds)
            return coco.loadAnns(ids)

        if gt._native_gt is not None and not gt._materialized():
            native_gt = gt._native_gt
        else:
            native_gt = _groundrl.coco_ground_truth_dicts(_ints(gt.getImgIds()), _ints(gt.getCatIds()), selected(gt))
        if dt._native_dt is not None and not dt._materialized():
            native_dt = dt._native_dt
        else:
            native_dt = _groundrl.coco_detection_dicts(selected(dt))
        return native_gt, native_dt

    def accumulate(self, p: Optional[Params] = None) -> None:
        """The precision, recall and score arrays, from what ``evaluate()`` matched."""
        print("Accumulating evaluation results...")
        tic = time.time()
        if self._native is None:
            print("Please run evaluate() first")
            return
        if p is None:
            p = self.params
        p.catIds = p.catIds if p.useCats == 1 else [-1]
        shape = (len(p.iouThrs), len(p.recThrs), len(p.catIds) if p.useCats else 1, len(p.areaRng), len(p.maxDets))
        evaluated = self._paramsEval
        # Which evaluated categories, areas, caps and images p reads, as pycocotools pairs them.
        cats = set(evaluated.catIds if evaluated.useCats else [-1])
        areas = set(tuple(r) for r in evaluated.areaRng)
        caps, images = set(evaluated.maxDets), set(evaluated.imgIds)
        units = [n for n, k in enumerate(p.catIds) if k in cats]
        area_list = [n for n, r in enumerate(p.areaRng) if tuple(r) in areas]
        cap_list = [m for m in p.maxDets if m in caps]
        image_list = [n for n, i in enumerate(p.imgIds) if i in images]
        t, r, k, a, m = shape
        precision, recall, scores = self._native.accumulate(
            units, area_list, _ints(cap_list), image_list, [float(x) for x in p.recThrs], (t, k, a, m)
        )
        self.eval = {
            "params": p,
            "counts": [t, r, k, a, m],
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "precision": np.frombuffer(precision, dtype=np.float64).reshape(t, r, k, a, m),
            "recall": np.frombuffer(recall, dtype=np.float64).reshape(t, k, a, m),
            "scores": np.frombuffer(scores, dtype=np.float64).reshape(t, r, k, a, m),
        }
        print(f"DONE (t={time.time() - tic:0.2f}s).")

    def summarize(self) -> None:
        """Prints pycocotools' 12 lines and sets ``stats``."""
        if not self.eval:
            raise Exception("Please run accumulate() first")
        caps = self.params.maxDets
        lines = [
            (1, None, "all", 100),
            (1, 0.5, "all", caps[2]),
            (1, 0.75, "all", caps[2]),
            (1, None, "small", caps[2]),
            (1, None, "medium", caps[2]),
            (1, None, "large", caps[2]),
            (0, None, "all", caps[0]),
            (0, None, "all", caps[1]),
            (0, None, "all", caps[2]),
            (0, None, "small", caps[2]),
            (0, None, "medium", caps[2]),
            (0, None, "large", caps[2]),
        ]
        stats = np.zeros((12,))
        for i, (ap, iou, area, cap) in enumerate(lines):
            stats[i] = self._summary_line(ap, iou, area, cap)
        self.stats = stats

    def _summary_line(self, ap: int, iou: Optional[float], area: str, cap: int) -> Any:
        """One summary number: the mean of the entries above -1 at that IoU (all when None), area
        label and cap, as pycocotools selects and averages them; -1 when there is none."""
        p = self.params
        values = self.eval["precision"] if ap == 1 else self.eval["recall"]
        if iou is not None:
            values = values[np.where(iou == p.iouThrs)[0]]
        area_at = [i for i, label in enumerate(p.areaRngLbl) if label == area]
        cap_at = [i for i, c in enumerate(p.maxDets) if c == cap]
        values = values[:, :, :, area_at, cap_at] if ap == 1 else values[:, :, area_at, cap_at]
        kept = values[values > -1]
        mean = -1 if len(kept) == 0 else np.mean(kept)
        title, kind = ("Average Precision", "(AP)") if ap == 1 else ("Average Recall", "(AR)")
        ious = f"{p.iouThrs[0]:0.2f}:{p.iouThrs[-1]:0.2f}" if iou is None else f"{iou:0.2f}"
        print(f" {title:<18} {kind} @[ IoU={ious:<9} | area={area:>6s} | maxDets={cap:>3d} ] = {mean:0.3f}")
        return mean

    def __str__(self) -> str:
        self.summarize()
        return ""

    def _eval_imgs(self) -> List[Any]:
        """``evalImgs`` from the evaluation: entries in pycocotools' order (category, area range,
        image), None where the image holds neither ground truth nor detection of the category."""
        if self._native is None or self._evaluated is None:
            return []
        e = self._evaluated
        image_ids, cat_ids, area_rng, cap, t = e["imgIds"], e["catIds"], e["areaRng"], e["maxDet"], e["T"]
        parts = self._native.detail()
        entries = np.frombuffer(parts[0], dtype=np.uint32).reshape(-1, 7)
        dt_ids = np.frombuffer(parts[1], dtype=np.int64).tolist()
        dt_scores = np.frombuffer(parts[2], dtype=np.float64).tolist()
        gt_ids = np.frombuffer(parts[3], dtype=np.int64).tolist()
        gt_ignore = np.frombuffer(parts[4], dtype=np.int64)
        dt_matches = np.frombuffer(parts[5], dtype=np.float64)
        gt_matches = np.frombuffer(parts[6], dtype=np.float64)
        dt_ignore = np.frombuffer(parts[7], dtype=np.bool_)
        n_images, n_areas = len(image_ids), len(area_rng)
        out: List[Any] = [None] * (len(cat_ids) * n_areas * n_images)
        dm = gm = 0
        for k, a, i, d0, nd, g0, ng in entries.tolist():
            out[(k * n_areas + a) * n_images + i] = {
                "image_id": image_ids[i],
                "category_id": cat_ids[k],
                "aRng": area_rng[a],
                "maxDet": cap,
                "dtIds": dt_ids[d0 : d0 + nd],
                "gtIds": gt_ids[g0 : g0 + ng],
                "dtMatches": dt_matches[dm : dm + t * nd].reshape(t, nd),
                "gtMatches": gt_matches[gm : gm + t * ng].reshape(t, ng),
                "dtScores": dt_scores[d0 : d0 + nd],
                "gtIgnore": gt_ignore[g0 : g0 + ng] if ng else np.array([]),
                "dtIgnore": dt_ignore[dm : dm + t * nd].reshape(t, nd),
            }
            dm += t * nd
            gm += t * ng
        return out


def _ints(values: Sequence[Any]) -> List[int]:
    """Ids and caps as Python ints (numpy integers and integral floats included); other values are
    passed on as they are, for the native side to refuse by name."""
    array = np.asarray(values)
    if array.dtype.kind in "iub":
        return array.astype(np.int64).tolist()
    out = []
    for v in values:
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        out.append(int(v) if isinstance(v, (int, np.integer)) else v)
    return out


def _copy_params(p: Params) -> Params:
    """``copy.deepcopy(p)``, quicker on the long lists of ids (numbers are immutable)."""
    q = copy.copy(p)
    for name, value in vars(p).items():
        if isinstance(value, np.ndarray):
            setattr(q, name, value.copy())
        elif isinstance(value, list) and all(isinstance(v, (int, float, np.number)) for v in value):
            setattr(q, name, list(value))
        else:
            setattr(q, name, copy.deepcopy(value))
    return q
