//! Multi-turn rollouts with tools on the tiny preset (CPU, f32): the tool turn's tokens against the
//! template's literal text, plain generation when no tool is offered, a batch mixing scripted tool
//! calls with the engine's own completions, the turn and token caps, and the returned log-probs
//! against a recomputation of whole trajectories.
//!
//! A random tiny model never writes a tool call, so the tests script some first turns (and, for the
//! caps, some second turns): [`Scripted`] wraps the real engine and swaps the listed samples'
//! completions for the tokens of a given call; every other turn is the engine's own.

use crate::common;
use common::{tiny, tiny_of};

use std::cell::Cell;

use groundrl_core::tool::{CallOutcome, ToolOutput, Toolbox, View, ZoomParams, ZoomTool};
use groundrl_score::frame::{Frame, ImageFrames, Size};
use groundrl_score::geometry::Point;
use groundrl_score::resize::PixelBudget;
use groundrl_tensor::hf_folder::{HfModel, RandomFolder};
use groundrl_tensor::processor::chat_template::{ChatTemplate, RenderOptions};
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::rollout::{
    CallRecord, Completion, Engine, FinishReason, Generate, GenerationRequest, RolloutError, SamplingParams,
    ToolRequest, ToolRollout, Trajectory, TurnLimits,
};
use groundrl_tensor::scores;
use image::{DynamicImage, Rgb, RgbImage};
use serde_json::json;
use tch::Tensor;

/// A zoom of the screenshot's region x 28..56, y 28..56 (resized frame = original pixels here).
const ZOOM: &str =
    "<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [28, 28, 56, 56]}}\n</tool_call>";
/// A zoom of the top-left quarter of that zoom's 56 x 56 view: original x 28..42, y 28..42.
const ZOOM_AGAIN: &str =
    "<tool_call>{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [0, 0, 28, 28]}}</tool_call>";
const MALFORMED: &str = "<tool_call>{\"name\": \"zoom\", \"arguments\": [28, 28]}</tool_call>";
const UNKNOWN: &str =
    "<tool_call>{\"name\": \"crop\", \"arguments\": {\"bbox_2d\": [0, 0, 9, 9]}}</tool_call>";
const OFF_IMAGE: &str =
    "<tool_call>{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [200, 200, 300, 300]}}</tool_call>";

/// The sampling temperature of the multi-turn tests (not 1, so the recomputation divides as the
/// trainer does).
const TEMPERATURE: f64 = 0.8;

/// 112 x 84 pixels (multiples of 28: smart_resize keeps the size), every pixel unique.
fn screenshot() -> RgbImage {
    RgbImage::from_fn(112, 84, |x, y| {
        Rgb([x as u8, y as u8, ((x * 7 + y * 13) % 256) as u8])
    })
}

fn full_view() -> View {
    View::full(ImageFrames {
        original: Size::new(112.0, 84.0),
        resized: Size::new(112.0, 84.0),
    })
}

/// What [`ZOOM`] must show, built from the screenshot by hand: the 28 x 28 region at (28, 28), each
/// pixel repeated 2 x 2.
fn zoomed() -> RgbImage {
    let original = screenshot();
    RgbImage::from_fn(56, 56, |u, v| *original.get_pixel(28 + u / 2, 28 + v / 2))
}

fn budget(processor: &Processor) -> PixelBudget {
    PixelBudget {
        min_pixels: processor.image.min_pixels,
        max_pixels: processor.image.max_pixels,
    }
}

fn zoom_toolbox(processor: &Processor) -> Toolbox {
    let zoom = ZoomTool::new(ZoomParams {
        max_zoom: 2,
        budget: budget(processor),
    });
    Toolbox::new(vec![Box::new(zoom)])
}

fn ids(processor: &Processor, text: &str) -> Vec<i64> {
    let ids = processor.tokenizer.encode(text).unwrap();
    ids.into_iter().map(i64::from).collect()
}

fn decode(processor: &Processor, ids: &[i64]) -> String {
    let ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
    processor.tokenizer.decode(&ids, false).unwrap()
}

/// The screenshot with a question, the toolbox's tools declared, the assistant's turn opened.
fn prompt(processor: &Processor, question: &str, toolbox: &Toolbox) -> Encoded {
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: (!toolbox.is_empty()).then(|| toolbox.schemas()),
        ..Default::default()
    };
    let content = json!([{"type": "image"}, {"type": "text", "text": question}]);
    let chat = [json!({"role": "user", "content": content})];
    let image = DynamicImage::ImageRgb8(screenshot());
    processor.encode_chat(&chat, &[image], &options).unwrap()
}

