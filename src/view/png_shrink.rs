//! A big PNG downscaled while it is decoded (issue 22): the fast path of `images::prepare`.
//!
//! Owns: decoding an 8-bit RGB or opaque RGBA PNG row by row and shrinking it to a given size
//! with a Hamming filter, on two threads. The result is cut into bands of rows; this thread
//! inflates and unfilters the source rows of one band after the other (the rows each band's
//! filter reads, a few shared with the next band), and a second thread resizes each band as it
//! arrives, with `fast_image_resize` cropped to the band, so each result row is what resizing
//! the whole image gives, checks that its pixels are opaque, and feeds its rows to the PNG
//! encoder. The whole decoded image (57 MB for a 4550×3150 RGBA plot) is never written:
//! allocating and filling it cost as much as decoding did. Decoding is the slower half, so on
//! two free cores the resize, the check and the encoding run beside it, and the last band is
//! all that follows it.
//!
//! Does not own: any other PNG (palette, grey, 16-bit, interlaced, a `tRNS` colour key, a
//! pixel that is not opaque): `shrink` answers `None` and the caller takes the whole-image path,
//! which premultiplies alpha. An image with a transparent pixel is noticed in the first band
//! holding one, so little work is thrown away.
//!
//! Invariant: the result matches the whole-image resize (`fast_image_resize`, Hamming) to
//! within one level per channel (`tests::the_row_by_row_shrink_matches_the_whole_image_resize`;
//! on the bench's plots it is identical); `images::tests` pins shapes, colours and lines.
//! Numbers: `cargo bench --bench images`.

use std::io::{Cursor, Write as _};
use std::sync::mpsc;

use fast_image_resize as fir;

/// About how many bytes of decoded rows go to the resizing thread at a time: big enough that
/// the resize's per-call work and the rows two bands share are small, small enough that a
/// band stays in cache.
const BAND_BYTES: usize = 4 << 20;

/// Bands in flight between the two threads: one being decoded, one being resized, one spare.
const BANDS_IN_FLIGHT: usize = 3;

/// Why a PNG that the fast path took could not be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error("{0}")]
    Decode(#[from] png::DecodingError),
    #[error("{0}")]
    Resize(String),
    #[error("{0}")]
    Encode(#[from] png::EncodingError),
}

/// Result rows `first_row..first_row + rows`, and the source rows their filter reads:
/// `first_source..first_source + sources` (a row more on each side than the filter needs, so
/// rounding never cuts a window short).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Band {
    first_row: u32,
    rows: u32,
    first_source: usize,
    sources: usize,
}

impl Band {
    fn end_source(&self) -> usize {
        self.first_source + self.sources
    }
}

/// The bands of a resize from `source_height` rows to `height`, each reading about
/// `rows_per_band` source rows.
fn plan_bands(source_height: u32, height: u32, rows_per_band: usize) -> Vec<Band> {
    let scale = f64::from(source_height) / f64::from(height);
    // Hamming's support is one pixel, widened by the scale when shrinking (as in
    // `fast_image_resize`).
    let radius = scale.max(1.0);
    let rows_per_band = ((rows_per_band as f64 / scale) as u32).max(1);
    let last = source_height as usize;
    (0..height)
        .step_by(rows_per_band as usize)
        .map(|first_row| {
            let end_row = (first_row + rows_per_band).min(height);
            let low = (f64::from(first_row) + 0.5) * scale - radius;
            let high = (f64::from(end_row) - 0.5) * scale + radius;
            let first_source = (low.floor() as i64 - 1).max(0) as usize;
            let end_source = (high.ceil() as usize + 1).min(last);
            Band {
                first_row,
                rows: end_row - first_row,
                first_source,
                sources: end_source - first_source,
            }
        })
        .collect()
}

