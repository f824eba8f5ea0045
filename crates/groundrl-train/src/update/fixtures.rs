//! Test fixtures of the update's modules: the tiny model with its processor, prompts with made-up
//! images, and a tool-using trajectory.

use groundrl_core::data::image_file::ImageLimits;
use groundrl_tensor::hf_folder::tiny_ids;
use groundrl_tensor::model::Grid;
use groundrl_tensor::processor::chat_template::ChatTemplate;
use groundrl_tensor::processor::image::ImageProcessor;
use groundrl_tensor::processor::tiny_tokenizer::{VOCAB_SIZE, tiny_tokenizer};
use groundrl_tensor::processor::tokenizer::expand_image_pads;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen2_5_vl::{Qwen25Vl, presets};
use tch::{Device, Kind, Tensor};

use super::batch::Row;

/// The tiny preset, random-init, with a processor of the tiny tokenizer.
pub(crate) fn tiny() -> (Qwen25Vl, Processor) {
    let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
    let processor = Processor {
        tokenizer: tiny_tokenizer().unwrap(),
        template: ChatTemplate::qwen2_5_vl(),
        image: ImageProcessor::default(),
        files: ImageLimits::default(),
    };
    (Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 3), processor)
}

pub(crate) fn ids(p: &Processor, text: &str) -> Vec<i64> {
    let ids = p.tokenizer.encode(text).unwrap();
    ids.into_iter().map(i64::from).collect()
}

/// `text` with its one `<|image_pad|>` expanded for an image of `grid`, and made-up pixel rows
/// `offset + 1e-4 * k` for k = 0, 1, ... (every value different, so their order can be checked).
pub(crate) fn with_image(p: &Processor, text: &str, grid: Grid, offset: f64) -> Encoded {
    let patches = grid.iter().product::<i64>();
    let merged = (patches / 4) as usize;
    let pixels = Tensor::arange(patches * 1176, (Kind::Float, Device::Cpu)).view([patches, 1176]) * 1e-4;
    Encoded {
        input_ids: ids(p, &expand_image_pads(text, &[merged]).unwrap()),
        pixel_values: Some(pixels + offset),
        image_grids: vec![grid],
    }
}

pub(crate) const PROMPT: &str = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Click OK.<|im_end|>\n\
                      <|im_start|>assistant\n";
const CALL: &str =
    "<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [0, 0, 28, 28]}}\n</tool_call>";
const TOOL_TURN: &str = "<|im_end|>\n<|im_start|>user\n<tool_response>\n<|vision_start|><|image_pad|>\
                         <|vision_end|>zoom 2x\n</tool_response><|im_end|>\n<|im_start|>assistant\n";

/// A prompt with its trajectory after it.
pub(super) struct Trajectory {
    pub prompt: Encoded,
    /// The tool turn alone (its ids are inside `response`).
    pub tool: Encoded,
    pub response: Encoded,
    pub generated: Vec<bool>,
}

impl Trajectory {
    pub(super) fn row(&self, advantage: f64) -> Row<'_> {
        Row {
            prompt: &self.prompt,
            response: &self.response,
            generated: &self.generated,
            advantage,
            counts: true,
            prompt_features: None,
        }
    }
}

/// A screenshot prompt (a 4 x 4 patch image), then the model's zoom call, the tool turn with the
/// zoomed image (4 x 8 patches) and the model's answer.
pub(super) fn zoom_trajectory(p: &Processor) -> Trajectory {
    let prompt = with_image(p, PROMPT, [1, 4, 4], 0.0);
    let tool = with_image(p, TOOL_TURN, [1, 4, 8], 5.0);
    let call = ids(p, CALL);
    let answer = ids(p, "(20, 30)<|im_end|>");
    let mut input_ids = call.clone();
    input_ids.extend(&tool.input_ids);
    input_ids.extend(&answer);
    let mut generated = vec![true; call.len()];
    generated.extend(vec![false; tool.input_ids.len()]);
    generated.extend(vec![true; answer.len()]);
    let response = Encoded {
        input_ids,
        pixel_values: tool.pixel_values.as_ref().map(Tensor::shallow_clone),
        image_grids: tool.image_grids.clone(),
    };
    Trajectory {
        prompt,
        tool,
        response,
        generated,
    }
}

pub(super) fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
}