fn params(seed: u64, processor: &Processor) -> SamplingParams {
    SamplingParams {
        seed,
        temperature: TEMPERATURE,
        top_p: 1.0,
        max_new_tokens: 6,
        stop_token_ids: vec![i64::from(processor.tokenizer.special_ids().eos)],
        ..Default::default()
    }
}

/// Two prompts: `n[0]` and `n[1]` samples.
fn requests<'a>(
    processor: &Processor,
    toolbox: &Toolbox,
    image: &'a RgbImage,
    n: [usize; 2],
) -> Vec<ToolRequest<'a>> {
    ["Click the Save button.", "Where is the search field?"]
        .iter()
        .zip(n)
        .enumerate()
        .map(|(i, (question, n))| ToolRequest {
            request: GenerationRequest {
                prompt: prompt(processor, question, toolbox),
                n,
                first_sample: 0,
                params: params(10 + i as u64, processor),
                features: None,
            },
            image,
            view: full_view(),
        })
        .collect()
}

/// The tiny engine, except that in each listed round some samples get a scripted turn: the tokens of
/// a call's text ending at `</tool_call>`, finish StopString, log-probs 0.
struct Scripted<'e> {
    engine: Engine<'e>,
    processor: &'e Processor,
    /// Per round: (request index in that round's call, sample index, text).
    rounds: Vec<Vec<(usize, u64, &'static str)>>,
    calls: Cell<usize>,
}

impl<'e> Scripted<'e> {
    fn new(hf: &'e HfModel, rounds: Vec<Vec<(usize, u64, &'static str)>>) -> Self {
        Self {
            engine: Engine::new(hf.model.as_ref(), &hf.processor),
            processor: &hf.processor,
            rounds,
            calls: Cell::new(0),
        }
    }
}

impl Generate for Scripted<'_> {
    fn generate(&self, requests: &[GenerationRequest]) -> Result<Vec<Completion>, RolloutError> {
        let round = self.calls.replace(self.calls.get() + 1);
        let mut out = self.engine.generate(requests)?;
        for &(prompt, sample, text) in self.rounds.get(round).into_iter().flatten() {
            let c = out
                .iter_mut()
                .find(|c| c.prompt_index == prompt && c.sample_index == sample)
                .expect("the scripted sample is in the round");
            c.tokens = ids(self.processor, text);
            c.logprobs = vec![0.0; c.tokens.len()];
            c.finish = FinishReason::StopString;
        }
        Ok(out)
    }
}

fn rollout<'a>(
    generator: &'a dyn Generate,
    hf: &'a HfModel,
    toolbox: &'a Toolbox,
    limits: TurnLimits,
) -> ToolRollout<'a> {
    ToolRollout {
        engine: generator,
        processor: &hf.processor,
        toolbox,
        model_frame: Frame::Resized,
        limits,
    }
}

fn limits(max_turns: usize, max_total_tokens: usize) -> TurnLimits {
    TurnLimits {
        max_turns,
        max_total_tokens,
    }
}

fn record(name: &str, outcome: CallOutcome) -> Option<CallRecord> {
    Some(CallRecord {
        name: name.into(),
        outcome,
    })
}

/// The tool turn of the zoom reply, as the processor encodes it.
fn zoom_turn(processor: &Processor) -> Encoded {
    let reply = ToolOutput {
        text: "zoom 2x".into(),
        image: Some(zoomed()),
        view: None,
    };
    processor.tool_turn(&reply).unwrap()
}

fn assert_pixels_equal(got: &Tensor, want: &Tensor) {
    assert_eq!(got.size(), want.size());
    assert!(got.equal(want), "pixel values differ");
}

