//! Checkpoint tensors: read from an HF folder's safetensors (one file or a sharded index) into the
//! model's variables, and written back so that transformers loads them unchanged.
//!
//! Parameter names follow the released Qwen2.5-VL checkpoints (`visual.blocks.0.attn.qkv.weight`,
//! `model.layers.0.self_attn.q_proj.weight`, `lm_head.weight`), which is how the model's variables
//! are named. transformers 5.x saves `model.visual.*` and `model.language_model.*` instead; both are
//! read. Every variable must be found with its exact shape, and every stored tensor must be used:
//! a silently missing or ignored tensor would leave random weights in a "loaded" model.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use groundrl_core::data::confine::{self, PathPolicy};
use safetensors::tensor::{Dtype, SafeTensors, TensorView, View};
use tch::{Kind, Tensor, nn};

use crate::lora::{self, LoraError};
use crate::model_error::ModelError;

/// Names the released checkpoints use for a tensor that transformers 5.x may have saved under another.
pub fn canonical_name(name: &str) -> Cow<'_, str> {
    if let Some(rest) = name.strip_prefix("model.visual.") {
        Cow::Owned(format!("visual.{rest}"))
    } else if let Some(rest) = name.strip_prefix("model.language_model.") {
        Cow::Owned(format!("model.{rest}"))
    } else {
        Cow::Borrowed(name)
    }
}

/// The name transformers 5.17 saves a Qwen3-VL or Qwen3.5 variable under: `visual.*` as
/// `model.visual.*`, the decoder's `model.*` as `model.language_model.*`; `lm_head.weight` as it
/// is. The inverse of [`canonical_name`], so that a saved folder loads back.
pub fn transformers_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("visual.") {
        format!("model.visual.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.") {
        format!("model.language_model.{rest}")
    } else {
        name.to_owned()
    }
}

/// A `VarStore` holding `vs`'s tensors (the same tensors, not copies) under [`transformers_name`]s.
pub fn transformers_named(vs: &nn::VarStore) -> nn::VarStore {
    let named = nn::VarStore::new(vs.device());
    let mut vars = named
        .variables_
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (name, tensor) in vs.variables() {
        vars.named_variables.insert(transformers_name(&name), tensor);
    }
    drop(vars);
    named
}

/// Writes an HF folder: `config` as `config.json` (pretty, a newline at the end) and the variables of
/// `named` (under the names they are to be saved with) as safetensors in `kind`.
pub fn save_folder(
    dir: &Path,
    config: &serde_json::Value,
    named: &nn::VarStore,
    kind: Kind,
) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
    let path = dir.join("config.json");
    let text = serde_json::to_string_pretty(config).map_err(|e| ModelError::file(&path, e))?;
    std::fs::write(&path, text + "\n").map_err(|e| ModelError::io(&path, e))?;
    save_from(named, dir, kind)
}

/// The safetensors files of an HF folder: `model.safetensors`, or the shards its index lists. A
/// shard name must stay inside the folder ([`confine`]): an index is data, and may come from
/// anywhere.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if !index.is_file() {
        return Err(ModelError::Missing {
            what: "model.safetensors or model.safetensors.index.json".into(),
            place: dir.display().to_string(),
        });
    }
    let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::file(&index, e))?;
    let map = value["weight_map"]
        .as_object()
        .ok_or_else(|| ModelError::file(&index, "no `weight_map` object"))?;
    let mut shards: Vec<PathBuf> = Vec::new();
    for file in map.values() {
        let file = file
            .as_str()
            .ok_or_else(|| ModelError::file(&index, "a `weight_map` value is not a string"))?;
        let path = confine::resolve(dir, file, PathPolicy::Inside)
            .map_err(|e| ModelError::file(&index, format!("shard {e}")))?;
        if !shards.contains(&path) {
            shards.push(path);
        }
    }
    Ok(shards)
}

/// Copies the checkpoint in `dir` into the variables of `vs` (converted to each variable's dtype).
pub fn load_into(vs: &nn::VarStore, dir: &Path) -> Result<(), ModelError> {
    load_part_into(vs, dir, "")
}

/// Like [`load_into`] for a part of the model: only stored tensors whose (canonical) name starts with
/// `prefix` are read, e.g. `visual.` for a vision tower on its own.
pub fn load_part_into(vs: &nn::VarStore, dir: &Path, prefix: &str) -> Result<(), ModelError> {
    load_matching_into(vs, dir, |name| name.starts_with(prefix))
}

