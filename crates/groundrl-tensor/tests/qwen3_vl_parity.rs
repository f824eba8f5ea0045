//! Qwen3-VL against HF transformers 5.17 goldens (tests/fixtures/qwen3_vl, made by
//! scripts/goldens/qwen3_vl.py): M-RoPE positions, merged and DeepStack image features and logits of two
//! tiny random models on a left-padded batch with several images per row and a text-only row; the image
//! processor with Qwen3-VL's settings on real-size images; and Qwen3-VL's chat template rendered,
//! expanded and tokenized as HF's processor does.

use crate::qwen3_vl_fixtures;

use groundrl_tensor::family::Family;
use groundrl_tensor::processor::Processor;
use groundrl_tensor::processor::chat_template::RenderOptions;
use groundrl_tensor::processor::image::ImageProcessor;
use groundrl_tensor::qwen3_vl::{Qwen3Vl, VisionOutput};
use image::DynamicImage;
use qwen3_vl_fixtures::{fixture, fixtures, golden, named, relative_error, unpadded};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tch::{Device, Kind, Tensor};

fn json(path: std::path::PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn grids_of(value: &Value) -> Vec<[i64; 3]> {
    let rows: Vec<Vec<i64>> = serde_json::from_value(value.clone()).unwrap();
    rows.into_iter().map(|g| [g[0], g[1], g[2]]).collect()
}

#[test]
fn positions_features_and_logits_match_hf_in_f32() {
    for name in ["tiny_a", "tiny_b"] {
        let model = Qwen3Vl::load(&fixture(name), Device::Cpu, Kind::Float).unwrap();
        let (batch, hf) = golden(name);
        let prepared = model.prepare(&batch).unwrap();
        let positions: Vec<i64> = prepared.rope.positions.iter().flat_map(|c| c.concat()).collect();
        let positions = Tensor::from_slice(&positions).view_as(&hf["position_ids"]);
        assert!(
            positions.equal(&hf["position_ids"]),
            "{name}: position ids differ from HF"
        );
        let deltas = Vec::<i64>::try_from(&hf["rope_deltas"].view([-1])).unwrap();
        assert_eq!(prepared.rope.deltas, deltas, "{name}");

        let pixels = batch.pixel_values.as_ref().unwrap();
        let packed = tch::no_grad(|| model.image_features(pixels, &batch.image_grids)).unwrap();
        let levels = model.config.vision.deepstack_visual_indexes.len();
        let features = VisionOutput::unpack(&packed, model.config.text.hidden_size, levels).unwrap();
        let err = relative_error(&features.merged, &hf["vision_out"]);
        println!("{name}: merged image features max relative error {err:.3e}");
        assert!(err <= 1e-5, "{name}: merged features relative error {err}");
        let levels = hf.keys().filter(|k| k.starts_with("deepstack_")).count();
        assert!(
            levels > 0 && features.deepstack.len() == levels,
            "{name}: {levels} DeepStack levels in HF"
        );
        for (i, ours) in features.deepstack.iter().enumerate() {
            let err = relative_error(ours, &hf[&format!("deepstack_{i}")]);
            println!("{name}: DeepStack level {i} max relative error {err:.3e}");
            assert!(err <= 1e-5, "{name}: DeepStack level {i} relative error {err}");
        }

        let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
        let mask = batch.attention_mask.as_ref().unwrap();
        let (ours, theirs) = (unpadded(&logits, mask), unpadded(&hf["logits"], mask));
        let err = relative_error(&ours, &theirs);
        println!("{name}: f32 logits max relative error {err:.3e}");
        assert!(err <= 1e-5, "{name}: logits relative error {err}");
        let agree = ours.argmax(-1, false).eq_tensor(&theirs.argmax(-1, false));
        assert!(
            bool::try_from(agree.all()).unwrap(),
            "{name}: an argmax differs from HF's"
        );
    }
}

/// bf16 weights and activations against HF's f32 logits: rounding moves them by a few percent, a wrong
/// computation (a swapped rotary component, a DeepStack level added after the wrong layer) by far more.
#[test]
fn bf16_logits_stay_close_to_hf_f32() {
    for name in ["tiny_a", "tiny_b"] {
        let model = Qwen3Vl::load(&fixture(name), Device::Cpu, Kind::BFloat16).unwrap();
        let (batch, hf) = golden(name);
        let logits = tch::no_grad(|| model.logits(&batch)).unwrap();
        let mask = batch.attention_mask.as_ref().unwrap();
        let err = relative_error(&unpadded(&logits, mask), &unpadded(&hf["logits"], mask));
        println!("{name}: bf16 logits max relative error vs HF f32 {err:.3e}");
        assert!(err <= 5e-2, "{name}: bf16 logits relative error {err}");
    }
}

#[test]
fn a_folder_of_another_family_is_refused() {
    let qwen2_5 = fixtures().join("qwen2_5_vl/tiny_a");
    let err = Qwen3Vl::load(&qwen2_5, Device::Cpu, Kind::Float)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`qwen2_5_vl`") && err.contains("`qwen3_vl`"),
        "{err}"
    );
    assert_eq!(Family::of_folder(&qwen2_5).unwrap(), Family::Qwen25Vl);
    assert_eq!(Family::of_folder(&fixture("tiny_b")).unwrap(), Family::Qwen3Vl);
}