#[test]
fn the_tool_turn_is_what_the_template_renders_after_the_call() {
    let (_dir, hf) = tiny();
    let p = &hf.processor;
    let turn = zoom_turn(p);
    // 56 x 56 pixels: a 4 x 4 patch grid, 4 merged image tokens.
    let literal = format!(
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n<|vision_start|>{}<|vision_end|>zoom 2x\n\
         </tool_response><|im_end|>\n<|im_start|>assistant\n",
        "<|image_pad|>".repeat(4)
    );
    assert_eq!(turn.input_ids, ids(p, &literal));
    assert_eq!(turn.image_grids, vec![[1, 4, 4]]);
    let want = p.image.preprocess_rgb(&[zoomed()]).unwrap().pixel_values;
    assert_pixels_equal(turn.pixel_values.as_ref().unwrap(), &want);

    // A text-only reply, quoting a control token the model spelled out: it stays text.
    let reply = ToolOutput {
        text: "unknown tool \"<|im_end|>\"".into(),
        image: None,
        view: None,
    };
    let turn = p.tool_turn(&reply).unwrap();
    let literal = "<|im_end|>\n<|im_start|>user\n<tool_response>\nunknown tool \"< |im_end|>\"\n\
                   </tool_response><|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(turn.input_ids, ids(p, literal));
    let im_end = i64::from(p.tokenizer.special_ids().im_end);
    assert_eq!(turn.input_ids.iter().filter(|&&t| t == im_end).count(), 2);
    assert!(turn.pixel_values.is_none() && turn.image_grids.is_empty());

    // Templates that cannot be continued after a call.
    let with_template = |source: &str| Processor {
        tokenizer: p.tokenizer.clone(),
        template: ChatTemplate::new(source).unwrap(),
        image: p.image.clone(),
        files: p.files,
    };
    let rewrites_history = "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m.role }}\n\
        {% if m.content is string %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}";
    let err = with_template(rewrites_history)
        .tool_turn(&reply)
        .unwrap_err()
        .to_string();
    assert!(err.contains("changes how the turns before it render"), "{err}");
    let drops_assistant = "{% for m in messages %}{% if m.role != 'assistant' and m.content is string %}\
        {{ m.content }}{% endif %}{% endfor %}";
    let err = with_template(drops_assistant)
        .tool_turn(&reply)
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not render the assistant's text"), "{err}");
}

#[test]
fn without_tools_a_rollout_is_plain_generation() {
    let (_dir, hf) = tiny();
    let toolbox = Toolbox::default();
    let image = screenshot();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    let plain_requests: Vec<GenerationRequest> = requests(&hf.processor, &toolbox, &image, [2, 1])
        .into_iter()
        .map(|r| r.request)
        .collect();
    let plain = engine.generate(&plain_requests).unwrap();
    let rollout = rollout(&engine, &hf, &toolbox, limits(3, 64));
    let trajectories = rollout
        .generate(&requests(&hf.processor, &toolbox, &image, [2, 1]))
        .unwrap();
    assert_eq!(trajectories.len(), 3);
    for (t, c) in trajectories.iter().zip(&plain) {
        assert_eq!((t.prompt_index, t.sample_index), (c.prompt_index, c.sample_index));
        assert_eq!(t.response.input_ids, c.tokens);
        assert_eq!(t.logprobs, c.logprobs);
        assert_eq!(t.finish, c.finish);
        assert_eq!(t.generated, vec![true; c.tokens.len()]);
        assert_eq!(t.turns.len(), 1);
        assert_eq!(t.turns[0].tokens, c.tokens.len());
        assert_eq!(t.turns[0].call, None);
        assert_eq!(t.final_text(), decode_skipping_special(&hf.processor, &c.tokens));
        assert!(t.response.pixel_values.is_none() && t.response.image_grids.is_empty());
        assert_eq!(t.last_view, full_view());
    }
}

fn decode_skipping_special(processor: &Processor, ids: &[i64]) -> String {
    let ids: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
    processor.tokenizer.decode(&ids, true).unwrap()
}

/// Round 1 of the mixed batch: prompt 0's samples 0..3 call zoom, a malformed call and an unknown
/// tool; prompt 1's sample 0 zooms off the image; the other samples are the engine's.
fn mixed_batch(hf: &HfModel) -> Vec<Trajectory> {
    let toolbox = zoom_toolbox(&hf.processor);
    let image = screenshot();
    let script = vec![vec![
        (0, 0, ZOOM),
        (0, 1, MALFORMED),
        (0, 2, UNKNOWN),
        (1, 0, OFF_IMAGE),
    ]];
    let generator = Scripted::new(hf, script);
    let rollout = rollout(&generator, hf, &toolbox, limits(3, 200));
    let trajectories = rollout
        .generate(&requests(&hf.processor, &toolbox, &image, [4, 2]))
        .unwrap();
    assert_eq!(
        generator.calls.get(),
        2,
        "one round of first turns, one of second turns"
    );
    trajectories
}

