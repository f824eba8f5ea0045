//! Tokenizer and chat template parity with HF transformers 5.17, on the tiny tokenizer.
//!
//! The goldens in tests/fixtures/chat/ are written by scripts/goldens/chat.py from the committed
//! tests/fixtures/tiny-tokenizer/ folder; every rendered text and every id must match exactly.

use std::path::{Path, PathBuf};

use groundrl_score::data::{Content, Message};
use groundrl_tensor::processor::chat_template::{
    ChatTemplate, ChatTemplateError, RenderOptions, messages_to_json,
};
use groundrl_tensor::processor::tiny_tokenizer::{self, write_tiny_tokenizer};
use groundrl_tensor::processor::tokenizer::{
    Tokenizer, TokenizerConfig, TokenizerError, expand_image_pads, expand_video_pads,
};
use groundrl_tensor::special_ids::SpecialIds;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn tiny_dir() -> PathBuf {
    fixtures().join("tiny-tokenizer")
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join("chat").join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn cases(name: &str) -> Vec<Value> {
    golden(name).as_array().unwrap().clone()
}

fn tiny() -> Tokenizer {
    Tokenizer::from_folder(&tiny_dir()).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap() as u32)
        .collect()
}

fn str_of<'a>(case: &'a Value, key: &str) -> &'a str {
    case[key].as_str().unwrap()
}

/// The case's template: its own inline one (with the tiny tokenizer's special tokens, as HF
/// passes them), else the tiny folder's.
fn template_of(case: &Value) -> ChatTemplate {
    match case.get("template").and_then(Value::as_str) {
        Some(source) => {
            let special = TokenizerConfig::read(&tiny_dir()).unwrap().special_tokens_map();
            ChatTemplate::new(source).unwrap().with_special_tokens(special)
        }
        None => ChatTemplate::from_folder(&tiny_dir()).unwrap(),
    }
}

fn options_of(case: &Value) -> RenderOptions {
    RenderOptions {
        add_generation_prompt: case
            .get("add_generation_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        tools: case.get("tools").and_then(Value::as_array).cloned(),
        kwargs: case
            .get("kwargs")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
    }
}

fn render_case(case: &Value) -> Result<String, ChatTemplateError> {
    template_of(case).render(case["messages"].as_array().unwrap(), &options_of(case))
}

/// The committed tiny tokenizer is exactly what the builder writes (set GROUNDRL_BLESS=1 to
/// rewrite it after a deliberate change, then rerun scripts/goldens/chat.py).
#[test]
fn committed_tiny_tokenizer_is_what_the_builder_writes() {
    if std::env::var_os("GROUNDRL_BLESS").is_some() {
        write_tiny_tokenizer(&tiny_dir()).unwrap();
    }
    let fresh = tempfile::tempdir().unwrap();
    write_tiny_tokenizer(fresh.path()).unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        let committed = std::fs::read_to_string(tiny_dir().join(file)).unwrap();
        let written = std::fs::read_to_string(fresh.path().join(file)).unwrap();
        assert!(committed == written, "{file} drifted from the builder");
    }
}

