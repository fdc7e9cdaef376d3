//! A big PNG downscaled while it is decoded (issue 22): the fast path of `images::prepare`.
//!
//! Owns: decoding an 8-bit RGB or opaque RGBA PNG row by row and shrinking it to a given size
//! with a Hamming filter, on two threads. This thread inflates and unfilters strips of rows;
//! a second thread resizes each strip horizontally as it arrives (the rows already decoded),
//! into an image as tall as the original and as wide as the result; the vertical pass follows
//! the last strip. The whole decoded image (57 MB for a 4550×3150 RGBA plot) is never written:
//! allocating and filling it cost as much as decoding did.
//!
//! Does not own: any other PNG (palette, grey, 16-bit, interlaced, a `tRNS` colour key, a
//! pixel that is not opaque): `shrink` answers `None` and the caller takes the whole-image path,
//! which premultiplies alpha. An image with a transparent pixel is noticed at the first such
//! row, so little work is thrown away. Nor the encoding of the result.
//!
//! Invariant: the result matches the whole-image resize (`fast_image_resize`, Hamming) to
//! within one level per channel; `images::tests` pins the shapes, colours and lines.
//! Numbers: `cargo bench --bench images`.

use std::io::Cursor;
use std::sync::mpsc;

use fast_image_resize as fir;

/// About how many bytes of decoded rows go to the resizing thread at a time: big enough that
/// the resize's per-call work is small, small enough that two strips stay in cache.
const STRIP_BYTES: usize = 4 << 20;

/// Strips in flight between the two threads: one being decoded, one being resized, one spare.
const STRIPS_IN_FLIGHT: usize = 3;

/// A shrunk image: `width`×`height` pixels of 8-bit RGB, row after row.
#[derive(Debug)]
pub struct Shrunk {
    pub rgb: Vec<u8>,
    pub width: u32,
    pub height: u32,
}

/// Why a PNG that the fast path took could not be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error("{0}")]
    Decode(#[from] png::DecodingError),
    #[error("{0}")]
    Resize(String),
}

/// `png` shrunk to `width`×`height`, or `None` when it is not a PNG this path takes (see the
/// module doc): the caller then decodes the whole image.
pub fn shrink(png: &[u8], width: u32, height: u32) -> Result<Option<Shrunk>, ShrinkError> {
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
    let rows_per_strip = (STRIP_BYTES / row_bytes).clamp(1, source_height as usize);
    let pixel_type = if channels == 3 {
        fir::PixelType::U8x3
    } else {
        fir::PixelType::U8x4
    };
    let (full_strips, strips) = mpsc::sync_channel::<(Vec<u8>, usize)>(STRIPS_IN_FLIGHT);
    let (return_empty, empties) = mpsc::channel::<Vec<u8>>();
    for _ in 0..STRIPS_IN_FLIGHT {
        // Cannot fail: `empties` is alive here.
        let _ = return_empty.send(vec![0; rows_per_strip * row_bytes]);
    }
    let widened = std::thread::scope(|scope| {
        // The resizing thread holds the only sender of empty strips: if it stops, the decoding
        // loop below stops too instead of waiting.
        let resizing = scope.spawn(move || {
            resize_rows(
                strips,
                return_empty,
                source_width,
                source_height,
                width,
                pixel_type,
            )
        });
        let decoded = decode_strips(&mut reader, full_strips, &empties, rows_per_strip, channels);
        let widened = resizing
            .join()
            .map_err(|_| ShrinkError::Resize("the resizing thread panicked".into()))?;
        match decoded? {
            Decoded::Opaque => widened.map(Some),
            Decoded::NotOpaque | Decoded::Stopped => widened.map(|_| None),
        }
    })?;
    let Some(widened) = widened else {
        return Ok(None);
    };
    let mut shrunk = fir::images::Image::new(width, height, pixel_type);
    fir::Resizer::new()
        .resize(&widened, &mut shrunk, &hamming())
        .map_err(|e| ShrinkError::Resize(e.to_string()))?;
    let rgb = if channels == 3 {
        shrunk.into_vec()
    } else {
        shrunk
            .buffer()
            .chunks_exact(4)
            .flat_map(|pixel| [pixel[0], pixel[1], pixel[2]])
            .collect()
    };
    Ok(Some(Shrunk { rgb, width, height }))
}

/// How the decoding loop ended.
enum Decoded {
    /// Every row was decoded and sent; every pixel is opaque.
    Opaque,
    /// A pixel is not opaque: this path does not take the image.
    NotOpaque,
    /// The resizing thread stopped (it reports why).
    Stopped,
}

