//! Images for the model: PNG and JPEG outputs become MCP image content within a pixel budget.
//!
//! Owns: decoding, downscaling to the long-side budget, re-encoding, and keeping the original
//! on disk. A plot costs the model a native image, never base64 text.
//!
//! Speed (issue 22): a big plot is shrunk with `fast_image_resize` (SIMD) and a Hamming filter,
//! which downscales as sharply as Catmull-Rom at the cost of a bilinear filter; the image
//! crate's Catmull-Rom took 64 % of the time. An opaque RGBA image (matplotlib's) is resized
//! without the alpha premultiplication it does not need and encoded as RGB. PNG stays PNG
//! (lines and text survive it), JPEG stays JPEG. A big 8-bit RGB or opaque RGBA PNG (a plot)
//! takes the fast path of `png_shrink` instead: decoded row by row while a second thread
//! resizes the rows already decoded, so the whole image is never held. Numbers:
//! `cargo bench --bench images`.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use fast_image_resize as fir;
use image::{DynamicImage, GenericImageView, ImageFormat};

use super::png_shrink;

/// Default longest side, in pixels, of an image shown to the model (current models take this
/// without resampling it again).
pub const DEFAULT_MAX_SIDE: u32 = 1568;

/// Default number of images shown to the model per cell.
pub const DEFAULT_MAX_COUNT: usize = 4;

/// How images are budgeted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageBudget {
    pub max_side: u32,
    pub max_count: usize,
}

impl ImageBudget {
    /// No images: text only (a cell's whole outcome written to a file).
    pub const TEXT_ONLY: ImageBudget = ImageBudget {
        max_side: DEFAULT_MAX_SIDE,
        max_count: 0,
    };
}

impl Default for ImageBudget {
    fn default() -> Self {
        ImageBudget {
            max_side: DEFAULT_MAX_SIDE,
            max_count: DEFAULT_MAX_COUNT,
        }
    }
}

/// An image ready for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedImage {
    /// Base64 of the (possibly downscaled) image.
    pub data: String,
    pub mime: &'static str,
    pub width: u32,
    pub height: u32,
    pub original_width: u32,
    pub original_height: u32,
    /// Where the original bytes were written, if they could be.
    pub original: Option<PathBuf>,
}

impl PreparedImage {
    pub fn downscaled(&self) -> bool {
        self.width != self.original_width || self.height != self.original_height
    }
}

/// Why an image could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the image data is not valid base64")]
    Base64,
    #[error("the image cannot be decoded: {0}")]
    Decode(String),
    #[error("the image cannot be resized: {0}")]
    Resize(String),
    #[error("the image cannot be encoded: {0}")]
    Encode(String),
}

/// Decodes a base64 PNG or JPEG, saves the original as `<save_stem>.<ext>` (best effort), and
/// returns it downscaled so its long side is at most `max_side`.
pub fn prepare(
    base64_data: &str,
    mime: &str,
    max_side: u32,
    save_stem: Option<&Path>,
) -> Result<PreparedImage, ImageError> {
    let cleaned: String = base64_data.split_whitespace().collect();
    let bytes = STANDARD
        .decode(cleaned.as_bytes())
        .map_err(|_| ImageError::Base64)?;
    let (format, mime, ext) = match mime {
        "image/jpeg" => (ImageFormat::Jpeg, "image/jpeg", "jpg"),
        _ => (ImageFormat::Png, "image/png", "png"),
    };
    let original = save_stem.and_then(|stem| {
        let path = stem.with_extension(ext);
        match write_private(&path, &bytes) {
            Ok(()) => Some(path),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "cannot save an image");
                None
            }
        }
    });
    if let Some(prepared) = shrink_big_png(&bytes, format, max_side)? {
        return Ok(PreparedImage {
            original,
            ..prepared
        });
    }
    let decoded = image::load_from_memory_with_format(&bytes, format)
        .map_err(|e| ImageError::Decode(e.to_string()))?;
    let (original_width, original_height) = decoded.dimensions();
    if original_width.max(original_height) <= max_side {
        return Ok(PreparedImage {
            data: STANDARD.encode(&bytes),
            mime,
            width: original_width,
            height: original_height,
            original_width,
            original_height,
            original,
        });
    }
    let (width, height) = fit_within(original_width, original_height, max_side);
    let resized = downscale(&decoded, width, height)?;
    let mut encoded = Cursor::new(Vec::new());
    let written = match format {
        ImageFormat::Jpeg => resized.to_rgb8().write_to(&mut encoded, ImageFormat::Jpeg),
        _ => resized.write_to(&mut encoded, ImageFormat::Png),
    };
    written.map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(PreparedImage {
        data: STANDARD.encode(encoded.into_inner()),
        mime,
        width,
        height,
        original_width,
        original_height,
        original,
    })
}