#[test]
fn tiny_constants_match_the_tokenizer_and_hf() {
    let tokenizer = tiny();
    let expected = SpecialIds {
        endoftext: tiny_tokenizer::ENDOFTEXT_ID,
        im_start: tiny_tokenizer::IM_START_ID,
        im_end: tiny_tokenizer::IM_END_ID,
        vision_start: tiny_tokenizer::VISION_START_ID,
        vision_end: tiny_tokenizer::VISION_END_ID,
        image_pad: tiny_tokenizer::IMAGE_PAD_ID,
        video_pad: tiny_tokenizer::VIDEO_PAD_ID,
        eos: tiny_tokenizer::IM_END_ID,
        pad: tiny_tokenizer::ENDOFTEXT_ID,
    };
    assert_eq!(tokenizer.special_ids(), expected);
    assert_eq!(tokenizer.vocab_size(), tiny_tokenizer::VOCAB_SIZE as usize);
    assert_eq!(
        (tiny_tokenizer::VOCAB_SIZE, tiny_tokenizer::ENDOFTEXT_ID),
        (662, 640)
    );
    let meta = golden("meta.json");
    assert_eq!(meta["transformers"], "5.17.0");
    assert_eq!(meta["tokenizer_class"], "Qwen2Tokenizer");
    assert_eq!(meta["len"], json!(tiny_tokenizer::VOCAB_SIZE));
    assert_eq!(meta["vocab_size"], json!(tiny_tokenizer::BASE_VOCAB_SIZE));
    assert_eq!(meta["eos_token_id"], json!(expected.eos));
    assert_eq!(meta["pad_token_id"], json!(expected.pad));
    for (token, id) in meta["special_ids"].as_object().unwrap() {
        assert_eq!(
            tokenizer.token_id(token).unwrap(),
            id.as_u64().unwrap() as u32,
            "{token}"
        );
    }
}

/// HF rebuilds Qwen2Tokenizer's pipeline instead of running tokenizer.json; the only differences
/// are ByteLevel flags that change offsets, never ids or text.
#[test]
fn hf_pipeline_differs_only_in_offset_flags() {
    let meta = golden("meta.json");
    let differences: Vec<&String> = meta["pipeline_differences"].as_object().unwrap().keys().collect();
    assert_eq!(differences, ["pre_tokenizer", "decoder"]);
    assert_eq!(meta["model_differences"], json!({}));
    let hf_byte_level = &meta["pipeline_differences"]["pre_tokenizer"]["hf"]["pretokenizers"][1];
    assert_eq!(
        hf_byte_level,
        &json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})
    );
}

#[test]
fn tiny_tokenizer_gives_short_sequences() {
    let tokenizer = tiny();
    assert_eq!(tokenizer.encode("Click the Save button").unwrap().len(), 4);
    assert_eq!(
        tokenizer.encode("You are a helpful assistant.").unwrap().len(),
        11
    );
    // Qwen's regex splits digits one by one, so numbers cost one token a digit.
    assert_eq!(tokenizer.encode("[123, 45]").unwrap().len(), 9);
}

#[test]
fn rendered_chats_and_ids_match_hf() {
    let tokenizer = tiny();
    let cases = cases("conversations.json");
    assert_eq!(cases.len(), 14);
    for case in &cases {
        let name = str_of(case, "name");
        let text = render_case(case).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(text, str_of(case, "text"), "{name}: text");
        let ids_of_text = tokenizer.encode(&text).unwrap();
        assert_eq!(ids_of_text, ids(&case["ids"]), "{name}: ids");
        let decoded = tokenizer.decode(&ids_of_text, false).unwrap();
        assert_eq!(decoded, str_of(case, "decoded"), "{name}: decode");
        assert_eq!(
            tokenizer.encode(&decoded).unwrap(),
            ids_of_text,
            "{name}: round trip"
        );
    }
}

#[test]
fn template_errors_carry_the_templates_message() {
    for case in cases("errors.json") {
        match render_case(&case) {
            Err(ChatTemplateError::Render(message)) => {
                assert!(message.contains(str_of(&case, "error")), "{message}")
            }
            other => panic!("{}: {other:?}", str_of(&case, "name")),
        }
    }
}

#[test]
fn image_pad_expansion_matches_hf_processor() {
    let tokenizer = tiny();
    let template = ChatTemplate::from_folder(&tiny_dir()).unwrap();
    let generation = RenderOptions {
        add_generation_prompt: true,
        ..RenderOptions::default()
    };
    for case in cases("expansion.json") {
        let name = str_of(&case, "name");
        let text = template
            .render(case["messages"].as_array().unwrap(), &generation)
            .unwrap();
        assert_eq!(text, str_of(&case, "text"), "{name}");
        let counts: Vec<usize> = ids(&case["counts"]).into_iter().map(|n| n as usize).collect();
        let expanded = expand_image_pads(&text, &counts).unwrap();
        assert_eq!(expanded, str_of(&case, "expanded"), "{name}");
        assert_eq!(tokenizer.encode(&expanded).unwrap(), ids(&case["ids"]), "{name}");
    }
}

