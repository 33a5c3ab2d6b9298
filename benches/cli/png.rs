//! An 8-bit RGB image as a PNG file (scanlines unfiltered, deflated by flate2). plotters'
//! own encoder is not used: it brings crates that would turn on features of the library's
//! dependencies in the test build (Cargo.toml, docs/building.md).

use flate2::write::ZlibEncoder;
use flate2::{Compression, Crc};
use std::io::Write as _;

/// The PNG of the `width` x `height` image `rgb` (rows top to bottom, 3 bytes a pixel).
pub fn encode_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let row = width as usize * 3;
    assert_eq!(rgb.len(), row * height as usize, "an RGB buffer of {width} x {height} pixels");
    // Each scanline starts with its filter type: 0, none.
    let mut scanlines = ZlibEncoder::new(Vec::with_capacity(rgb.len() / 8), Compression::default());
    for line in rgb.chunks_exact(row) {
        scanlines.write_all(&[0]).and_then(|()| scanlines.write_all(line)).expect("writing to memory");
    }
    let idat = scanlines.finish().expect("writing to memory");
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, the one filter method, no interlace.
    ihdr.extend([8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &idat);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// A chunk: its length, type, data and the CRC-32 of type and data.
fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend((data.len() as u32).to_be_bytes());
    png.extend(kind);
    png.extend(data);
    let mut crc = Crc::new();
    crc.update(kind);
    crc.update(data);
    png.extend(crc.sum().to_be_bytes());
}

// Run by `tests/cli` (bench.rs). The bench target compiles this module with cfg(test) but
// without its `#[test]` functions (harness = false), leaving the helpers unused there.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn the_png_holds_the_pixels_in_checked_chunks() {
        let (w, h) = (5u32, 3u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7) as u8).collect();
        let png = encode_rgb(w, h, &rgb);
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let (mut at, mut kinds, mut idat) = (8, Vec::new(), Vec::new());
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let (kind, data) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
            let mut crc = Crc::new();
            crc.update(kind);
            crc.update(data);
            assert_eq!(crc.sum().to_be_bytes(), png[at + 8 + len..at + 12 + len], "chunk {}", String::from_utf8_lossy(kind));
            if kind == b"IHDR" {
                assert_eq!(data, [0, 0, 0, 5, 0, 0, 0, 3, 8, 2, 0, 0, 0]);
            }
            if kind == b"IDAT" {
                idat.extend_from_slice(data);
            }
            kinds.push(String::from_utf8_lossy(kind).into_owned());
            at += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        let mut scanlines = Vec::new();
        flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut scanlines).unwrap();
        let expected: Vec<u8> = rgb.chunks_exact(15).flat_map(|line| std::iter::once(0).chain(line.iter().copied())).collect();
        assert_eq!(scanlines, expected);
    }
}
