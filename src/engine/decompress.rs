//! A batched decompression on the device, as its callers describe it (in builds with and
//! without the `gpu` feature): one host image of compressed and plain bytes uploaded in one
//! copy, and the spans that fill one device output buffer from it, each either decompressed
//! by a codec (nvCOMP: `engine/gpu/nvcomp.rs`) or copied through unchanged.
//!
//! The caller lays the image and the output out (`parquet/device/decompress.rs` for the
//! pages of Parquet column chunks); the device checks the layout before any work is queued:
//! spans inside both buffers, no two outputs overlapping, every decompressed span's input and
//! output offsets multiples of [`SPAN_ALIGN`] (nvCOMP 6's headers name 8-byte input alignment
//! for zstd, 4 for LZ4, 1 for snappy; the library's own answer at run time, 1 in 6.0.0.12, is
//! checked against this constant at load).

// Its one caller is the Parquet reader (`parquet/device/`): unused in builds without it.
#![cfg_attr(not(feature = "parquet"), allow(dead_code))]

/// The alignment of every decompressed span's input and output offset.
pub(crate) const SPAN_ALIGN: usize = 16;

/// The codecs the device decompresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum DeviceCodec {
    /// Zstandard frames.
    Zstd,
    /// Snappy's raw block format (what Parquet's SNAPPY is).
    Snappy,
    /// LZ4's raw block format (Parquet's LZ4_RAW; not the Hadoop framing of Parquet's LZ4).
    Lz4Raw,
}

impl DeviceCodec {
    /// Every codec, in the order a job decompresses them.
    pub const ALL: [DeviceCodec; 3] = [DeviceCodec::Zstd, DeviceCodec::Snappy, DeviceCodec::Lz4Raw];

    /// The codec's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            DeviceCodec::Zstd => "zstd",
            DeviceCodec::Snappy => "snappy",
            DeviceCodec::Lz4Raw => "lz4_raw",
        }
    }
}

/// One span of the output: `input_len` bytes of the image at `input` become `output_len`
/// bytes of the output at `output`, decompressed by `codec`, or copied (`None`: the lengths
/// are then equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub codec: Option<DeviceCodec>,
    pub input: usize,
    pub input_len: usize,
    pub output: usize,
    pub output_len: usize,
}

/// A whole job: the image's length (the caller fills it, see
/// [`super::device::decompress_on_device`]), the spans and the output's length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DecompressJob {
    pub image_len: usize,
    pub spans: Vec<Span>,
    pub output_len: usize,
}

impl DecompressJob {
    /// Whether the layout is one the device may run: every span inside both buffers, the
    /// copies of equal lengths, decompressed spans aligned to [`SPAN_ALIGN`], outputs apart.
    pub fn check(&self) -> Result<(), String> {
        let mut outputs: Vec<(usize, usize, usize)> = Vec::with_capacity(self.spans.len());
        for (i, s) in self.spans.iter().enumerate() {
            let inside = |at: usize, len: usize, total: usize| at.checked_add(len).is_some_and(|end| end <= total);
            if !inside(s.input, s.input_len, self.image_len) || !inside(s.output, s.output_len, self.output_len) {
                return Err(format!("span {i} ({s:?}) lies outside the image ({}) or the output ({})", self.image_len, self.output_len));
            }
            match s.codec {
                None if s.input_len != s.output_len => return Err(format!("copied span {i} changes length ({s:?})")),
                Some(_) if !s.input.is_multiple_of(SPAN_ALIGN) || !s.output.is_multiple_of(SPAN_ALIGN) => {
                    return Err(format!("decompressed span {i} is not aligned to {SPAN_ALIGN} bytes ({s:?})"))
                }
                Some(_) if s.input_len == 0 => return Err(format!("decompressed span {i} has no input ({s:?})")),
                _ => {}
            }
            if s.output_len > 0 {
                outputs.push((s.output, s.output + s.output_len, i));
            }
        }
        outputs.sort_unstable();
        if let Some(w) = outputs.windows(2).find(|w| w[1].0 < w[0].1) {
            return Err(format!("spans {} and {} write the same output bytes", w[0].2, w[1].2));
        }
        Ok(())
    }
}

/// What a span's decompression gave: `Ok` or nvCOMP's status in words (a wrong length is a
/// failure too).
pub(crate) type SpanStatus = Result<(), String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn span(codec: Option<DeviceCodec>, input: usize, input_len: usize, output: usize, output_len: usize) -> Span {
        Span { codec, input, input_len, output, output_len }
    }

    #[test]
    fn checks_layouts() {
        let z = Some(DeviceCodec::Zstd);
        let ok = DecompressJob {
            image_len: 64,
            spans: vec![span(z, 0, 10, 0, 20), span(None, 10, 6, 20, 6), span(z, 16, 48, 32, 32)],
            output_len: 64,
        };
        assert_eq!(ok.check(), Ok(()));
        let mut bad = ok.clone();
        bad.spans[2].output = 16; // overlaps span 0
        assert!(bad.check().unwrap_err().contains("same output"));
        let mut bad = ok.clone();
        bad.spans[2].input = 8; // unaligned
        assert!(bad.check().unwrap_err().contains("aligned"));
        let mut bad = ok.clone();
        bad.spans[1].output_len = 7;
        assert!(bad.check().is_err());
        let mut bad = ok.clone();
        bad.spans[2].input_len = 49; // past the image
        assert!(bad.check().unwrap_err().contains("outside"));
        let mut bad = ok;
        bad.spans[0].input = usize::MAX - 3; // overflowing
        assert!(bad.check().is_err());
    }
}