#[test]
fn encode_and_decode_match_hf() {
    let tokenizer = tiny();
    for case in cases("encode.json") {
        let text = str_of(&case, "text");
        let expected = ids(&case["ids"]);
        assert_eq!(tokenizer.encode(text).unwrap(), expected, "{text:?}");
        assert_eq!(
            tokenizer.decode(&expected, false).unwrap(),
            str_of(&case, "decoded"),
            "{text:?}"
        );
        let skipped = tokenizer.decode(&expected, true).unwrap();
        assert_eq!(skipped, str_of(&case, "decoded_skip_special"), "{text:?}");
    }
}

/// The built-in template is the one the tiny tokenizer ships, with the same special tokens.
#[test]
fn builtin_template_renders_like_the_tiny_folders() {
    let cases = cases("conversations.json");
    let case = cases
        .iter()
        .find(|c| c["name"] == "tool_call_and_responses")
        .unwrap();
    let text = ChatTemplate::qwen2_5_vl().render(case["messages"].as_array().unwrap(), &options_of(case));
    assert_eq!(text.unwrap(), str_of(case, "text"));
}

#[test]
fn core_messages_render_as_hf_messages() {
    let messages = [Message {
        role: "user".into(),
        content: vec![
            Content::Image { image: 0 },
            Content::Text {
                text: "Find the button.".into(),
            },
        ],
    }];
    let generation = RenderOptions {
        add_generation_prompt: true,
        ..RenderOptions::default()
    };
    let text = ChatTemplate::qwen2_5_vl()
        .render(&messages_to_json(&messages), &generation)
        .unwrap();
    let cases = cases("conversations.json");
    let one_image = cases.iter().find(|c| c["name"] == "one_image").unwrap();
    assert_eq!(text, str_of(one_image, "text"));
}

#[test]
fn expansion_needs_one_count_per_placeholder() {
    let text = "a<|image_pad|>b<|video_pad|>c<|image_pad|>";
    assert_eq!(
        expand_image_pads(text, &[2, 0]).unwrap(),
        "a<|image_pad|><|image_pad|>b<|video_pad|>c"
    );
    assert_eq!(
        expand_video_pads(text, &[3]).unwrap(),
        text.replace("<|video_pad|>", &"<|video_pad|>".repeat(3))
    );
    for counts in [&[1][..], &[1, 2, 3]] {
        let error = expand_image_pads(text, counts).unwrap_err();
        assert!(
            matches!(error, TokenizerError::PlaceholderCount { placeholders: 2, .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("2 <|image_pad|> placeholders"),
            "{error}"
        );
    }
}

#[test]
fn missing_or_broken_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = Tokenizer::from_folder(dir.path()).unwrap_err();
    assert!(matches!(error, TokenizerError::Read { .. }));
    assert!(error.to_string().contains("tokenizer.json"), "{error}");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 1}").unwrap();
    let error = Tokenizer::from_folder(dir.path()).unwrap_err();
    assert!(matches!(error, TokenizerError::Parse { .. }));
    assert!(
        error
            .to_string()
            .contains("tokenizer.json is not a valid tokenizer"),
        "{error}"
    );
    std::fs::write(dir.path().join("tokenizer_config.json"), "[1]").unwrap();
    let error = ChatTemplate::from_folder(dir.path()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("tokenizer_config.json is not a valid tokenizer config"),
        "{error}"
    );
    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
    let error = ChatTemplate::from_folder(dir.path()).unwrap_err();
    assert!(matches!(error, ChatTemplateError::Missing(_)), "{error}");
}

#[test]
fn unknown_tokens_are_errors() {
    let tokenizer = tiny();
    let error = tokenizer.token_id("<|nope|>").unwrap_err();
    assert_eq!(error.to_string(), "the tokenizer has no token \"<|nope|>\"");
    let bare = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
    let error = Tokenizer::new(bare, TokenizerConfig::default()).unwrap_err();
    assert!(matches!(error, TokenizerError::UnknownToken(token) if token == "<|endoftext|>"));
}