#[test]
fn a_mixed_batch_answers_scripted_calls_and_continues() {
    let (_dir, hf) = tiny();
    let p = &hf.processor;
    let t = mixed_batch(&hf);
    let order: Vec<(usize, u64)> = t.iter().map(|t| (t.prompt_index, t.sample_index)).collect();
    assert_eq!(order, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]);

    // The zoom: the call, the tool turn with the crop enlarged, then the engine's second turn.
    let zoom = &t[0];
    let call = ids(p, ZOOM);
    let turn = zoom_turn(p);
    let tool_end = call.len() + turn.input_ids.len();
    assert_eq!(zoom.response.input_ids[..call.len()], call[..]);
    assert_eq!(zoom.response.input_ids[call.len()..tool_end], turn.input_ids[..]);
    assert_eq!(zoom.turns.len(), 2);
    assert_eq!(zoom.turns[0].text, ZOOM);
    assert_eq!(zoom.turns[0].call, record("zoom", CallOutcome::Ok));
    assert_eq!(zoom.turns[1].call, None);
    assert!((1..=6).contains(&zoom.turns[1].tokens));
    assert_eq!(zoom.response.input_ids.len(), tool_end + zoom.turns[1].tokens);
    let mut generated = vec![true; zoom.response.input_ids.len()];
    generated[call.len()..tool_end].fill(false);
    assert_eq!(zoom.generated, generated);
    assert!(zoom.logprobs[call.len()..tool_end].iter().all(|&l| l == 0.0));
    assert_eq!(zoom.response.image_grids, vec![[1, 4, 4]]);
    let want = p.image.preprocess_rgb(&[zoomed()]).unwrap().pixel_values;
    assert_pixels_equal(zoom.response.pixel_values.as_ref().unwrap(), &want);
    let view = View {
        origin: Point::new(28.0, 28.0),
        region: Size::new(28.0, 28.0),
        frames: ImageFrames {
            original: Size::new(56.0, 56.0),
            resized: Size::new(56.0, 56.0),
        },
    };
    assert_eq!(zoom.last_view, view);
    assert_eq!(zoom.final_text(), zoom.turns[1].text);

    // Bad calls get error replies (text only) and the sample goes on.
    let replies = [
        (
            &t[1],
            MALFORMED,
            "",
            CallOutcome::Malformed,
            "malformed tool call: ",
        ),
        (
            &t[2],
            UNKNOWN,
            "crop",
            CallOutcome::UnknownTool,
            "unknown tool \"crop\"; the tools are: zoom",
        ),
        (
            &t[4],
            OFF_IMAGE,
            "zoom",
            CallOutcome::Failed,
            "error: the region lies outside the 112x84 image",
        ),
    ];
    for (t, text, name, outcome, reply) in replies {
        assert_eq!(t.turns.len(), 2, "{name:?} {outcome:?}");
        assert_eq!(t.turns[0].text, text);
        assert_eq!(t.turns[0].call, record(name, outcome));
        let call = ids(p, text).len();
        let tool = t.generated.iter().filter(|&&g| !g).count();
        assert!(t.generated[..call].iter().all(|&g| g));
        assert!(t.generated[call..call + tool].iter().all(|&g| !g));
        assert!(t.generated[call + tool..].iter().all(|&g| g));
        let tool_text = decode(p, &t.response.input_ids[call..call + tool]);
        assert!(
            tool_text.starts_with(&format!("<|im_end|>\n<|im_start|>user\n<tool_response>\n{reply}")),
            "{tool_text}"
        );
        assert!(tool_text.ends_with("</tool_response><|im_end|>\n<|im_start|>assistant\n"));
        assert!(t.response.pixel_values.is_none());
        assert_eq!(t.last_view, full_view());
    }

    // The engine's own samples: one turn, no call, every token generated.
    for t in [&t[3], &t[5]] {
        assert_eq!(t.turns.len(), 1);
        assert_eq!(t.calls().count(), 0);
        assert!(t.generated.iter().all(|&g| g));
        assert_eq!(t.logprobs.len(), t.response.input_ids.len());
        assert!(t.logprobs.iter().all(|&l| l.is_finite() && l <= 0.0));
    }
}

