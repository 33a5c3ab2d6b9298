//! The launch of the key encoding kernel (`cuda/key_encode.cu`, issue 69 stage 3): the sort
//! keys of decoded columns that already live on the device, written into one device buffer
//! in the width `keys::pack` picks for the layout. The program (which field reads which
//! column, where its bits go) is `engine/key_job.rs`'s, planned on the host from the key
//! layout; this checks it, uploads it and launches one thread a row.

// Its callers are the GPU tests and the device path under construction.
#![cfg_attr(not(test), allow(dead_code))]

use super::context::{gpu, gpu_err, DevBuf};
use super::launch::{Args, Launcher};
use super::manifest::{Entry, Family};
use super::nvrtc::ModuleSpec;
use crate::engine::key_job::{key_words, KeyFieldArg, KEY_NULL_BIT};
use crate::keys::KeyColumn;
use crate::{Error, Result};
use cudarc::driver::result;

/// Encoded keys on the device: `rows` keys of `words` u64s each (a u32 each when `words`
/// is 0).
pub(crate) struct KeysOnDevice {
    buf: Option<DevBuf>,
    device: usize,
    pub rows: usize,
    pub words: u32,
}

impl KeysOnDevice {
    /// The keys copied to host memory, as the CPU's encoding holds them (tests).
    pub fn to_host(&self) -> Result<KeyColumn> {
        gpu(self.device)?.bind()?;
        let n = self.rows * self.words.max(1) as usize;
        let mut u64s = vec![0u64; if self.words == 0 { 0 } else { n }];
        let mut u32s = vec![0u32; if self.words == 0 { n } else { 0 }];
        if n > 0 {
            let ptr = self.buf.as_ref().expect("held until drop").ptr;
            // SAFETY: the buffer holds `n` keys of this width, written by a finished launch.
            unsafe {
                if self.words == 0 {
                    result::memcpy_dtoh_sync(&mut u32s, ptr)
                } else {
                    result::memcpy_dtoh_sync(&mut u64s, ptr)
                }
            }
            .map_err(gpu_err("downloading keys"))?;
        }
        let w = self.words as usize;
        let at = |i: usize, k: usize| u64s[i * w + k];
        Ok(match self.words {
            0 => KeyColumn::U32(u32s),
            1 => KeyColumn::U64(u64s),
            2 => KeyColumn::U64x2((0..self.rows).map(|i| [at(i, 0), at(i, 1)]).collect()),
            3 => KeyColumn::U64x3((0..self.rows).map(|i| [at(i, 0), at(i, 1), at(i, 2)]).collect()),
            _ => KeyColumn::U64x4((0..self.rows).map(|i| [at(i, 0), at(i, 1), at(i, 2), at(i, 3)]).collect()),
        })
    }
}

impl Drop for KeysOnDevice {
    fn drop(&mut self) {
        if let Ok(g) = gpu(self.device) {
            let _ = g.bind();
        }
        drop(self.buf.take());
    }
}

