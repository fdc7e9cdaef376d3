//! Images for the model: PNG and JPEG outputs become MCP image content within a pixel budget.
//!
//! Owns: decoding, downscaling to the long-side budget, re-encoding, and keeping the original
//! on disk. A plot costs the model a native image, never base64 text.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{GenericImageView, ImageFormat};

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
    let resized = decoded.resize(max_side, max_side, image::imageops::FilterType::CatmullRom);
    let (width, height) = resized.dimensions();
    let mut encoded = Cursor::new(Vec::new());
    let written = if format == ImageFormat::Jpeg {
        resized.to_rgb8().write_to(&mut encoded, ImageFormat::Jpeg)
    } else {
        resized.write_to(&mut encoded, ImageFormat::Png)
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