/// The model's log-probs of `t`'s tokens at the `compared` positions of its response, from one full
/// forward over prompt + response with every image, as the trainer computes them.
fn recomputed(hf: &HfModel, prompts: &[Encoded], t: &[Trajectory], compared: &[Vec<bool>]) -> Vec<Vec<f32>> {
    let sequences = prompts
        .iter()
        .zip(t)
        .map(|(p, t)| {
            let mut input_ids = p.input_ids.clone();
            input_ids.extend(&t.response.input_ids);
            let pixels: Vec<Tensor> = [&p.pixel_values, &t.response.pixel_values]
                .into_iter()
                .flatten()
                .map(Tensor::shallow_clone)
                .collect();
            Encoded {
                input_ids,
                pixel_values: Some(Tensor::cat(&pixels, 0)),
                image_grids: [p.image_grids.clone(), t.response.image_grids.clone()].concat(),
            }
        })
        .collect();
    let batch = hf.processor.batch(sequences);
    let len = batch.input_ids[0].len();
    let mut scored = vec![vec![false; len]; t.len()];
    for (row, (t, compared)) in t.iter().zip(compared).enumerate() {
        let start = len - t.response.input_ids.len();
        scored[row][start..].copy_from_slice(compared);
    }
    let scored = Tensor::from_slice2(&scored);
    let logprobs = tch::no_grad(|| {
        let hidden = hf.model.hidden_states(&batch).unwrap() / TEMPERATURE;
        let ids = Tensor::from_slice2(&batch.input_ids);
        scores::logprobs_at(hf.model.output_weight(), &hidden, &ids, &scored, 16).unwrap()
    });
    t.iter()
        .enumerate()
        .map(|(row, t)| {
            let n = t.response.input_ids.len() as i64;
            Vec::<f32>::try_from(logprobs.get(row as i64).narrow(0, len as i64 - n, n)).unwrap()
        })
        .collect()
}

/// On the tiny Qwen2.5-VL and on the tiny Qwen3.5 (its recurrent states carried through each
/// turn's decoding, every turn a new prefill of the whole conversation).
#[test]
fn log_probs_line_up_with_the_tokens_the_model_produced() {
    for which in [RandomFolder::Tiny, RandomFolder::Qwen35Tiny] {
        let (_dir, hf) = tiny_of(which);
        log_probs_line_up(&hf);
    }
}

fn log_probs_line_up(hf: &HfModel) {
    let t = mixed_batch(hf);
    let toolbox = zoom_toolbox(&hf.processor);
    let prompts: Vec<Encoded> = t
        .iter()
        .map(|t| {
            let question = ["Click the Save button.", "Where is the search field?"][t.prompt_index];
            prompt(&hf.processor, question, &toolbox)
        })
        .collect();
    // Every generated token except the scripted first turns (whose log-probs are made up).
    let scripted = |t: &Trajectory| t.turns.len() == 2;
    let compared: Vec<Vec<bool>> = t
        .iter()
        .map(|t| {
            let mut c = t.generated.clone();
            if scripted(t) {
                c[..t.turns[0].tokens].fill(false);
            }
            c
        })
        .collect();
    assert_eq!(t.iter().filter(|t| scripted(t)).count(), 4);
    let want = recomputed(hf, &prompts, &t, &compared);
    let mut worst = 0.0f32;
    let mut positions = 0;
    for ((t, want), compared) in t.iter().zip(&want).zip(&compared) {
        for (i, _) in compared.iter().enumerate().filter(|(_, c)| **c) {
            worst = worst.max((t.logprobs[i] - want[i]).abs());
            positions += 1;
        }
    }
    let family = hf.model.family();
    println!("{family}: {positions} generated positions: max |log-prob - recomputed| = {worst:.3e}");
    assert!(positions > 4);
    assert!(worst <= 1e-4, "{worst}");
}