/// Decodes every row into strips of `rows_per_strip` rows and sends each full strip to the
/// resizing thread.
fn decode_strips(
    reader: &mut png::Reader<Cursor<&[u8]>>,
    full_strips: mpsc::SyncSender<(Vec<u8>, usize)>,
    empties: &mpsc::Receiver<Vec<u8>>,
    rows_per_strip: usize,
    channels: usize,
) -> Result<Decoded, ShrinkError> {
    let Ok(mut strip) = empties.recv() else {
        return Ok(Decoded::Stopped);
    };
    let mut rows = 0;
    while let Some(row) = reader.next_row()? {
        let data = row.data();
        if channels == 4 && !is_opaque(data) {
            return Ok(Decoded::NotOpaque);
        }
        let row_bytes = data.len();
        strip[rows * row_bytes..(rows + 1) * row_bytes].copy_from_slice(data);
        rows += 1;
        if rows == rows_per_strip {
            if full_strips.send((strip, rows)).is_err() {
                return Ok(Decoded::Stopped);
            }
            rows = 0;
            strip = match empties.recv() {
                Ok(strip) => strip,
                Err(_) => return Ok(Decoded::Stopped),
            };
        }
    }
    if rows > 0 && full_strips.send((strip, rows)).is_err() {
        return Ok(Decoded::Stopped);
    }
    Ok(Decoded::Opaque)
}

/// The resizing thread: each strip resized horizontally to `width` into its place in an
/// image `width`×`source_height`, the strip's buffer then sent back for reuse.
fn resize_rows(
    strips: mpsc::Receiver<(Vec<u8>, usize)>,
    return_empty: mpsc::Sender<Vec<u8>>,
    source_width: u32,
    source_height: u32,
    width: u32,
    pixel_type: fir::PixelType,
) -> Result<fir::images::Image<'static>, ShrinkError> {
    let mut widened = fir::images::Image::new(width, source_height, pixel_type);
    let out_row_bytes = width as usize * pixel_type.size();
    let in_row_bytes = source_width as usize * pixel_type.size();
    let mut resizer = fir::Resizer::new();
    let options = hamming();
    let mut top = 0;
    for (strip, rows) in strips {
        let source = fir::images::ImageRef::new(
            source_width,
            rows as u32,
            &strip[..rows * in_row_bytes],
            pixel_type,
        )
        .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        let place = &mut widened.buffer_mut()[top * out_row_bytes..(top + rows) * out_row_bytes];
        let mut destination =
            fir::images::Image::from_slice_u8(width, rows as u32, place, pixel_type)
                .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        resizer
            .resize(&source, &mut destination, &options)
            .map_err(|e| ShrinkError::Resize(e.to_string()))?;
        top += rows;
        // The decoding loop may have stopped already; the buffer is then simply dropped.
        let _ = return_empty.send(strip);
    }
    Ok(widened)
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
    /// within one level per channel, over several strips and a last strip that is not full.
    #[test]
    fn the_row_by_row_shrink_matches_the_whole_image_resize() {
        let (width, height) = (4550, 1111);
        let image = busy(width, height);
        let (to_width, to_height) = (1568, 383);
        let shrunk = shrink(&encode(image.clone().into()), to_width, to_height)
            .unwrap()
            .expect("an opaque RGBA PNG takes this path");
        assert_eq!((shrunk.width, shrunk.height), (to_width, to_height));
        let rows_per_strip = STRIP_BYTES / (width as usize * 4);
        assert!(
            height as usize > 2 * rows_per_strip
                && !(height as usize).is_multiple_of(rows_per_strip)
        );
        let mut whole = fir::images::Image::new(to_width, to_height, fir::PixelType::U8x4);
        fir::Resizer::new()
            .resize(&image, &mut whole, &hamming())
            .unwrap();
        let expected: Vec<u8> = whole
            .buffer()
            .chunks_exact(4)
            .flat_map(|pixel| [pixel[0], pixel[1], pixel[2]])
            .collect();
        assert_eq!(shrunk.rgb.len(), expected.len());
        let largest = shrunk
            .rgb
            .iter()
            .zip(&expected)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(largest <= 1, "a channel differs by {largest}");
    }

    #[test]
    fn an_rgb_png_takes_this_path_too() {
        let image = image::DynamicImage::ImageRgba8(busy(3000, 700)).to_rgb8();
        let shrunk = shrink(&encode(image.into()), 1568, 366).unwrap().unwrap();
        assert_eq!(shrunk.rgb.len(), 1568 * 366 * 3);
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
