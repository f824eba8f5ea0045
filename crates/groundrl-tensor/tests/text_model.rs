//! The decoder alone against the HF goldens' text-only row (row 2 of each tiny config's batch).

use std::path::PathBuf;

use groundrl_tensor::qwen2_5_vl::Qwen25VlConfig;
use groundrl_tensor::qwen2_5_vl::rope_index::{RopeIndex, RopeSpec};
use groundrl_tensor::qwen2_5_vl::text::{AttentionMask, Rotary, TextModel};
use groundrl_tensor::qwen2_5_vl::weights::load_matching_into;
use tch::{Device, Kind, Tensor, nn};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen2_5_vl")
        .join(name)
}

fn named(path: PathBuf) -> std::collections::HashMap<String, Tensor> {
    Tensor::read_safetensors(path).unwrap().into_iter().collect()
}

#[test]
fn text_only_row_matches_hf() {
    for name in ["tiny_a", "tiny_b"] {
        let dir = fixture(name);
        let cfg = Qwen25VlConfig::load(&dir.join("config.json")).unwrap();
        let vs = nn::VarStore::new(Device::Cpu);
        let text = TextModel::new(&vs.root(), &cfg.text, cfg.tie_word_embeddings);
        load_matching_into(&vs, &dir, |n| !n.starts_with("visual.")).unwrap();
        let inputs = named(dir.join("inputs.safetensors"));
        let expected = named(dir.join("expected.safetensors"));
        let ids = inputs["input_ids"].get(2).unsqueeze(0);
        let mask = inputs["attention_mask"].get(2).unsqueeze(0);
        let ids_host: Vec<Vec<i64>> = vec![Vec::<i64>::try_from(&ids.get(0)).unwrap()];
        let mask_host: Vec<Vec<i64>> = vec![Vec::<i64>::try_from(&mask.get(0)).unwrap()];
        let spec = RopeSpec {
            image_token_id: cfg.image_token_id,
            video_token_id: cfg.video_token_id,
            spatial_merge_size: 2,
            tokens_per_second: 2,
        };
        let rope = RopeIndex::new(&spec, &ids_host, Some(&mask_host), &[], &[], &[]).unwrap();
        let positions = Tensor::from_slice2(&rope.positions.iter().map(|c| c[0].clone()).collect::<Vec<_>>())
            .unsqueeze(1);
        assert!(
            positions.equal(&expected["position_ids"].narrow(1, 2, 1)),
            "{name}: positions"
        );
        let rotary = Rotary::new(&cfg.text, &positions, Kind::Float);
        let hidden = text.forward(
            &text.embed(&ids),
            &rotary,
            &AttentionMask::causal_with_padding(&mask),
        );
        let logits = text.logits(&hidden).get(0);
        let real = mask.get(0).to_kind(Kind::Bool);
        let want = expected["logits"]
            .get(2)
            .index_select(0, &real.nonzero().squeeze_dim(1));
        let got = logits.index_select(0, &real.nonzero().squeeze_dim(1));
        let err = (&got - &want).abs().max().double_value(&[]) / want.abs().max().double_value(&[]);
        println!("{name}: text-only row, max relative error {err:.3e}");
        assert!(err <= 1e-4, "{name}: {err}");
    }
}