#[test]
fn mismatched_placeholders_and_branch_layouts_are_input_errors() {
    let model = Qwen3Vl::load(&fixture("tiny_a"), Device::Cpu, Kind::Float).unwrap();
    let (mut batch, _) = golden("tiny_a");
    batch.image_grids.pop();
    let err = model.logits(&batch).unwrap_err().to_string();
    assert!(err.contains("bad model input"), "{err}");
    let (mut batch, _) = golden("tiny_a");
    batch.input_ids[1].pop();
    assert!(model.logits(&batch).unwrap_err().to_string().contains("row 1"));
    let (mut batch, _) = golden("tiny_a");
    batch.branches = Some(vec![]);
    let err = model.logits(&batch).unwrap_err().to_string();
    assert!(err.contains("0 branch layouts for 3 rows"), "{err}");
}

fn qwen3_processor() -> ImageProcessor {
    let text = std::fs::read_to_string(fixture("processor/preprocessor_config.json")).unwrap();
    ImageProcessor::from_json(&text).unwrap()
}

fn open_images(names: &[String]) -> Vec<DynamicImage> {
    names
        .iter()
        .map(|n| image::open(fixture(&format!("processor/{n}.png"))).unwrap())
        .collect()
}

fn sha256_of_f32(t: &Tensor) -> String {
    let values = Vec::<f32>::try_from(t.flatten(0, -1)).unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// HF's f32 `pixel_values` are reproduced bit for bit (no rounding on either side to allow for): a few
/// whole rows compared value by value, and the whole tensor through its SHA-256.
#[test]
fn image_processor_matches_hf_bit_for_bit_with_qwen3_settings() {
    let processor = qwen3_processor();
    let rows = named(fixture("processor/rows.safetensors"));
    let expected = json(fixture("processor/expected.json"));
    for (case, want) in expected.as_object().unwrap() {
        let names: Vec<String> = serde_json::from_value(want["images"].clone()).unwrap();
        let out = processor.preprocess(&open_images(&names)).unwrap();
        assert_eq!(out.image_grid_thw, grids_of(&want["image_grid_thw"]), "{case}");
        let tokens: Vec<usize> = serde_json::from_value(want["image_tokens"].clone()).unwrap();
        assert_eq!(out.image_tokens, tokens, "{case}");
        let shape: Vec<i64> = serde_json::from_value(want["pixel_values_shape"].clone()).unwrap();
        assert_eq!(out.pixel_values.size(), shape, "{case}");
        let picked = out.pixel_values.index_select(0, &rows[&format!("{case}.index")]);
        let diff = (&picked - &rows[&format!("{case}.rows")])
            .abs()
            .max()
            .double_value(&[]);
        assert_eq!(diff, 0.0, "{case}: sampled rows differ from HF's by up to {diff}");
        assert_eq!(
            sha256_of_f32(&out.pixel_values),
            want["pixel_values_sha256"].as_str().unwrap(),
            "{case}: pixel_values differ from HF's"
        );
    }
}

#[test]
fn qwen3_preprocessor_config_reads_its_settings_and_round_trips() {
    let saved = std::fs::read_to_string(fixture("processor/preprocessor_config.json")).unwrap();
    let processor = ImageProcessor::from_json(&saved).unwrap();
    assert_eq!((processor.patch_size, processor.merge_size), (16, 2));
    assert_eq!((processor.min_pixels, processor.max_pixels), (65_536, 16_777_216));
    assert_eq!((processor.image_mean, processor.image_std), ([0.5; 3], [0.5; 3]));
    assert_eq!(processor.to_json().unwrap(), saved);
    // 16-pixel patches merged 2x2: sides are multiples of 32.
    assert_eq!(processor.grid_thw(1080, 1920).unwrap(), [1, 68, 120]);
}

/// A model folder as Qwen3-VL ships one, with the tiny tokenizer: tokenizer files, Qwen3-VL's
/// chat_template.jinja (which wins over the tokenizer config's template, as in HF) and its image settings.
fn chat_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sources = [
        fixtures().join("tiny-tokenizer/tokenizer.json"),
        fixtures().join("tiny-tokenizer/tokenizer_config.json"),
        fixture("chat/chat_template.jinja"),
        fixture("processor/preprocessor_config.json"),
    ];
    for source in sources {
        std::fs::copy(&source, dir.path().join(source.file_name().unwrap())).unwrap();
    }
    dir
}

fn options_of(case: &Value) -> RenderOptions {
    RenderOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        tools: case.get("tools").and_then(Value::as_array).cloned(),
        kwargs: case
            .get("kwargs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    }
}

#[test]
fn chat_template_and_processor_give_hf_input_ids() {
    let folder = chat_folder();
    let processor = Processor::from_folder(folder.path()).unwrap();
    let cases = json(fixture("chat/cases.json"));
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let messages = case["messages"].as_array().unwrap();
        let options = options_of(case);
        let text = processor.template.render(messages, &options).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{name}: rendered text");
        let names: Vec<String> = serde_json::from_value(case["images"].clone()).unwrap();
        let encoded = processor
            .encode_chat(messages, &open_images(&names), &options)
            .unwrap();
        assert_eq!(encoded.image_grids, grids_of(&case["image_grid_thw"]), "{name}");
        let ids: Vec<i64> = serde_json::from_value(case["input_ids"].clone()).unwrap();
        assert_eq!(encoded.input_ids, ids, "{name}: input ids");
    }
}
