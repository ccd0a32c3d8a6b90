//! A TensorBoard event-file writer: TFRecord framing (length, masked CRC-32C of the length,
//! the record, masked CRC-32C of the record) around `Event` protocol buffers holding scalar
//! summaries, the format `tensorboard` and `tbparse` read. The three messages used are encoded
//! by hand (a few fields; no codegen needed):
//!
//! ```text
//! Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//! Summary { repeated Value value = 1; }
//! Value   { string tag = 1; float simple_value = 2; }
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn bytes_field(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    varint(out, u64::from(field << 3 | 2));
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord around `data`.
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// An `Event` with a wall time, a step and either a file version or scalar values.
pub fn event(
    wall_time: f64,
    step: i64,
    file_version: Option<&str>,
    scalars: &[(&str, f32)],
) -> Vec<u8> {
    let mut e = Vec::new();
    e.push(0x09); // field 1, fixed64
    e.extend_from_slice(&wall_time.to_le_bytes());
    e.push(0x10); // field 2, varint
    varint(&mut e, step as u64);
    if let Some(v) = file_version {
        bytes_field(&mut e, 3, v.as_bytes());
    }
    if !scalars.is_empty() {
        let mut summary = Vec::new();
        for (tag, value) in scalars {
            let mut v = Vec::new();
            bytes_field(&mut v, 1, tag.as_bytes());
            v.push(0x15); // field 2, fixed32
            v.extend_from_slice(&value.to_le_bytes());
            bytes_field(&mut summary, 1, &v);
        }
        bytes_field(&mut e, 5, &summary);
    }
    e
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes scalars to `DIR/events.out.tfevents.<time>.<host>.<pid>.gradsleuth`.
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    pub fn create(dir: &Path) -> std::io::Result<EventWriter> {
        std::fs::create_dir_all(dir)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "localhost".into());
        let name = format!(
            "events.out.tfevents.{}.{host}.{}.gradsleuth",
            now() as u64,
            std::process::id()
        );
        let path = dir.join(name);
        let mut out = BufWriter::new(File::create(&path)?);
        out.write_all(&record(&event(now(), 0, Some("brain.Event:2"), &[])))?;
        Ok(EventWriter { out, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Scalars for one step (one event holding them all).
    pub fn scalars(&mut self, step: u64, values: &[(&str, f32)]) -> std::io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        self.out
            .write_all(&record(&event(now(), step as i64, None, values)))
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_and_masking_match_tensorflow() {
        // CRC-32C check value from RFC 3720.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        let len = 0u64.to_le_bytes();
        let rec = record(&[]);
        assert_eq!(&rec[..8], &len);
        assert_eq!(rec.len(), 16);
    }

    #[test]
    fn an_event_encodes_the_expected_bytes() {
        let e = event(1.5, 3, None, &[("loss", 0.25)]);
        let mut want = vec![0x09];
        want.extend_from_slice(&1.5f64.to_le_bytes());
        want.extend_from_slice(&[0x10, 3, 0x2a, 13, 0x0a, 11, 0x0a, 4]);
        want.extend_from_slice(b"loss");
        want.push(0x15);
        want.extend_from_slice(&0.25f32.to_le_bytes());
        assert_eq!(e, want);
    }

    #[test]
    fn writes_a_file_tensorboard_can_frame() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalars(1, &[("a", 1.0), ("b", 2.0)]).unwrap();
        w.flush().unwrap();
        let bytes = std::fs::read(w.path()).unwrap();
        // Walk the records: every length and CRC checks out.
        let mut i = 0;
        let mut n = 0;
        while i < bytes.len() {
            let len = u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
            let lcrc = u32::from_le_bytes(bytes[i + 8..i + 12].try_into().unwrap());
            assert_eq!(lcrc, masked_crc(&bytes[i..i + 8]));
            let data = &bytes[i + 12..i + 12 + len];
            let dcrc = u32::from_le_bytes(bytes[i + 12 + len..i + 16 + len].try_into().unwrap());
            assert_eq!(dcrc, masked_crc(data));
            i += 16 + len;
            n += 1;
        }
        assert_eq!(n, 2);
    }
}