/// Encodes the keys of `rows` rows on CUDA device `device` from `fields`, whose `values`
/// and `validity` are device addresses on that device (alive for the call) of at least
/// `rows` values and `rows` bits, for a key of `bits` bits (the layout's).
pub(crate) fn encode_keys(device: usize, fields: &[KeyFieldArg], rows: usize, bits: u32) -> Result<KeysOnDevice> {
    for (f, d) in fields.iter().enumerate() {
        let end = d.offset + (d.flags & KEY_NULL_BIT) + 8 * d.bytes;
        if !matches!(d.bytes, 4 | 8 | 16) || end > bits || bits > 256 || d.values == 0 {
            return Err(Error::Internal(format!("key field {f} does not fit its key")));
        }
    }
    let words = key_words(bits);
    let g = gpu(device)?;
    g.bind()?;
    let module = g.lock()?.module(g, ModuleSpec { family: Family::Decode, key_bytes: 8, index_bits: 32 })?;
    let stream = g.ctx.new_stream().map_err(gpu_err("creating the key stream"))?;
    let s = stream.cu_stream();
    let key_bytes = if words == 0 { 4 } else { 8 * words as usize };
    let out = DevBuf::new((rows * key_bytes).max(16))?;
    let descs = DevBuf::new(std::mem::size_of_val(fields).max(8))?;
    // SAFETY: `KeyFieldArg` is plain old data (repr(C), integers only, no padding: 32
    // bytes, asserted); the slice covers exactly the fields.
    let bytes = unsafe { std::slice::from_raw_parts(fields.as_ptr() as *const u8, std::mem::size_of_val(fields)) };
    if !bytes.is_empty() {
        // SAFETY: `descs` holds at least `bytes.len()` bytes; `bytes` outlives the
        // synchronize below.
        unsafe { result::memcpy_htod_async(descs.ptr, bytes, s) }.map_err(gpu_err("uploading the key fields"))?;
    }
    let nfields = u32::try_from(fields.len()).map_err(|_| Error::Internal("too many key fields".into()))?;
    let threads = module.policy.threads as u64;
    Launcher { module: &module, stream: s }.launch(
        Entry::EncodeFixedKeys,
        (rows as u64).div_ceil(threads),
        Args::EncodeKeys { fields: descs.ptr, nfields, rows: rows as u64, out: out.ptr, words },
    )?;
    stream.synchronize().map_err(gpu_err("encoding keys"))?;
    drop(descs);
    Ok(KeysOnDevice { buf: Some(out), device, rows, words })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::key_job::cases::{column, host, options, Rng};
    use crate::engine::key_job::{encode_on_cpu, key_program, HostColumn};
    use crate::engine::tests::support::gpu_or_skip;
    use crate::keys::{encode_runs, plan_layout};
    use crate::sort_key::SortKey;
    use arrow::array::ArrayRef;
    use arrow::datatypes::DataType;

    fn upload(bytes: &[u8]) -> DevBuf {
        let buf = DevBuf::new(bytes.len().max(16)).unwrap();
        // SAFETY: the buffer holds at least `bytes.len()` bytes.
        unsafe { result::memcpy_htod_sync(buf.ptr, bytes) }.unwrap();
        buf
    }

    /// The device's keys equal the CPU's encoding and the kernel's CPU reference, for every
    /// covered type, direction and null share, keys of one to four fields (every width),
    /// and row counts around the block size.
    #[test]
    fn device_keys_match_the_cpu() {
        if !gpu_or_skip("device_keys_match_the_cpu") {
            return;
        }
        gpu(0).unwrap().bind().unwrap();
        let small = crate::engine::tests::support::small_only();
        let mut rng = Rng(0x51_7cc1_b727_220a);
        let mut shapes: Vec<Vec<(usize, usize, u64)>> = Vec::new();
        for kind in 0..6 {
            for dir in 0..4 {
                shapes.push(vec![(kind, dir, (dir % 3) as u64)]);
            }
        }
        for case in 0..(if small { 8 } else { 40 }) {
            let n = 2 + case % 3;
            shapes.push((0..n).map(|_| ((rng.next() % 6) as usize, (rng.next() % 4) as usize, rng.next() % 3)).collect());
        }
        shapes.push(vec![(5, 0, 0), (3, 1, 0)]);
        shapes.push(vec![(5, 0, 0), (5, 3, 0)]);
        shapes.push(vec![(5, 0, 1), (5, 1, 1), (4, 2, 0)]);
        for (i, shape) in shapes.iter().enumerate() {
            let rows = match i % 4 {
                0 => 1,
                1 => 255 + (rng.next() % 3) as usize,
                2 => 1 + (rng.next() % 5000) as usize,
                _ if small => 777,
                _ => 100_000 + (rng.next() % 1000) as usize,
            };
            let cols: Vec<ArrayRef> = shape.iter().map(|&(k, _, nulls)| column(k, rows, nulls, &mut rng)).collect();
            let specs: Vec<SortKey> = shape.iter().enumerate().map(|(i, &(_, d, _))| SortKey::new(format!("c{i}"), options(d))).collect();
            let runs = vec![cols.clone()];
            let layout = plan_layout(&runs, &specs).unwrap();
            let types: Vec<DataType> = cols.iter().map(|c| c.data_type().clone()).collect();
            let mut fields = key_program(&layout, &types).expect("covered");
            let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = layout.fields.iter().map(|f| host(&cols[f.column])).collect();
            let mut bufs = Vec::new();
            for (d, (v, n)) in fields.iter_mut().zip(&owned) {
                let vb = upload(v);
                d.values = vb.ptr;
                bufs.push(vb);
                if let Some(n) = n {
                    let nb = upload(n);
                    d.validity = nb.ptr;
                    bufs.push(nb);
                }
            }
            let on_device = encode_keys(0, &fields, rows, layout.bits).unwrap().to_host().unwrap();
            let want = encode_runs(&runs, &specs).unwrap().keys;
            assert_eq!(on_device, want, "shape {shape:?}, {rows} rows");
            let columns: Vec<HostColumn> = owned.iter().map(|(v, n)| HostColumn { values: v, validity: n.as_deref() }).collect();
            let mut reference_fields = fields.clone();
            reference_fields.iter_mut().for_each(|d| (d.values, d.validity) = (0, 0));
            assert_eq!(encode_on_cpu(&reference_fields, &columns, rows, layout.bits).unwrap(), want);
            drop(bufs);
        }
    }

    /// A program that does not fit its key is refused before anything runs.
    #[test]
    fn a_field_past_the_key_is_refused() {
        let f = KeyFieldArg { values: 16, offset: 40, bytes: 4, ..Default::default() };
        assert!(encode_keys(0, &[f], 10, 64).is_err());
    }
}