/// Like [`load_into`] for the stored tensors whose (canonical) name `wanted` accepts; others are skipped.
pub fn load_matching_into(
    vs: &nn::VarStore,
    dir: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<(), ModelError> {
    let mut pending: HashMap<String, Tensor> = vs.variables();
    let mut unused: Vec<String> = Vec::new();
    for file in checkpoint_files(dir)? {
        let bytes = map_file(&file)?;
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| ModelError::file(&file, e))?;
        for (name, view) in tensors.tensors() {
            let canonical = canonical_name(&name);
            if !wanted(&canonical) {
                continue;
            }
            match pending.remove(canonical.as_ref()) {
                Some(mut var) => copy_into(&mut var, &canonical, &view, &file)?,
                None => unused.push(name),
            }
        }
    }
    if let Some(name) = pending.keys().min() {
        return Err(ModelError::Missing {
            what: format!("tensor `{name}` (and {} more)", pending.len() - 1),
            place: dir.display().to_string(),
        });
    }
    if !unused.is_empty() {
        unused.sort();
        return Err(ModelError::Unexpected {
            names: unused,
            place: dir.display().to_string(),
        });
    }
    Ok(())
}

/// The file's bytes, mapped read-only: a shard of several GB is not held in memory twice, and only
/// the pages of the tensors copied are read.
fn map_file(path: &Path) -> Result<memmap2::Mmap, ModelError> {
    let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
    // SAFETY: the map is read-only and dropped before this load returns; a model folder is not
    // written while a model loads from it (a writer that truncated the file meanwhile would make
    // reads of the cut pages fault, as with any mapped file).
    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))
}

fn copy_into(var: &mut Tensor, name: &str, view: &TensorView, file: &Path) -> Result<(), ModelError> {
    let found: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    if found != var.size() {
        return Err(ModelError::Shape {
            name: name.to_owned(),
            expected: var.size(),
            found,
            place: file.display().to_string(),
        });
    }
    let kind = kind_of(view.dtype()).ok_or_else(|| {
        ModelError::file(
            file,
            format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()),
        )
    })?;
    let source = Tensor::f_from_data_size(view.data(), &found, kind)?;
    tch::no_grad(|| var.f_copy_(&source))?;
    Ok(())
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    Some(match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F64 => Kind::Double,
        _ => return None,
    })
}

fn dtype_of(kind: Kind) -> Result<Dtype, ModelError> {
    Ok(match kind {
        Kind::Float => Dtype::F32,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Double => Dtype::F64,
        other => {
            return Err(ModelError::Input(format!(
                "cannot save tensors of kind {other:?}"
            )));
        }
    })
}

/// One tensor's bytes on the host, ready for the safetensors writer.
struct HostTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl HostTensor {
    fn new(tensor: &Tensor, kind: Kind) -> Result<Self, ModelError> {
        let host = tensor
            .f_to_kind(kind)?
            .f_to_device(tch::Device::Cpu)?
            .f_contiguous()?;
        let numel = host.numel();
        let mut bytes = vec![0u8; numel * kind.elt_size_in_bytes()];
        host.f_copy_data_u8(&mut bytes, numel)?;
        let shape = host.size().iter().map(|&d| d as usize).collect();
        Ok(Self {
            dtype: dtype_of(kind)?,
            shape,
            bytes,
        })
    }
}

impl View for &HostTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Shards larger checkpoints, as transformers does (its default shard size), so no single file is huge.
const MAX_SHARD_BYTES: usize = 5_000_000_000;