#[test]
fn bad_templates_are_errors_not_panics() {
    let error = ChatTemplate::new("{% for m in messages %}{{ m.role }}").unwrap_err();
    assert!(matches!(error, ChatTemplateError::Syntax(_)), "{error}");
    assert!(error.to_string().contains("(in chat_template:1)"), "{error}");
    let template = ChatTemplate::new("{{ messages[0].content | tojson }}{{ missing.attribute }}").unwrap();
    let error = template
        .render(
            &[json!({"role": "user", "content": "x"})],
            &RenderOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(error, ChatTemplateError::Render(_)), "{error}");
}

/// HF's lookup order: chat_template.jinja, then the processor's chat_template.json, then
/// tokenizer_config.json (a string, or named templates of which `default`).
#[test]
fn template_files_are_looked_up_in_hf_order() {
    let dir = tempfile::tempdir().unwrap();
    let render = |dir: &Path| {
        let template = ChatTemplate::from_folder(dir).unwrap();
        template
            .render(
                &[json!({"role": "user", "content": "x"})],
                &RenderOptions::default(),
            )
            .unwrap()
    };
    let config = json!({"eos_token": "</e>", "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "config {{ eos_token }}"}]});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    assert_eq!(render(dir.path()), "config </e>");
    std::fs::write(
        dir.path().join("chat_template.json"),
        json!({"chat_template": "legacy"}).to_string(),
    )
    .unwrap();
    assert_eq!(render(dir.path()), "legacy");
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "jinja {{ messages | length }}\n",
    )
    .unwrap();
    assert_eq!(render(dir.path()), "jinja 1");
}

#[test]
fn tool_prompts_declare_the_tools_and_append_the_instruction() {
    use groundrl_score::data::{ImageRef, Sample, Shape, Target, Task};
    use groundrl_score::frame::Frame;
    use groundrl_tensor::processor::{Processor, ToolPrompt};

    let dir = tempfile::tempdir().unwrap();
    let image = image::RgbImage::from_fn(56, 28, |x, y| image::Rgb([x as u8, y as u8, 7]));
    image.save(dir.path().join("shot.png")).unwrap();
    let sample = Sample {
        id: "s1".into(),
        source: "test".into(),
        task: Task::PointGrounding,
        images: vec![ImageRef {
            path: "shot.png".into(),
            width: 56,
            height: 28,
        }],
        instruction: "the red square".into(),
        targets: vec![Target {
            shape: Shape::Box([1.0, 1.0, 5.0, 5.0]),
            label: None,
        }],
        frame: Frame::Pixel,
        none: false,
        prompt: Vec::new(),
        metadata: Default::default(),
    };
    let processor = Processor::from_folder(&tiny_dir()).unwrap();
    let tools = ToolPrompt {
        schemas: vec![json!({"type": "function", "function": {"name": "zoom"}})],
        instruction: "Zoom when unsure.".into(),
    };
    let (with_tools, images) = processor
        .encode_sample_with(&sample, dir.path(), None, Some(&tools))
        .unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].to_rgb8(), image);
    let plain = processor.encode_sample(&sample, dir.path(), None).unwrap();
    let decode = |ids: &[i64]| {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        processor.tokenizer.decode(&ids, false).unwrap()
    };
    let (text, plain_text) = (decode(&with_tools.input_ids), decode(&plain.input_ids));
    assert!(!plain_text.contains("<tools>") && !plain_text.contains("Zoom when unsure."));
    assert!(
        text.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"zoom\"}}\n</tools>"),
        "{text}"
    );
    // The instruction ends the user turn, right before it closes.
    assert!(
        text.contains("\nZoom when unsure.<|im_end|>\n<|im_start|>assistant\n"),
        "{text}"
    );
    assert_eq!(with_tools.image_grids, plain.image_grids);
}