/// A PNG over the budget that `png_shrink` takes (see there), shrunk to an RGB PNG; `None` for
/// every other image (the whole-image path below takes it).
fn shrink_big_png(
    bytes: &[u8],
    format: ImageFormat,
    max_side: u32,
) -> Result<Option<PreparedImage>, ImageError> {
    if format != ImageFormat::Png {
        return Ok(None);
    }
    let Some((original_width, original_height)) = png_dimensions(bytes) else {
        return Ok(None);
    };
    if original_width.max(original_height) <= max_side {
        return Ok(None);
    }
    let (width, height) = fit_within(original_width, original_height, max_side);
    let shrunk = match png_shrink::shrink(bytes, width, height) {
        Ok(Some(shrunk)) => shrunk,
        Ok(None) => return Ok(None),
        Err(png_shrink::ShrinkError::Decode(error)) => {
            return Err(ImageError::Decode(error.to_string()));
        }
        Err(png_shrink::ShrinkError::Resize(error)) => return Err(ImageError::Resize(error)),
        Err(png_shrink::ShrinkError::Encode(error)) => {
            return Err(ImageError::Encode(error.to_string()));
        }
    };
    Ok(Some(PreparedImage {
        data: STANDARD.encode(shrunk),
        mime: "image/png",
        width,
        height,
        original_width,
        original_height,
        original: None,
    }))
}

/// A PNG's width and height from its header, or `None` if the header does not read (the
/// whole-image path then reports why).
fn png_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    let info = decoder.read_header_info().ok()?;
    Some((info.width, info.height))
}

/// The size of a `width`×`height` image scaled so its long side is `max_side` (the short side
/// rounded, at least 1 pixel): the image crate's `resize` rule, kept.
fn fit_within(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let scale = |side: u32, long: u32| {
        ((f64::from(side) * f64::from(max_side) / f64::from(long)).round() as u32).max(1)
    };
    if width >= height {
        (max_side, scale(height, width))
    } else {
        (scale(width, height), max_side)
    }
}

