//! The image processor against HF transformers 5.17's goldens, its config JSON and its refusals.
//!
//! Goldens come from `scripts/goldens/image_processor.py`. A case stores `codes` (HF's patchified
//! resized uint8 image) and `lut.safetensors` HF's normalization of all 256 uint8 values per channel;
//! the script checked that `lut[channel, codes]` is HF's `pixel_values` bit for bit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use groundrl_score::resize::ResizeError;
use groundrl_tensor::processor::image::{ImageProcessor, ImageProcessorError, ProcessedImages};
use image::{DynamicImage, GrayImage, RgbImage};
use serde::Deserialize;
use tch::{Kind, Tensor};

/// Max abs difference allowed against HF's default (torchvision) backend: none. The processor runs
/// libtorch's own uint8 resize kernel and HF's f32 op sequence, so it is bit-identical.
const TOLERANCE: f64 = 0.0;
/// Values per patch row: 3 channels x 2 frames x 14 x 14.
const PATCH_DIM: i64 = 1176;

#[derive(Deserialize)]
struct Case {
    images: Vec<String>,
    min_pixels: u64,
    max_pixels: u64,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/processor")
}

fn cases() -> BTreeMap<String, Case> {
    let text = std::fs::read_to_string(fixtures().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read_tensors(name: &str) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(fixtures().join(name))
        .unwrap()
        .into_iter()
        .collect()
}

fn processor(case: &Case) -> ImageProcessor {
    ImageProcessor {
        min_pixels: case.min_pixels,
        max_pixels: case.max_pixels,
        ..ImageProcessor::default()
    }
}

fn run(processor: &ImageProcessor, case: &Case) -> ProcessedImages {
    let images: Vec<DynamicImage> = (case.images.iter())
        .map(|name| image::open(fixtures().join(format!("{name}.png"))).unwrap())
        .collect();
    processor.preprocess(&images).unwrap()
}

/// HF's `pixel_values` from the stored encoding: `lut[channel of the column, code]`.
fn expected_pixel_values(codes: &Tensor) -> Tensor {
    let lut = read_tensors("lut.safetensors").remove("lut").unwrap().view([-1]);
    let channel_offset: Vec<i64> = (0..PATCH_DIM)
        .map(|column| column / (PATCH_DIM / 3) * 256)
        .collect();
    let index = codes.to_kind(Kind::Int64) + Tensor::from_slice(&channel_offset);
    lut.index_select(0, &index.view([-1]))
        .view(codes.size().as_slice())
}

fn grid_rows(grid: &Tensor) -> Vec<[i64; 3]> {
    let flat = Vec::<i64>::try_from(grid.flatten(0, -1)).unwrap();
    flat.chunks(3).map(|c| [c[0], c[1], c[2]]).collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn pixel_values_match_hf_torchvision_backend() {
    for (name, case) in cases() {
        let golden = read_tensors(&format!("{name}.safetensors"));
        let out = run(&processor(&case), &case);
        let expected = expected_pixel_values(&golden["codes"]);
        assert_eq!(out.image_grid_thw, grid_rows(&golden["image_grid_thw"]), "{name}");
        assert_eq!(out.pixel_values.size(), expected.size(), "{name}");
        assert_eq!(out.pixel_values.kind(), Kind::Float, "{name}");
        let diff = max_abs_diff(&out.pixel_values, &expected);
        assert!(diff <= TOLERANCE, "{name}: max abs diff {diff} vs HF");
    }
}

#[test]
fn resized_uint8_patches_match_hf() {
    // Rescale and normalize off: the resize and the patch order alone, against HF's uint8 output.
    for (name, case) in cases() {
        let golden = read_tensors(&format!("{name}.safetensors"));
        let raw = ImageProcessor {
            do_rescale: false,
            do_normalize: false,
            ..processor(&case)
        };
        let out = run(&raw, &case);
        assert!(
            out.pixel_values.equal(&golden["codes"].to_kind(Kind::Float)),
            "{name}"
        );
    }
}

#[test]
fn placeholder_tokens_are_patches_over_merge() {
    let case = &cases()["batch"];
    let out = run(&processor(case), case);
    assert_eq!(out.image_grid_thw, vec![[1, 4, 6], [1, 4, 8]]);
    assert_eq!(out.image_tokens, vec![6, 8]);
    assert_eq!(out.grid_thw_tensor().size(), vec![2, 3]);
    // A Full HD screenshot under a checkpoint's budget: 78 x 138 patches, 2691 tokens.
    let checkpoint = ImageProcessor {
        max_pixels: 12_845_056,
        ..ImageProcessor::default()
    };
    assert_eq!(checkpoint.grid_thw(1080, 1920).unwrap(), [1, 78, 138]);
    assert_eq!(
        ImageProcessor::default().grid_thw(1080, 1920).unwrap(),
        [1, 52, 94]
    );
}

#[test]
fn hf_saved_config_round_trips_byte_for_byte() {
    let saved = std::fs::read_to_string(fixtures().join("preprocessor_config.json")).unwrap();
    let processor = ImageProcessor::from_json(&saved).unwrap();
    assert_eq!((processor.min_pixels, processor.max_pixels), (3136, 12_845_056));
    assert_eq!(processor.to_json().unwrap(), saved);
}

#[test]
fn checkpoint_config_spelling_is_read() {
    // As in Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json, plus an unknown field.
    let json = r#"{
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"
    }"#;
    let processor = ImageProcessor::from_json(json).unwrap();
    let expected = ImageProcessor {
        max_pixels: 12_845_056,
        ..ImageProcessor::default()
    };
    assert_eq!(processor, expected);
}

#[test]
fn top_level_budget_wins_over_size_and_missing_fields_take_class_defaults() {
    let json =
        r#"{"min_pixels": 100, "size": {"shortest_edge": 5, "longest_edge": 4000}, "do_resize": null}"#;
    let processor = ImageProcessor::from_json(json).unwrap();
    assert_eq!((processor.min_pixels, processor.max_pixels), (100, 4000));
    assert!(processor.do_resize);
    assert_eq!(
        ImageProcessor::from_json("{}").unwrap(),
        ImageProcessor::default()
    );
}

#[test]
fn unsupported_configs_are_refused() {
    let refused = |json: &str| ImageProcessor::from_json(json).unwrap_err().to_string();
    assert!(refused(r#"{"patch_size": 0}"#).contains("patch_size 0"));
    assert!(refused(r#"{"merge_size": 4294967295}"#).contains("merge_size 4294967295"));
    assert!(refused(r#"{"resample": 2}"#).contains("resample 2"));
    assert!(refused(r#"{"image_std": [0.5, 0.0, 0.5]}"#).contains("zero"));
    assert!(refused(r#"{"image_mean": 0.5}"#).contains("invalid preprocessor config"));
    let bad_budget = ImageProcessor {
        min_pixels: 5000,
        max_pixels: 4000,
        ..ImageProcessor::default()
    };
    let err = bad_budget.preprocess_rgb(&[RgbImage::new(56, 56)]).unwrap_err();
    assert!(
        err.to_string()
            .contains("min_pixels 5000 is larger than max_pixels 4000"),
        "{err}"
    );
}

fn refusal(processor: &ImageProcessor, images: &[DynamicImage]) -> (usize, ImageProcessorError) {
    match processor.preprocess(images).unwrap_err() {
        ImageProcessorError::InImage { index, source } => (index, *source),
        other => panic!("expected an error naming the image, got {other}"),
    }
}

#[test]
fn bad_images_are_refused_with_the_image_named() {
    let ok = DynamicImage::ImageRgb8(RgbImage::new(56, 56));
    let processor = ImageProcessor::default();

    let (index, err) = refusal(
        &processor,
        &[ok.clone(), DynamicImage::ImageRgb8(RgbImage::new(0, 10))],
    );
    assert_eq!(index, 1);
    assert!(
        matches!(err, ImageProcessorError::Size(ResizeError::ZeroSize { .. })),
        "{err}"
    );

    let (_, err) = refusal(&processor, &[DynamicImage::ImageRgb8(RgbImage::new(402, 2))]);
    assert!(
        matches!(err, ImageProcessorError::Size(ResizeError::AspectRatio { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("aspect ratio 201.0"), "{err}");

    let no_convert = ImageProcessor {
        do_convert_rgb: false,
        ..ImageProcessor::default()
    };
    let (_, err) = refusal(&no_convert, &[DynamicImage::ImageLuma8(GrayImage::new(56, 56))]);
    assert!(matches!(err, ImageProcessorError::NotRgb { .. }), "{err}");

    let no_resize = ImageProcessor {
        do_resize: false,
        ..ImageProcessor::default()
    };
    let (_, err) = refusal(&no_resize, &[DynamicImage::ImageRgb8(RgbImage::new(56, 70))]);
    assert!(
        matches!(err, ImageProcessorError::NotPatchAligned { .. }),
        "{err}"
    );

    assert!(matches!(
        processor.preprocess(&[]),
        Err(ImageProcessorError::NoImages)
    ));
}

#[test]
fn rgb_and_dynamic_inputs_agree() {
    let case = &cases()["noise_70x98"];
    let rgb = image::open(fixtures().join("noise_70x98.png")).unwrap().to_rgb8();
    let from_rgb = processor(case).preprocess_rgb(&[rgb]).unwrap();
    assert!(
        from_rgb
            .pixel_values
            .equal(&run(&processor(case), case).pixel_values)
    );
}