/// `png` shrunk to `width`×`height` as an RGB PNG, encoded as the image crate does by default
/// (`png`'s fast deflate, adaptive filter), or `None` when it is not a PNG this path takes (see
/// the module doc): the caller then decodes the whole image.
pub fn shrink(png: &[u8], width: u32, height: u32) -> Result<Option<Vec<u8>>, ShrinkError> {
    let mut decoder = png::Decoder::new(Cursor::new(png));
    decoder.set_transformations(png::Transformations::IDENTITY);
    let mut reader = decoder.read_info()?;
    let info = reader.info();
    let channels: usize = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        _ => return Ok(None),
    };
    if info.bit_depth != png::BitDepth::Eight || info.interlaced || info.trns.is_some() {
        return Ok(None);
    }
    let (source_width, source_height) = (info.width, info.height);
    let row_bytes = source_width as usize * channels;
    let bands = plan_bands(source_height, height, (BAND_BYTES / row_bytes).max(1));
    let band_bytes = bands.iter().map(|band| band.sources).max().unwrap_or(0) * row_bytes;
    let pixel_type = if channels == 3 {
        fir::PixelType::U8x3
    } else {
        fir::PixelType::U8x4
    };
    let (full_bands, to_resize) = mpsc::sync_channel::<(Vec<u8>, Band)>(BANDS_IN_FLIGHT);
    let (return_empty, empties) = mpsc::channel::<Vec<u8>>();
    for _ in 0..BANDS_IN_FLIGHT {
        // Cannot fail: `empties` is alive here.
        let _ = return_empty.send(vec![0; band_bytes]);
    }
    let geometry = Geometry {
        source_width,
        source_height,
        width,
        height,
        pixel_type,
    };
    std::thread::scope(|scope| {
        // The resizing thread holds the only sender of empty bands: if it stops, the decoding
        // loop below stops too instead of waiting.
        let resizing = scope.spawn(move || resize_bands(to_resize, return_empty, geometry));
        let decoded = decode_bands(&mut reader, &bands, row_bytes, full_bands, &empties);
        let encoded = resizing
            .join()
            .map_err(|_| ShrinkError::Resize("the resizing thread panicked".into()))?;
        match (decoded, encoded) {
            // A pixel that is not opaque: the whole-image path reports anything else.
            (_, Ok(None)) => Ok(None),
            (Err(error), _) | (_, Err(error)) => Err(error),
            (Ok(Decoded::Stopped), Ok(Some(_))) => Err(ShrinkError::Resize(
                "the resizing thread stopped early".into(),
            )),
            (Ok(Decoded::Whole), Ok(Some(png))) => Ok(Some(png)),
        }
    })
}

/// How the decoding loop ended.
enum Decoded {
    /// Every row was decoded and every band sent.
    Whole,
    /// The resizing thread stopped (it says why).
    Stopped,
}

/// Decodes every row straight into the band buffers (`read_row`: no copy of its own) and
/// sends each band once its last source row is in; the rows it shares with the next band are
/// copied into the next buffer first.
fn decode_bands(
    reader: &mut png::Reader<Cursor<&[u8]>>,
    bands: &[Band],
    row_bytes: usize,
    full_bands: mpsc::SyncSender<(Vec<u8>, Band)>,
    empties: &mpsc::Receiver<Vec<u8>>,
) -> Result<Decoded, ShrinkError> {
    let Ok(mut buffer) = empties.recv() else {
        return Ok(Decoded::Stopped);
    };
    // Where a row past the last band would go: none comes (the last band ends at the last
    // row), but the reader is still asked once more, to check the stream's end.
    let mut past_the_end = vec![0; row_bytes];
    let mut next_band = 0;
    let mut y = 0;
    loop {
        let row = match bands.get(next_band) {
            Some(band) => {
                let at = (y - band.first_source) * row_bytes;
                &mut buffer[at..at + row_bytes]
            }
            None => &mut past_the_end[..],
        };
        if reader.read_row(row)?.is_none() {
            break;
        }
        y += 1;
        while let Some(&band) = bands.get(next_band)
            && band.end_source() == y
        {
            // The last band needs no next buffer (and waits for none).
            let mut next_buffer = Vec::new();
            if let Some(next) = bands.get(next_band + 1) {
                let Ok(empty) = empties.recv() else {
                    return Ok(Decoded::Stopped);
                };
                next_buffer = empty;
                let shared = (next.first_source - band.first_source) * row_bytes;
                let end = (y - band.first_source) * row_bytes;
                next_buffer[..end - shared].copy_from_slice(&buffer[shared..end]);
            }
            if full_bands.send((buffer, band)).is_err() {
                return Ok(Decoded::Stopped);
            }
            buffer = next_buffer;
            next_band += 1;
        }
    }
    Ok(Decoded::Whole)
}

/// The sizes of a shrink and the pixel layout of both images.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    source_width: u32,
    source_height: u32,
    width: u32,
    height: u32,
    pixel_type: fir::PixelType,
}