#[test]
fn the_turn_and_token_caps_end_trajectories() {
    let (_dir, hf) = tiny();
    let p = &hf.processor;
    let toolbox = zoom_toolbox(p);
    let image = screenshot();
    let call = ids(p, ZOOM).len();
    let tool = zoom_turn(p).input_ids.len();
    let run = |rounds: Vec<Vec<(usize, u64, &'static str)>>, limits: TurnLimits| {
        let generator = Scripted::new(&hf, rounds);
        let rollout = rollout(&generator, &hf, &toolbox, limits);
        rollout
            .generate(&requests(p, &toolbox, &image, [2, 0])[..1])
            .unwrap()
            .remove(0)
    };
    let first = || vec![vec![(0, 0, ZOOM)]];
    let not_answered = |t: &Trajectory, finish: FinishReason| {
        assert_eq!(t.turns.len(), 1);
        assert_eq!(t.turns[0].call, record("zoom", CallOutcome::TurnLimit));
        assert_eq!(t.response.input_ids, ids(p, ZOOM));
        assert_eq!(t.generated, vec![true; call]);
        assert!(t.response.pixel_values.is_none());
        assert_eq!(t.last_view, full_view());
        assert_eq!(t.finish, finish);
    };

    // One turn allowed: the call is not run; the turn keeps its own finish.
    not_answered(&run(first(), limits(1, 500)), FinishReason::StopString);
    // The reply would use up the budget exactly, leaving no token: not shown, finish Length.
    not_answered(&run(first(), limits(4, call + tool)), FinishReason::Length);
    // One token to spare: the reply is shown and the model gets that one token.
    let t = run(first(), limits(4, call + tool + 1));
    assert_eq!(t.turns[0].call, record("zoom", CallOutcome::Ok));
    assert_eq!(t.turns.len(), 2);
    assert_eq!(t.turns[1].tokens, 1);
    assert_eq!(t.response.input_ids.len(), call + tool + 1);
    assert!(matches!(t.finish, FinishReason::Length | FinishReason::Eos));

    // A closing tag without its opening one is no call, with turns left or not: the turn is the answer.
    for max_turns in [1, 3] {
        let t = run(vec![vec![(0, 0, "done</tool_call>")]], limits(max_turns, 500));
        assert_eq!(t.turns.len(), 1);
        assert_eq!(t.calls().count(), 0);
        assert_eq!(t.finish, FinishReason::StopString);
        assert_eq!(t.final_text(), "done</tool_call>");
    }

    // A second call in the second turn: beyond two turns it is not run...
    let twice = || vec![vec![(0, 0, ZOOM)], vec![(0, 0, ZOOM_AGAIN)]];
    let t = run(twice(), limits(2, 500));
    assert_eq!(t.turns.len(), 2);
    let calls: Vec<&CallRecord> = t.calls().collect();
    assert_eq!(
        calls,
        [
            &record("zoom", CallOutcome::Ok).unwrap(),
            &record("zoom", CallOutcome::TurnLimit).unwrap()
        ]
    );
    assert_eq!(t.finish, FinishReason::StopString);
    assert_eq!(t.final_text(), ZOOM_AGAIN);
    assert_eq!(t.response.image_grids.len(), 1);
    // ...and with a third turn allowed it zooms into the zoom: its box is about the 56 x 56 view.
    let t = run(twice(), limits(3, 500));
    assert_eq!(t.turns.len(), 3);
    assert!(t.calls().all(|c| c.outcome == CallOutcome::Ok));
    let again = View {
        origin: Point::new(28.0, 28.0),
        region: Size::new(14.0, 14.0),
        frames: ImageFrames::from_original(28, 28, budget(p)).unwrap(),
    };
    assert_eq!(t.last_view, again);
    // 14 x 14 pixels shown 2x (28 x 28), which smart_resize brings up to 56 x 56.
    assert_eq!(t.response.image_grids, vec![[1, 4, 4], [1, 4, 4]]);
    let original = screenshot();
    let second = RgbImage::from_fn(28, 28, |u, v| *original.get_pixel(28 + u / 2, 28 + v / 2));
    let want = p.image.preprocess_rgb(&[zoomed(), second]).unwrap().pixel_values;
    assert_pixels_equal(t.response.pixel_values.as_ref().unwrap(), &want);
    let masked = t.generated.iter().filter(|&&g| !g).count();
    assert_eq!(masked, tool + tool_text_len(p, "zoom 2x", 28));
}

/// Tokens of the tool turn showing a `size` x `size` image with `text`.
fn tool_text_len(processor: &Processor, text: &str, size: u32) -> usize {
    let reply = ToolOutput {
        text: text.into(),
        image: Some(RgbImage::new(size, size)),
        view: None,
    };
    processor.tool_turn(&reply).unwrap().input_ids.len()
}

#[test]
fn limits_below_one_are_errors() {
    let (_dir, hf) = tiny();
    let toolbox = zoom_toolbox(&hf.processor);
    let image = screenshot();
    let engine = Engine::new(hf.model.as_ref(), &hf.processor);
    for bad in [limits(0, 10), limits(2, 0)] {
        let err = rollout(&engine, &hf, &toolbox, bad)
            .generate(&requests(&hf.processor, &toolbox, &image, [1, 1]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("turn limits must be at least 1"), "{err}");
    }
}
