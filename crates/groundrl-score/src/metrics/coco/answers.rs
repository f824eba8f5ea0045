//! COCO evaluation of a model's answers on detection samples (`groundrl eval model`): each sample
//! one image, its targets the ground truth and the answered boxes the detections, in original
//! pixels.
//!
//! Built as VLM-R1 builds COCO records of open-vocabulary answers (as [`super::single_image_ap`]
//! does for one image): categories are the targets' labels, numbered from 1 by first appearance over
//! the samples; boxes are `[x1, y1, x2 - x1, y2 - y1]` with ground-truth area `(x2 - x1) * (y2 - y1)`
//! and no crowd; the answers carry no confidence, so every detection scores 1.0 and the answer's
//! listing order decides (pycocotools sorts by score with a stable sort); an answered label that no
//! target has cannot be placed in a category and is dropped, and counted.

use crate::geometry::LabeledBox;

use super::{Category, CocoError, CocoEval, Detection, GroundTruth, GtAnnotation, evaluate};

/// One detection sample: its targets and the model's boxes, in original pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct AnsweredImage {
    pub targets: Vec<LabeledBox>,
    pub answers: Vec<LabeledBox>,
}

/// The COCO evaluation of the answers, and the answered boxes left out.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswersEval {
    pub eval: CocoEval,
    /// Answered boxes whose label is none of the targets' labels.
    pub unknown_labels: usize,
    /// Answered boxes with a coordinate that is not finite.
    pub non_finite: usize,
}

/// Evaluates every image's answers against its targets (see the module doc).
pub fn evaluate_answers(images: &[AnsweredImage]) -> Result<AnswersEval, CocoError> {
    let mut categories: Vec<Category> = Vec::new();
    let mut gt = GroundTruth::default();
    for (i, image) in images.iter().enumerate() {
        let image_id = i as i64 + 1;
        gt.image_ids.push(image_id);
        for target in &image.targets {
            let category_id = match categories.iter().position(|c| c.name == target.label) {
                Some(k) => k as i64 + 1,
                None => {
                    categories.push(Category {
                        id: categories.len() as i64 + 1,
                        name: target.label.clone(),
                    });
                    categories.len() as i64
                }
            };
            let (bbox, area) = xywh_area(target);
            gt.annotations.push(GtAnnotation {
                id: gt.annotations.len() as i64 + 1,
                image_id,
                category_id,
                bbox,
                area,
                iscrowd: false,
            });
        }
    }
    let (mut unknown_labels, mut non_finite) = (0, 0);
    let mut detections = Vec::new();
    for (i, image) in images.iter().enumerate() {
        for answer in &image.answers {
            if !answer.bbox.is_finite() {
                non_finite += 1;
                continue;
            }
            let Some(k) = categories.iter().position(|c| c.name == answer.label) else {
                unknown_labels += 1;
                continue;
            };
            detections.push(Detection {
                image_id: i as i64 + 1,
                category_id: k as i64 + 1,
                bbox: xywh_area(answer).0,
                score: 1.0,
            });
        }
    }
    gt.categories = categories;
    Ok(AnswersEval {
        eval: evaluate(&gt, &detections)?,
        unknown_labels,
        non_finite,
    })
}

/// `[x, y, width, height]` and the area `width * height`.
fn xywh_area(b: &LabeledBox) -> ([f64; 4], f64) {
    let [x1, y1, x2, y2] = b.bbox.xyxy();
    let (w, h) = (x2 - x1, y2 - y1);
    ([x1, y1, w, h], w * h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::BBox;

    fn labeled(label: &str, xyxy: [f64; 4]) -> LabeledBox {
        LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: label.into(),
        }
    }

    #[test]
    fn answers_matching_their_targets_score_one_and_unknown_labels_are_counted() {
        let images = [
            AnsweredImage {
                targets: vec![
                    labeled("dog", [0.0, 0.0, 10.0, 10.0]),
                    labeled("cat", [20.0, 20.0, 40.0, 40.0]),
                ],
                answers: vec![
                    labeled("cat", [20.0, 20.0, 40.0, 40.0]),
                    labeled("dog", [0.0, 0.0, 10.0, 10.0]),
                    labeled("bird", [0.0, 0.0, 5.0, 5.0]),
                ],
            },
            AnsweredImage {
                targets: vec![labeled("dog", [5.0, 5.0, 25.0, 25.0])],
                answers: vec![labeled("dog", [5.0, 5.0, 25.0, 25.0])],
            },
        ];
        let result = evaluate_answers(&images).unwrap();
        assert_eq!((result.unknown_labels, result.non_finite), (1, 0));
        assert!(
            (result.eval.stats.ap - 1.0).abs() < 1e-12,
            "{:?}",
            result.eval.stats
        );
        assert_eq!(result.eval.at50.true_positives, 3);
        // A miss and a wrong label halve the recall of the dogs.
        let missed = [AnsweredImage {
            targets: images[0].targets.clone(),
            answers: vec![labeled("dog", [50.0, 50.0, 60.0, 60.0])],
        }];
        let result = evaluate_answers(&missed).unwrap();
        assert_eq!(result.eval.at50.true_positives, 0);
        assert_eq!(result.eval.at50.false_positives, 1);
    }
}