/// The resizing thread: each band's source rows resized into its rows of the result, checked
/// for opacity, and written to the PNG encoder; the band's buffer then sent back for reuse.
/// `None` if a pixel is not opaque.
fn resize_bands(
    bands: mpsc::Receiver<(Vec<u8>, Band)>,
    return_empty: mpsc::Sender<Vec<u8>>,
    geometry: Geometry,
) -> Result<Option<Vec<u8>>, ShrinkError> {
    let Geometry {
        source_width,
        source_height,
        width,
        height,
        pixel_type,
    } = geometry;
    let channels = pixel_type.size();
    let source_row_bytes = source_width as usize * channels;
    let scale = f64::from(source_height) / f64::from(height);
    let mut resizer = fir::Resizer::new();
    let mut band_rows = Vec::new();
    let mut rgb_row = vec![0; width as usize * 3];
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    encoder.set_filter(png::Filter::Adaptive);
    let mut header_written = encoder.write_header()?;
    let mut rows_out = header_written.stream_writer()?;
    for (buffer, band) in bands {
        let sources = &buffer[..band.sources * source_row_bytes];
        if channels == 4 && !is_opaque(sources) {
            return Ok(None);
        }
        let source =
            fir::images::ImageRef::new(source_width, band.sources as u32, sources, pixel_type)
                .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        // The band's place in the source, relative to its first source row: the same centre
        // and scale for each of its rows as in a resize of the whole image.
        let top = f64::from(band.first_row) * scale - band.first_source as f64;
        let bottom = if band.first_row + band.rows == height {
            f64::from(source_height)
        } else {
            f64::from(band.first_row + band.rows) * scale
        } - band.first_source as f64;
        let options = hamming().crop(0.0, top, f64::from(source_width), bottom - top);
        band_rows.resize(band.rows as usize * width as usize * channels, 0);
        let mut destination =
            fir::images::Image::from_slice_u8(width, band.rows, &mut band_rows, pixel_type)
                .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        resizer
            .resize(&source, &mut destination, &options)
            .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        // The decoding loop may have stopped already; the buffer is then simply dropped.
        let _ = return_empty.send(buffer);
        for row in band_rows.chunks_exact(width as usize * channels) {
            if channels == 3 {
                rows_out.write_all(row).map_err(png::EncodingError::from)?;
            } else {
                for (rgb, rgba) in rgb_row.chunks_exact_mut(3).zip(row.chunks_exact(4)) {
                    rgb.copy_from_slice(&rgba[..3]);
                }
                rows_out
                    .write_all(&rgb_row)
                    .map_err(png::EncodingError::from)?;
            }
        }
    }
    rows_out.finish()?;
    header_written.finish()?;
    Ok(Some(png))
}

/// The filter of every pass: Hamming (see `images.rs`), no alpha premultiplication (every
/// pixel this path takes is opaque).
fn hamming() -> fir::ResizeOptions {
    fir::ResizeOptions::new()
        .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Hamming))
        .use_alpha(false)
}