/// Writes every variable of `vs` as `kind` into `dir`: `model.safetensors`, or numbered shards plus
/// `model.safetensors.index.json` past 5 GB. The `{"format": "pt"}` metadata is what transformers checks.
/// A store holding LoRA adapters is refused: transformers would skip their tensors without a word.
pub fn save_from(vs: &nn::VarStore, dir: &Path, kind: Kind) -> Result<(), ModelError> {
    let variables: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    if let Some(adapter) = variables.keys().find(|name| lora::is_adapter_name(name)) {
        return Err(LoraError::Unmerged(adapter.clone()).into());
    }
    let mut shards: Vec<Vec<(String, HostTensor)>> = vec![Vec::new()];
    let mut shard_bytes = 0usize;
    for (name, tensor) in &variables {
        let host = HostTensor::new(tensor, kind)?;
        if shard_bytes > 0 && shard_bytes + host.bytes.len() > MAX_SHARD_BYTES {
            shards.push(Vec::new());
            shard_bytes = 0;
        }
        shard_bytes += host.bytes.len();
        shards
            .last_mut()
            .expect("shards starts non-empty")
            .push((name.clone(), host));
    }
    let metadata = Some(HashMap::from([("format".to_owned(), "pt".to_owned())]));
    if shards.len() == 1 {
        return write_shard(&shards[0], &metadata, &dir.join("model.safetensors"));
    }
    let count = shards.len();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0usize;
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{count:05}.safetensors", i + 1);
        write_shard(shard, &metadata, &dir.join(&file))?;
        for (name, host) in shard {
            weight_map.insert(name.clone(), serde_json::Value::String(file.clone()));
            total += host.bytes.len();
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let path = dir.join("model.safetensors.index.json");
    let text = serde_json::to_string_pretty(&index).map_err(|e| ModelError::file(&path, e))?;
    std::fs::write(&path, text).map_err(|e| ModelError::io(&path, e))
}

fn write_shard(
    shard: &[(String, HostTensor)],
    metadata: &Option<HashMap<String, String>>,
    path: &Path,
) -> Result<(), ModelError> {
    let views = shard.iter().map(|(name, host)| (name.as_str(), host));
    safetensors::tensor::serialize_to_file(views, metadata.clone(), path)
        .map_err(|e| ModelError::file(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_5_names_map_to_the_released_layout() {
        assert_eq!(
            canonical_name("model.visual.blocks.0.attn.qkv.weight"),
            "visual.blocks.0.attn.qkv.weight"
        );
        assert_eq!(
            canonical_name("model.language_model.layers.3.mlp.up_proj.weight"),
            "model.layers.3.mlp.up_proj.weight"
        );
        assert_eq!(
            canonical_name("model.layers.3.mlp.up_proj.weight"),
            "model.layers.3.mlp.up_proj.weight"
        );
        assert_eq!(canonical_name("lm_head.weight"), "lm_head.weight");
    }

    fn store() -> nn::VarStore {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let root = vs.root();
        let _ = root.sub("model").sub("norm").ones("weight", &[4]);
        let _ = root
            .sub("visual")
            .sub("merger")
            .randn("weight", &[2, 3], 0.0, 1.0);
        vs
    }

    #[test]
    fn save_then_load_restores_every_value_in_both_dtypes() {
        for kind in [Kind::Float, Kind::BFloat16] {
            let dir = tempfile::tempdir().unwrap();
            let source = store();
            save_from(&source, dir.path(), kind).unwrap();
            let target = store();
            tch::no_grad(|| target.variables().values_mut().for_each(|t| _ = t.zero_()));
            load_into(&target, dir.path()).unwrap();
            for (name, t) in source.variables() {
                let expected = t.to_kind(kind).to_kind(Kind::Float);
                let got = &target.variables()[&name];
                assert!(got.equal(&expected), "{name} differs after a {kind:?} round trip");
            }
        }
    }

    #[test]
    fn missing_extra_and_misshapen_tensors_are_named() {
        let dir = tempfile::tempdir().unwrap();
        save_from(&store(), dir.path(), Kind::Float).unwrap();

        let bigger = store();
        let _ = bigger
            .root()
            .sub("model")
            .sub("embed_tokens")
            .zeros("weight", &[5, 4]);
        let err = load_into(&bigger, dir.path()).unwrap_err().to_string();
        assert!(err.contains("model.embed_tokens.weight"), "{err}");

        let smaller = nn::VarStore::new(tch::Device::Cpu);
        let _ = smaller.root().sub("model").sub("norm").ones("weight", &[4]);
        let err = load_into(&smaller, dir.path()).unwrap_err().to_string();
        assert!(err.contains("visual.merger.weight"), "{err}");

        let reshaped = nn::VarStore::new(tch::Device::Cpu);
        let _ = reshaped.root().sub("model").sub("norm").ones("weight", &[5]);
        let _ = reshaped
            .root()
            .sub("visual")
            .sub("merger")
            .zeros("weight", &[2, 3]);
        let err = load_into(&reshaped, dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("model.norm.weight") && err.contains("[5]") && err.contains("[4]"),
            "{err}"
        );

        let empty = tempfile::tempdir().unwrap();
        let err = load_into(&store(), empty.path()).unwrap_err().to_string();
        assert!(err.contains("model.safetensors"), "{err}");
    }
}