/// `image` resized to `width`×`height` with a Hamming filter (a convolution that covers every
/// source pixel, so a 1-pixel line of a plot stays visible). An opaque RGBA image skips the
/// premultiplication by alpha (it would change nothing) and comes out as RGB (it encodes faster).
fn downscale(image: &DynamicImage, width: u32, height: u32) -> Result<DynamicImage, ImageError> {
    let opaque =
        matches!(image, DynamicImage::ImageRgba8(rgba) if png_shrink::is_opaque(rgba.as_raw()));
    // PNG and JPEG decode to 8 or 16 bits; floats have no fast path (a safety net).
    let widened;
    let source = match image {
        DynamicImage::ImageRgb32F(_) | DynamicImage::ImageRgba32F(_) => {
            widened = DynamicImage::ImageRgba16(image.to_rgba16());
            &widened
        }
        _ => image,
    };
    let mut resized = DynamicImage::new(width, height, source.color());
    let options = fir::ResizeOptions::new()
        .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Hamming))
        .use_alpha(!opaque);
    fir::Resizer::new()
        .resize(source, &mut resized, &options)
        .map_err(|e| ImageError::Resize(e.to_string()))?;
    if opaque {
        resized = DynamicImage::ImageRgb8(resized.to_rgb8());
    }
    Ok(resized)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        crate::fsutil::create_private_dir(parent).map_err(std::io::Error::other)?;
    }
    crate::fsutil::write_output(path, bytes).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> String {
        let image = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
        });
        let mut bytes = Cursor::new(Vec::new());
        image.write_to(&mut bytes, ImageFormat::Png).unwrap();
        STANDARD.encode(bytes.into_inner())
    }

    #[test]
    fn a_small_image_passes_unchanged() {
        let data = png(100, 50);
        let prepared = prepare(&data, "image/png", 1568, None).unwrap();
        assert_eq!((prepared.width, prepared.height), (100, 50));
        assert!(!prepared.downscaled());
        assert_eq!(prepared.data, data);
    }

    #[test]
    fn a_large_image_is_downscaled_to_the_budget_keeping_its_shape() {
        let tmp = tempfile::tempdir().unwrap();
        let stem = tmp.path().join("out/cell1-1");
        let prepared = prepare(&png(3000, 1500), "image/png", 1568, Some(&stem)).unwrap();
        assert_eq!((prepared.width, prepared.height), (1568, 784));
        assert_eq!(
            (prepared.original_width, prepared.original_height),
            (3000, 1500)
        );
        let saved = prepared.original.unwrap();
        assert_eq!(saved, tmp.path().join("out/cell1-1.png"));
        let reloaded = image::open(saved).unwrap();
        assert_eq!(reloaded.dimensions(), (3000, 1500));
        let shown = STANDARD.decode(prepared.data).unwrap();
        assert_eq!(
            image::load_from_memory(&shown).unwrap().dimensions(),
            (1568, 784)
        );
    }

    fn encoded(image: DynamicImage, format: ImageFormat) -> String {
        let mut bytes = Cursor::new(Vec::new());
        image.write_to(&mut bytes, format).unwrap();
        STANDARD.encode(bytes.into_inner())
    }

    fn shown(prepared: &PreparedImage) -> DynamicImage {
        image::load_from_memory(&STANDARD.decode(&prepared.data).unwrap()).unwrap()
    }

    #[test]
    fn a_tall_image_keeps_its_shape_and_the_rounding_of_the_image_crate() {
        let prepared = prepare(&png(1001, 3137), "image/png", 1568, None).unwrap();
        assert_eq!((prepared.width, prepared.height), (500, 1568));
        assert_eq!(shown(&prepared).dimensions(), (500, 1568));
        assert_eq!(fit_within(4550, 3150, 1568), (1568, 1086));
        assert_eq!(fit_within(2600, 1800, 1568), (1568, 1086));
        assert_eq!(fit_within(100_000, 10, 1568), (1568, 1));
    }

    /// Issue 22: the fast resize keeps colours; an opaque RGBA plot (matplotlib's) comes back
    /// as an RGB PNG of the same colour.
    #[test]
    fn a_downscaled_solid_colour_keeps_its_colour_and_an_opaque_png_becomes_rgb() {
        let colour = image::Rgba([31, 119, 180, 255]);
        let solid = DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(4550, 3150, colour));
        let prepared = prepare(&encoded(solid, ImageFormat::Png), "image/png", 1568, None).unwrap();
        assert_eq!(prepared.mime, "image/png");
        let shown = shown(&prepared);
        assert_eq!(shown.color(), image::ColorType::Rgb8);
        assert_eq!(shown.dimensions(), (1568, 1086));
        for pixel in shown.to_rgb8().pixels() {
            assert_eq!(pixel.0, [31, 119, 180]);
        }
    }

    #[test]
    fn a_downscaled_gradient_keeps_its_values_where_they_were() {
        let gradient = image::RgbImage::from_fn(3136, 2000, |x, y| {
            image::Rgb([(x * 255 / 3135) as u8, (y * 255 / 1999) as u8, 77])
        });
        let data = encoded(DynamicImage::ImageRgb8(gradient), ImageFormat::Png);
        let shown = shown(&prepare(&data, "image/png", 1568, None).unwrap()).to_rgb8();
        assert_eq!(shown.dimensions(), (1568, 1000));
        for (x, y) in [(0, 0), (784, 500), (1567, 999), (300, 900), (1200, 100)] {
            let expected = [(x * 2 * 255 / 3135) as i32, (y * 2 * 255 / 1999) as i32, 77];
            let got = shown.get_pixel(x, y).0;
            for channel in 0..3 {
                let difference = (i32::from(got[channel]) - expected[channel]).abs();
                assert!(
                    difference <= 3,
                    "at ({x}, {y}): {got:?} against {expected:?}"
                );
            }
        }
    }

    /// A plot's 1-pixel lines stay visible after a 2.9x reduction: each is still at least 25
    /// levels darker than the white around it (a filter that skipped source pixels would lose
    /// some; any faithful one spreads a line's ink over about 2 rows, so ~210 is expected).
    #[test]
    fn thin_lines_of_a_plot_survive_the_downscale() {
        let plot = image::RgbImage::from_fn(4550, 3150, |x, y| {
            if y % 97 == 0 || x % 89 == 0 {
                image::Rgb([0, 0, 0])
            } else {
                image::Rgb([255, 255, 255])
            }
        });
        let data = encoded(DynamicImage::ImageRgb8(plot), ImageFormat::Png);
        let shown = shown(&prepare(&data, "image/png", 1568, None).unwrap()).to_luma8();
        let scale = 1568.0 / 4550.0;
        for line in (0..3150).step_by(97) {
            let row = ((line as f64 + 0.5) * scale) as u32;
            let darkest = (row.saturating_sub(1)..=(row + 1).min(1085))
                .map(|y| shown.get_pixel(700, y).0[0])
                .min()
                .unwrap();
            assert!(darkest <= 230, "the line at y={line} faded to {darkest}");
        }
    }

    #[test]
    fn transparency_is_kept_and_transparent_pixels_do_not_bleed_their_colour() {
        let half = image::RgbaImage::from_fn(3200, 1600, |x, _| {
            if x < 1600 {
                image::Rgba([200, 30, 30, 255])
            } else {
                image::Rgba([0, 255, 0, 0])
            }
        });
        let data = encoded(DynamicImage::ImageRgba8(half), ImageFormat::Png);
        let shown = shown(&prepare(&data, "image/png", 1568, None).unwrap());
        assert_eq!(shown.color(), image::ColorType::Rgba8);
        let shown = shown.to_rgba8();
        assert_eq!(shown.dimensions(), (1568, 784));
        let edge = shown.get_pixel(782, 392).0;
        assert!(
            edge[1] < 60,
            "green from transparent pixels bled in: {edge:?}"
        );
        assert_eq!(shown.get_pixel(200, 392).0, [200, 30, 30, 255]);
        assert_eq!(shown.get_pixel(1400, 392).0[3], 0);
    }

    /// Issue 22: the row-by-row path hands an image back when it meets a transparent pixel,
    /// even in the last row; the whole-image path then keeps the alpha channel.
    #[test]
    fn a_big_png_transparent_only_in_its_last_row_keeps_its_alpha() {
        let mut plot = image::RgbaImage::from_pixel(3200, 1600, image::Rgba([200, 30, 30, 255]));
        for x in 3000..3200 {
            plot.put_pixel(x, 1599, image::Rgba([0, 255, 0, 0]));
        }
        let data = encoded(DynamicImage::ImageRgba8(plot), ImageFormat::Png);
        let shown = shown(&prepare(&data, "image/png", 1568, None).unwrap());
        assert_eq!(shown.color(), image::ColorType::Rgba8);
        assert_eq!(shown.dimensions(), (1568, 784));
        assert_eq!(shown.to_rgba8().get_pixel(100, 100).0, [200, 30, 30, 255]);
    }

    /// A big PNG the row-by-row path does not take (grey) is downscaled the whole-image way.
    #[test]
    fn a_big_grey_png_is_downscaled_too() {
        let grey = image::GrayImage::from_pixel(3136, 1000, image::Luma([90]));
        let data = encoded(DynamicImage::ImageLuma8(grey), ImageFormat::Png);
        let prepared = prepare(&data, "image/png", 1568, None).unwrap();
        assert_eq!((prepared.width, prepared.height), (1568, 500));
        assert_eq!(shown(&prepared).to_luma8().get_pixel(700, 250).0, [90]);
    }

    /// A big PNG cut short in its pixels is an error, not a panic or a hang.
    #[test]
    fn a_big_truncated_png_is_a_decode_error() {
        let bytes = STANDARD.decode(png(3000, 1500)).unwrap();
        let cut = STANDARD.encode(&bytes[..bytes.len() / 2]);
        assert!(matches!(
            prepare(&cut, "image/png", 1568, None),
            Err(ImageError::Decode(_))
        ));
    }

    #[test]
    fn a_jpeg_stays_a_jpeg_of_about_the_same_colour() {
        let photo = image::RgbImage::from_pixel(3000, 2000, image::Rgb([120, 160, 90]));
        let data = encoded(DynamicImage::ImageRgb8(photo), ImageFormat::Jpeg);
        let prepared = prepare(&data, "image/jpeg", 1568, None).unwrap();
        assert_eq!(prepared.mime, "image/jpeg");
        let bytes = STANDARD.decode(&prepared.data).unwrap();
        assert_eq!(image::guess_format(&bytes).unwrap(), ImageFormat::Jpeg);
        let shown = image::load_from_memory(&bytes).unwrap().to_rgb8();
        assert_eq!(shown.dimensions(), (1568, 1045));
        let centre = shown.get_pixel(784, 522).0;
        for (got, expected) in centre.iter().zip([120u8, 160, 90]) {
            assert!(got.abs_diff(expected) <= 4, "{centre:?}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            prepare("%%%", "image/png", 10, None),
            Err(ImageError::Base64)
        ));
        let not_png = STANDARD.encode(b"hello");
        assert!(matches!(
            prepare(&not_png, "image/png", 10, None),
            Err(ImageError::Decode(_))
        ));
    }
}
