//! A safetensors file read in part: its header first, then only the tensors asked for.
//!
//! A checkpoint holds the whole optimizer state, also under ZeRO stage 1 (docs/distributed.md), and
//! each rank of a sharded run keeps only its share on resume. Reading the whole file on every rank
//! would hold W copies of it in host memory at once (91 GB each for the 7B shape's AdamW state with
//! f32 masters); reading the header and then each wanted tensor's bytes holds one rank's share.
//!
//! The format (safetensors' README, "Format"): an 8-byte little-endian header length N, N bytes of
//! JSON giving each tensor's dtype, shape and byte range within the data that follows, then the data.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use tch::{Kind, TchError, Tensor};

/// The largest header read (safetensors' own limit is 100 MB).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// An opened safetensors file whose header has been read and checked against the file's size.
#[derive(Debug)]
pub struct TensorFile {
    path: PathBuf,
    data_start: u64,
    metadata: Metadata,
}

impl TensorFile {
    /// Reads and checks the header of `path`; no tensor data is read.
    pub fn open(path: &Path) -> Result<Self, TchError> {
        let mut file = File::open(path)?;
        let mut len = [0u8; 8];
        file.read_exact(&mut len)
            .map_err(|_| format_error("shorter than a safetensors header"))?;
        let n = u64::from_le_bytes(len);
        if n > MAX_HEADER_BYTES {
            return Err(format_error(format!("a header of {n} bytes is not safetensors")));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact(&mut header)
            .map_err(|_| format_error(format!("the file ends within its {n}-byte header")))?;
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| format_error(format!("safetensors header: {e}")))?;
        let size = file.metadata()?.len();
        let data_start = 8 + n;
        // Deserializing the header checked that its tensors tile the data in order, each filling its
        // range (safetensors' `Metadata::new`), so no read asks for more than the file holds.
        let described = (metadata.data_len() as u64)
            .checked_add(data_start)
            .ok_or_else(|| format_error("the header describes more data than a file can hold"))?;
        if described != size {
            return Err(format_error(format!(
                "the file has {size} bytes where its header describes {described}"
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            data_start,
            metadata,
        })
    }

    /// Every tensor's name, in the order of their data in the file.
    pub fn names(&self) -> Vec<String> {
        self.metadata.offset_keys()
    }

    /// The tensors whose name `wanted` accepts, in the file's order, on the CPU in their saved dtype.
    pub fn read_where(&self, wanted: impl Fn(&str) -> bool) -> Result<Vec<(String, Tensor)>, TchError> {
        let mut file = File::open(&self.path)?;
        self.names()
            .into_iter()
            .filter(|name| wanted(name))
            .map(|name| {
                let tensor = self.read_one(&mut file, &name)?;
                Ok((name, tensor))
            })
            .collect()
    }

    /// Every tensor of the file.
    pub fn read_all(&self) -> Result<Vec<(String, Tensor)>, TchError> {
        self.read_where(|_| true)
    }

    fn read_one(&self, file: &mut File, name: &str) -> Result<Tensor, TchError> {
        let info = self
            .metadata
            .info(name)
            .ok_or_else(|| format_error(format!("no tensor `{name}`")))?;
        let (kind, bytes) = checked_layout(name, info)?;
        let (start, end) = info.data_offsets;
        let mut data = vec![0u8; bytes];
        file.seek(SeekFrom::Start(self.data_start + start as u64))
            .and_then(|_| file.read_exact(&mut data))
            .map_err(|e| format_error(format!("tensor `{name}` (data bytes {start}..{end}): {e}")))?;
        let shape: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        Tensor::f_from_data_size(&data, &shape, kind)
    }
}

/// The tensor's kind and byte count, which must match its byte range in the header.
fn checked_layout(name: &str, info: &TensorInfo) -> Result<(Kind, usize), TchError> {
    let (kind, width) = match info.dtype {
        Dtype::F32 => (Kind::Float, 4),
        Dtype::BF16 => (Kind::BFloat16, 2),
        Dtype::F16 => (Kind::Half, 2),
        Dtype::F64 => (Kind::Double, 8),
        Dtype::I64 => (Kind::Int64, 8),
        Dtype::I32 => (Kind::Int, 4),
        Dtype::I16 => (Kind::Int16, 2),
        Dtype::I8 => (Kind::Int8, 1),
        Dtype::U8 => (Kind::Uint8, 1),
        Dtype::BOOL => (Kind::Bool, 1),
        other => {
            return Err(format_error(format!(
                "tensor `{name}` has unsupported dtype {other:?}"
            )));
        }
    };
    let bytes = info.shape.iter().try_fold(width, |n: usize, &d| n.checked_mul(d));
    let (start, end) = info.data_offsets;
    match bytes {
        Some(bytes) if end.checked_sub(start) == Some(bytes) => Ok((kind, bytes)),
        _ => Err(format_error(format!(
            "tensor `{name}` of shape {:?} and dtype {:?} does not fill its bytes {start}..{end}",
            info.shape, info.dtype
        ))),
    }
}

fn format_error(message: impl Into<String>) -> TchError {
    TchError::FileFormat(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(dir: &Path) -> PathBuf {
        let path = dir.join("state.safetensors");
        let tensors = [
            ("a", Tensor::from_slice(&[1.5f32, -2.0, 3.25]).view([3, 1])),
            ("b", Tensor::from_slice(&[7i64])),
            ("c", Tensor::from_slice(&[0.5f32, 4.0]).to_kind(Kind::BFloat16)),
        ];
        Tensor::write_safetensors(&tensors, &path).unwrap();
        path
    }

    #[test]
    fn reads_only_the_tensors_asked_for_with_their_values() {
        let dir = tempfile::tempdir().unwrap();
        let file = TensorFile::open(&written(dir.path())).unwrap();
        let mut names = file.names();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        let read = file.read_where(|n| n != "b").unwrap();
        let got: Vec<&str> = read.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(got.len(), 2);
        for (name, tensor) in &read {
            match name.as_str() {
                "a" => {
                    assert_eq!(tensor.size(), [3, 1]);
                    assert_eq!(
                        Vec::<f32>::try_from(tensor.view([-1])).unwrap(),
                        [1.5, -2.0, 3.25]
                    );
                }
                "c" => {
                    assert_eq!(tensor.kind(), Kind::BFloat16);
                    let values = Vec::<f32>::try_from(tensor.to_kind(Kind::Float)).unwrap();
                    assert_eq!(values, [0.5, 4.0]);
                }
                other => panic!("unexpected tensor {other}"),
            }
        }
        let all = file.read_all().unwrap();
        let b = all.iter().find(|(n, _)| n == "b").unwrap();
        assert_eq!((b.1.kind(), b.1.int64_value(&[0])), (Kind::Int64, 7));
    }

    #[test]
    fn a_cut_or_foreign_file_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = TensorFile::open(&path).unwrap_err().to_string();
        assert!(err.contains("bytes where its header describes"), "{err}");
        std::fs::write(&path, b"not safetensors").unwrap();
        let err = TensorFile::open(&path).unwrap_err().to_string();
        assert!(err.contains("not safetensors"), "{err}");
        std::fs::write(&path, b"abc").unwrap();
        let err = TensorFile::open(&path).unwrap_err().to_string();
        assert!(err.contains("shorter than a safetensors header"), "{err}");
    }

    /// A file of `header` and `data` bytes, the header's length in front.
    fn crafted(path: &Path, header: &str, data: usize) {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_header_whose_tensors_do_not_tile_the_data_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.safetensors");
        // A gap: `b` starts at byte 8 where `a` ends at 4 (the file's size matches the header).
        crafted(
            &path,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
            12,
        );
        let err = TensorFile::open(&path).unwrap_err().to_string();
        assert!(err.contains("invalid offset for tensor `b`"), "{err}");
        // A range of 4 TiB for one f32: refused before any read could ask for it.
        crafted(
            &path,
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4398046511104]}}"#,
            4,
        );
        let err = TensorFile::open(&path).unwrap_err().to_string();
        assert!(err.contains("safetensors header"), "{err}");
    }
}
