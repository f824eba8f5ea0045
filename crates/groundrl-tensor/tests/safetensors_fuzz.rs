//! safetensors files as users hand them over, mutated (see groundrl-core's `tests/common/mutate.rs`):
//! a `model logits` input file, read and run through the tiny model, and the header of a model's
//! weights. Neither may panic or abort; a bad file is an error naming it, and inputs that are
//! accepted give logits of their shape.

#[path = "../../groundrl-core/tests/common/mutate.rs"]
mod mutate;

use groundrl_tensor::hf_folder;
use groundrl_tensor::qwen2_5_vl::Qwen25Vl;
use groundrl_tensor::qwen2_5_vl::model::Batch;
use mutate::fuzz;
use tch::{Device, Kind, Tensor};

#[test]
fn model_inputs() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let model = Qwen25Vl::load(dir.path(), Device::Cpu, Kind::Float).unwrap();
    let path = dir.path().join("inputs.safetensors");
    let ids = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6]).view([2, 3]);
    let mask = Tensor::from_slice(&[0i64, 1, 1, 1, 1, 1]).view([2, 3]);
    Tensor::write_safetensors(&[("input_ids", &ids), ("attention_mask", &mask)], &path).unwrap();
    let example = std::fs::read(&path).unwrap();
    let shown = path.display().to_string();
    fuzz("model inputs", 7, 1000, &[example], |bytes| {
        std::fs::write(&path, bytes).unwrap();
        let batch = match Batch::read_safetensors(&path) {
            Ok(batch) => batch,
            Err(e) if !e.to_string().starts_with(&shown) => {
                return Err(format!("error without the file: {e}"));
            }
            Err(_) => return Ok(()),
        };
        match tch::no_grad(|| model.logits(&batch)) {
            Ok(logits)
                if logits.size()
                    != [
                        batch.input_ids.len() as i64,
                        batch.input_ids[0].len() as i64,
                        model.config.text.vocab_size,
                    ] =>
            {
                Err(format!("logits of shape {:?}", logits.size()))
            }
            Err(e) if e.to_string().is_empty() => Err("an empty error".into()),
            _ => Ok(()),
        }
    });
}

#[test]
fn weights_header() {
    let dir = tempfile::tempdir().unwrap();
    hf_folder::write_tiny(dir.path(), 0, Kind::Float).unwrap();
    let file = dir.path().join("model.safetensors");
    let original = std::fs::read(&file).unwrap();
    // The 8-byte length and the JSON header: where a hostile file differs from a good one.
    let header_len = 8 + u64::from_le_bytes(original[..8].try_into().unwrap()) as usize;
    let (header, data) = original.split_at(header_len);
    fuzz("weights header", 8, 60, &[header.to_vec()], |mutated| {
        std::fs::write(&file, [mutated, data].concat()).unwrap();
        match Qwen25Vl::load(dir.path(), Device::Cpu, Kind::Float) {
            Ok(_) => Ok(()),
            Err(e) if !e.to_string().contains("model.safetensors") && !e.to_string().contains("tensor") => {
                Err(format!("error without the file or tensor: {e}"))
            }
            Err(_) => Ok(()),
        }
    });
}
