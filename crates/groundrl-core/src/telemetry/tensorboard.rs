//! TensorBoard event files, written without TensorFlow or a protobuf compiler.
//!
//! A file `events.out.tfevents.<unix seconds>.<host>` is a sequence of TFRecords, each framed as
//! `u64 LE length | masked CRC32C of those 8 bytes | data | masked CRC32C of data`, where
//! `masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8` (wrapping). Each record's data is a
//! `tensorflow.Event` protobuf: the first holds only `file_version = "brain.Event:2"`, the rest hold
//! one step's scalars. The few fields needed are encoded by hand:
//!
//! ```text
//! Event   { wall_time: double = 1; step: int64 = 2; file_version: string = 3; summary: Summary = 5 }
//! Summary { value: repeated Value = 1 }
//! Value   { tag: string = 1; simple_value: float = 2 }
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::TelemetryError;
use crate::atomic::open_no_follow;

/// Protobuf wire types used here.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

/// Writes scalars to a new event file. Every call writes through to the file, so TensorBoard sees a
/// step as soon as it is added and a crash loses nothing already added. A resumed run continues the
/// file it wrote before ([`Self::sync`] at a checkpoint, [`Self::resume`] from it), so the steps it
/// redoes after the checkpoint are not shown twice.
#[derive(Debug)]
pub struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// Creates `dir` if needed and a new event file in it, starting with the version event.
    ///
    /// The file name holds the current second and the host name; a file of that name already there
    /// (two writers in one second) is an error rather than overwritten.
    pub fn create(dir: impl AsRef<Path>) -> Result<Self, TelemetryError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| TelemetryError::io(dir, e))?;
        let now = wall_time();
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let path = dir.join(format!("events.out.tfevents.{}.{host}", now as u64));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| TelemetryError::io(&path, e))?;
        let mut writer = Self { file, path };
        let mut event = Vec::new();
        put_fixed64(&mut event, 1, now.to_bits());
        put_bytes(&mut event, 3, b"brain.Event:2");
        writer.write_record(&event)?;
        Ok(writer)
    }

    /// Continues the event file `path` from its first `len` bytes (what [`Self::sync`] returned at the
    /// checkpoint a run resumes from): the events written after them, of steps the run will redo,
    /// are cut off. A file shorter than `len` is an error, as it lost events it had.
    pub fn resume(path: impl AsRef<Path>, len: u64) -> Result<Self, TelemetryError> {
        let path = path.as_ref().to_path_buf();
        let io = |e| TelemetryError::io(&path, e);
        let file = open_no_follow(OpenOptions::new().append(true), &path).map_err(io)?;
        let found = file.metadata().map_err(io)?.len();
        if found < len {
            let problem = format!("holds {found} bytes, but {len} were written up to the checkpoint");
            return Err(TelemetryError::invalid(path.display().to_string(), problem));
        }
        file.set_len(len).map_err(io)?;
        Ok(Self { file, path })
    }

    /// Makes every event written so far durable and returns the file's length, for [`Self::resume`].
    pub fn sync(&self) -> Result<u64, TelemetryError> {
        let io = |e| TelemetryError::io(&self.path, e);
        self.file.sync_data().map_err(io)?;
        Ok(self.file.metadata().map_err(io)?.len())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event holding every `(tag, value)` of `step`. Values are stored as 32-bit floats,
    /// as TensorBoard's `simple_value` is.
    pub fn add_scalars(
        &mut self,
        step: u64,
        scalars: &[(impl AsRef<str>, f64)],
    ) -> Result<(), TelemetryError> {
        let mut summary = Vec::new();
        for (tag, value) in scalars {
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, tag.as_ref().as_bytes());
            put_key(&mut entry, 2, FIXED32);
            entry.extend_from_slice(&(*value as f32).to_le_bytes());
            put_bytes(&mut summary, 1, &entry);
        }
        let mut event = Vec::new();
        put_fixed64(&mut event, 1, wall_time().to_bits());
        put_key(&mut event, 2, VARINT);
        put_varint(&mut event, step);
        put_bytes(&mut event, 5, &summary);
        self.write_record(&event)
    }

    /// Frames `data` as one TFRecord and writes it in one write.
    fn write_record(&mut self, data: &[u8]) -> Result<(), TelemetryError> {
        let length = (data.len() as u64).to_le_bytes();
        let mut record = Vec::with_capacity(data.len() + 16);
        record.extend_from_slice(&length);
        record.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
        record.extend_from_slice(data);
        record.extend_from_slice(&masked_crc32c(data).to_le_bytes());
        self.file
            .write_all(&record)
            .map_err(|e| TelemetryError::io(&self.path, e))
    }
}

/// Seconds since the Unix epoch (0 for a clock set before it).
fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// TFRecord's masked CRC32C: rotated and offset so that a CRC of data holding CRCs stays strong.
fn masked_crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes).rotate_right(15).wrapping_add(0xa282_ead8)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_key(out: &mut Vec<u8>, field: u32, wire_type: u8) {
    put_varint(out, u64::from(field) << 3 | u64::from(wire_type));
}

fn put_fixed64(out: &mut Vec<u8>, field: u32, bits: u64) {
    put_key(out, field, FIXED64);
    out.extend_from_slice(&bits.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, LENGTH_DELIMITED);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_file_drops_the_events_after_the_synced_length() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = EventWriter::create(dir.path()).unwrap();
        writer.add_scalars(1, &[("a", 1.0)]).unwrap();
        let len = writer.sync().unwrap();
        let at_one = std::fs::read(writer.path()).unwrap();
        writer.add_scalars(2, &[("a", 2.0)]).unwrap();
        let path = writer.path().to_path_buf();
        drop(writer);
        assert!(std::fs::metadata(&path).unwrap().len() > len);

        let mut resumed = EventWriter::resume(&path, len).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), at_one);
        resumed.add_scalars(2, &[("a", 2.5)]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[..at_one.len()], at_one[..]);
        // The new step's record: its value 2.5 as f32 right before the record's CRC.
        let value = &bytes[bytes.len() - 8..bytes.len() - 4];
        assert_eq!(value, 2.5f32.to_le_bytes());
        let err = EventWriter::resume(&path, 10_000).unwrap_err();
        assert!(
            err.to_string().contains("were written up to the checkpoint"),
            "{err}"
        );
    }

    #[test]
    fn crc32c_matches_the_published_check_values() {
        // The CRC-32C check value (RFC 3720 catalogue) and the iSCSI 32-zero-bytes vector.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8A91_36AA);
    }

    #[test]
    fn masking_rotates_right_by_15_and_adds_the_offset() {
        // 0xE3069283 >> 15 = 0x0001_C60D and 0xE3069283 << 17 = 0x2506_0000 (in 32 bits).
        assert_eq!(0xE306_9283u32.rotate_right(15), 0x2507_C60D);
        assert_eq!(
            masked_crc32c(b"123456789"),
            0x2507_C60Du32.wrapping_add(0xa282_ead8)
        );
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
    }

    #[test]
    fn varints_use_seven_bits_per_byte_low_first() {
        let encode = |v| {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out
        };
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(127), [0x7f]);
        assert_eq!(encode(300), [0xac, 0x02]);
        assert_eq!(encode(u64::MAX).len(), 10);
    }
}