/// Whether every pixel of RGBA bytes has alpha 255: one AND over whole pixels (it vectorises;
/// a byte-by-byte look at the alpha channel cost as much as the resize).
pub fn is_opaque(rgba: &[u8]) -> bool {
    let all = rgba.chunks_exact(4).fold([u8::MAX; 4], |all, pixel| {
        [
            all[0] & pixel[0],
            all[1] & pixel[1],
            all[2] & pixel[2],
            all[3] & pixel[3],
        ]
    });
    all[3] == u8::MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::ImageFormat;

    fn encode(image: image::DynamicImage) -> Vec<u8> {
        let mut bytes = Cursor::new(Vec::new());
        image.write_to(&mut bytes, ImageFormat::Png).unwrap();
        bytes.into_inner()
    }

    /// A plot-like image with detail everywhere: a gradient, noise, and thin lines.
    fn busy(width: u32, height: u32) -> image::RgbaImage {
        let mut noise = 0x2545_f491_u32;
        image::RgbaImage::from_fn(width, height, |x, y| {
            noise ^= noise << 13;
            noise ^= noise >> 17;
            noise ^= noise << 5;
            if x % 53 == 0 || y % 41 == 0 {
                return image::Rgba([0, 0, 0, 255]);
            }
            image::Rgba([(x % 256) as u8, (y % 256) as u8, (noise & 255) as u8, 255])
        })
    }

    /// The two-thread, row-by-row shrink gives what resizing the whole decoded image gives,
    /// within one level per channel, over several bands and a last band of fewer rows.
    #[test]
    fn the_row_by_row_shrink_matches_the_whole_image_resize() {
        let (width, height) = (4550, 1111);
        let image = busy(width, height);
        let (to_width, to_height) = (1568, 383);
        let shrunk = shrink(&encode(image.clone().into()), to_width, to_height)
            .unwrap()
            .expect("an opaque RGBA PNG takes this path");
        let bands = plan_bands(height, to_height, BAND_BYTES / (width as usize * 4));
        assert!(bands.len() > 2, "{bands:?}");
        assert_ne!(bands[0].rows, bands.last().unwrap().rows);
        let mut whole = fir::images::Image::new(to_width, to_height, fir::PixelType::U8x4);
        fir::Resizer::new()
            .resize(&image, &mut whole, &hamming())
            .unwrap();
        let expected: Vec<u8> = whole
            .buffer()
            .chunks_exact(4)
            .flat_map(|pixel| [pixel[0], pixel[1], pixel[2]])
            .collect();
        let shown = image::load_from_memory(&shrunk).unwrap();
        assert_eq!(shown.color(), image::ColorType::Rgb8);
        let shown = shown.to_rgb8().into_raw();
        assert_eq!(shown.len(), expected.len());
        let largest = shown
            .iter()
            .zip(&expected)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(largest <= 1, "a channel differs by {largest}");
    }

    /// Every result row is in exactly one band, and each band reads every source row its
    /// filter needs, for shrinks by small and large factors.
    #[test]
    fn the_bands_cover_every_row_and_every_window() {
        for (source_height, height, rows_per_band) in [
            (3150, 1086, 230),
            (1111, 383, 230),
            (5000, 7, 100),
            (1569, 1568, 10),
            (100, 99, 1),
        ] {
            let bands = plan_bands(source_height, height, rows_per_band);
            let scale = f64::from(source_height) / f64::from(height);
            let mut next_row = 0;
            for band in &bands {
                assert_eq!(band.first_row, next_row);
                next_row += band.rows;
                let low = (f64::from(band.first_row) + 0.5) * scale - scale.max(1.0);
                let high = (f64::from(next_row) - 0.5) * scale + scale.max(1.0);
                assert!(band.first_source as f64 <= low.floor().max(0.0));
                assert!(band.end_source() as f64 >= high.ceil().min(f64::from(source_height)));
            }
            assert_eq!(next_row, height);
            assert_eq!(bands.last().unwrap().end_source(), source_height as usize);
        }
    }

    #[test]
    fn an_rgb_png_takes_this_path_too() {
        let image = image::DynamicImage::ImageRgba8(busy(3000, 700)).to_rgb8();
        let shrunk = shrink(&encode(image.into()), 1568, 366).unwrap().unwrap();
        let shown = image::load_from_memory(&shrunk).unwrap();
        assert_eq!(shown.color(), image::ColorType::Rgb8);
        assert_eq!(shown.to_rgb8().dimensions(), (1568, 366));
    }

    /// An image whose only transparent pixel is in its last row is handed back to the
    /// whole-image path (which premultiplies alpha), not shrunk as if opaque.
    #[test]
    fn a_transparent_pixel_in_the_last_row_hands_the_image_back() {
        let mut image = busy(3000, 1500);
        image.put_pixel(2999, 1499, image::Rgba([0, 255, 0, 0]));
        assert!(shrink(&encode(image.into()), 1568, 784).unwrap().is_none());
    }

    #[test]
    fn grey_and_16_bit_pngs_are_handed_back() {
        let grey = image::GrayImage::from_pixel(3000, 100, image::Luma([7]));
        assert!(shrink(&encode(grey.into()), 1568, 52).unwrap().is_none());
        let deep =
            image::ImageBuffer::<image::Rgb<u16>, _>::from_pixel(3000, 100, image::Rgb([7, 8, 9]));
        assert!(shrink(&encode(deep.into()), 1568, 52).unwrap().is_none());
    }

    /// A PNG cut short in its pixel data is a decode error, and both threads end.
    #[test]
    fn a_truncated_png_is_a_decode_error_not_a_hang() {
        let whole = encode(busy(3000, 1500).into());
        let cut = &whole[..whole.len() / 2];
        assert!(matches!(
            shrink(cut, 1568, 784),
            Err(ShrinkError::Decode(_))
        ));
    }
}
