//! Images shown to the model (issue 22): a big plot decoded, downscaled to the 1568-pixel
//! budget and re-encoded, which is the host's work between a cell's `display_data` and the
//! image content of the result. Baselines in the same run, kept here as they were: the path
//! before issue 22 (the image crate's Catmull-Rom resize, then PNG at the image crate's
//! defaults), and the whole-image path (the PNG decoded whole, then `fast_image_resize`'s
//! Hamming resize), which `images::prepare` still takes for every image the row-by-row path of
//! `png_shrink` does not.
//!
//! Rows: 2600×1800 and 4550×3150 PNGs, a 13×9-inch matplotlib figure (lines with a legend and a
//! grid, a scatter, a histogram, a heatmap) saved at 200 and 350 dpi by `PI_REPL_PYTHON`, or,
//! without it, a synthetic plot of the same sizes drawn here. Each row alternates old and new
//! for `ROUNDS` rounds and prints the medians, the ratios, how far the result is from the
//! whole-image path's (largest difference of a channel, PSNR), and the floors: decoding the
//! whole PNG (the image crate), decoding its rows alone (inflate and unfilter, nothing kept),
//! inflating its IDAT alone (`flate2`, into a reused buffer).
//!
//! Run: `PI_REPL_PYTHON=target/test-home/venv/bin/python cargo bench --bench images`.

use std::io::Cursor;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use image::{GenericImageView, ImageFormat};
use pi_repl::view::images;

const SIZES: [(u32, u32); 2] = [(2600, 1800), (4550, 3150)];
const ROUNDS: usize = 21;
const MAX_SIDE: u32 = images::DEFAULT_MAX_SIDE;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("images: benchmark");
        return;
    }
    let dir = tempfile::tempdir().expect("temp");
    let python = std::env::var_os("PI_REPL_PYTHON");
    println!(
        "an image for the model: base64 PNG in, decoded, downscaled to {MAX_SIDE} px, re-encoded, base64 out; median of {ROUNDS} alternating rounds"
    );
    for (width, height) in SIZES {
        let (png, source) = match &python {
            Some(python) => (
                matplotlib_plot(Path::new(python), dir.path(), width),
                "matplotlib",
            ),
            None => (synthetic_plot(width, height), "synthetic"),
        };
        let data = STANDARD.encode(&png);
        let idat = idat(&png);
        let mut times = [(); 6].map(|_| Vec::new());
        let mut outputs = (String::new(), String::new(), String::new());
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let before = old_path(&data);
            times[0].push(elapsed_ms(started));
            let started = Instant::now();
            let whole = whole_image_path(&data);
            times[1].push(elapsed_ms(started));
            let started = Instant::now();
            let now = images::prepare(&data, "image/png", MAX_SIDE, None).expect("prepare");
            times[2].push(elapsed_ms(started));
            let started = Instant::now();
            let decoded = image::load_from_memory_with_format(&png, ImageFormat::Png).expect("png");
            times[3].push(elapsed_ms(started));
            assert_eq!(decoded.dimensions(), (width, height));
            drop(decoded);
            let started = Instant::now();
            let rows = decode_rows(&png);
            times[4].push(elapsed_ms(started));
            assert_eq!(rows, height);
            let started = Instant::now();
            let inflated = inflate(&idat);
            times[5].push(elapsed_ms(started));
            assert_eq!(inflated, u64::from(height) * (u64::from(width) * 4 + 1));
            assert_eq!(before.1, (now.width, now.height));
            outputs = (before.0, whole, now.data);
        }
        let [old, whole, now, decode, rows, inflate] = times.map(median);
        let (max_diff, psnr) = compare(&outputs.1, &outputs.2);
        println!(
            "  {width}x{height} {source} PNG ({} KB):\n    \
             before {old:.1} ms, whole-image path {whole:.1} ms, now {now:.1} ms; \
             now/before {:.2}x, now/whole-image {:.2}x\n    \
             floors: decoding the whole PNG {decode:.1} ms, decoding its rows alone {rows:.1} ms, \
             inflating its IDAT alone {inflate:.1} ms\n    \
             now against the whole-image path: largest channel difference {max_diff}, PSNR {psnr:.1} dB; \
             base64 out {} KB before, {} KB whole-image, {} KB now",
            png.len() / 1024,
            now / old,
            now / whole,
            outputs.0.len() / 1024,
            outputs.1.len() / 1024,
            outputs.2.len() / 1024,
        );
    }
}

/// `images::prepare` before issue 22, for a PNG that needs downscaling: the base64 result and
/// its dimensions.
fn old_path(data: &str) -> (String, (u32, u32)) {
    let cleaned: String = data.split_whitespace().collect();
    let bytes = STANDARD.decode(cleaned.as_bytes()).expect("base64");
    let decoded = image::load_from_memory_with_format(&bytes, ImageFormat::Png).expect("png");
    let resized = decoded.resize(MAX_SIDE, MAX_SIDE, image::imageops::FilterType::CatmullRom);
    let mut encoded = Cursor::new(Vec::new());
    resized
        .write_to(&mut encoded, ImageFormat::Png)
        .expect("encode");
    (STANDARD.encode(encoded.into_inner()), resized.dimensions())
}

/// `images::prepare` before the row-by-row path, for an opaque RGBA PNG that needs
/// downscaling: decoded whole, resized with `fast_image_resize` (Hamming, no alpha), encoded
/// as RGB.
fn whole_image_path(data: &str) -> String {
    use fast_image_resize as fir;
    let cleaned: String = data.split_whitespace().collect();
    let bytes = STANDARD.decode(cleaned.as_bytes()).expect("base64");
    let decoded = image::load_from_memory_with_format(&bytes, ImageFormat::Png).expect("png");
    let (width, height) = decoded.dimensions();
    let (width, height) = if width >= height {
        let short = (f64::from(height) * f64::from(MAX_SIDE) / f64::from(width)).round();
        (MAX_SIDE, short as u32)
    } else {
        let short = (f64::from(width) * f64::from(MAX_SIDE) / f64::from(height)).round();
        (short as u32, MAX_SIDE)
    };
    let mut resized = image::DynamicImage::new(width, height, decoded.color());
    let options = fir::ResizeOptions::new()
        .resize_alg(fir::ResizeAlg::Convolution(fir::FilterType::Hamming))
        .use_alpha(false);
    fir::Resizer::new()
        .resize(&decoded, &mut resized, &options)
        .expect("resize");
    let mut encoded = Cursor::new(Vec::new());
    image::DynamicImage::ImageRgb8(resized.to_rgb8())
        .write_to(&mut encoded, ImageFormat::Png)
        .expect("encode");
    STANDARD.encode(encoded.into_inner())
}

/// Decodes every row of `png` (inflate and unfilter) and keeps none: the floor of any path
/// that decodes with the `png` crate. The number of rows.
fn decode_rows(png: &[u8]) -> u32 {
    let mut decoder = png::Decoder::new(Cursor::new(png));
    decoder.set_transformations(png::Transformations::IDENTITY);
    let mut reader = decoder.read_info().expect("png");
    let mut rows = 0;
    while let Some(row) = reader.next_row().expect("row") {
        std::hint::black_box(row.data());
        rows += 1;
    }
    rows
}

/// The IDAT chunks of `png`, joined: its zlib stream.
fn idat(png: &[u8]) -> Vec<u8> {
    let mut joined = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let length = u32::from_be_bytes(png[at..at + 4].try_into().expect("length")) as usize;
        if &png[at + 4..at + 8] == b"IDAT" {
            joined.extend_from_slice(&png[at + 8..at + 8 + length]);
        }
        at += 12 + length;
    }
    joined
}

/// Inflates a zlib stream into a reused 1 MiB buffer: the floor of decoding it (no unfilter,
/// nothing kept). The number of bytes it holds.
fn inflate(zlib: &[u8]) -> u64 {
    let mut out = vec![0; 1 << 20];
    let mut inflater = flate2::Decompress::new(true);
    loop {
        let consumed = inflater.total_in() as usize;
        let status = inflater
            .decompress(&zlib[consumed..], &mut out, flate2::FlushDecompress::None)
            .expect("inflate");
        if status == flate2::Status::StreamEnd {
            return inflater.total_out();
        }
    }
}

/// The largest difference of one channel between two base64 PNGs of the same size, and the
/// PSNR in dB.
fn compare(a: &str, b: &str) -> (u8, f64) {
    let load = |data: &str| {
        image::load_from_memory(&STANDARD.decode(data).expect("base64"))
            .expect("png")
            .to_rgb8()
    };
    let (a, b) = (load(a), load(b));
    assert_eq!(a.dimensions(), b.dimensions());
    let mut largest = 0;
    let mut squares = 0.0;
    for (x, y) in a.as_raw().iter().zip(b.as_raw()) {
        let difference = x.abs_diff(*y);
        largest = largest.max(difference);
        squares += f64::from(difference).powi(2);
    }
    let mse = squares / a.as_raw().len() as f64;
    (largest, 10.0 * (255.0 * 255.0 / mse).log10())
}

/// A 13×9-inch matplotlib figure saved `width` pixels wide.
fn matplotlib_plot(python: &Path, dir: &Path, width: u32) -> Vec<u8> {
    let path = dir.join(format!("plot-{width}.png"));
    let status = Command::new(python)
        .args(["-c", MATPLOTLIB_PLOT, &width.to_string()])
        .arg(&path)
        .status()
        .expect("python");
    assert!(status.success(), "matplotlib could not draw the plot");
    std::fs::read(&path).expect("the plot")
}

const MATPLOTLIB_PLOT: &str = r#"
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

width, path = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
fig, axes = plt.subplots(2, 2, figsize=(13, 9), dpi=width / 13)
x = np.linspace(0, 10, 2000)
for k in range(6):
    axes[0, 0].plot(x, np.sin(x * (k + 1) / 3) + k * 0.3, lw=1.5, label=f"series {k}")
axes[0, 0].legend()
axes[0, 0].grid(True)
axes[0, 0].set_title("lines")
axes[0, 1].scatter(rng.normal(size=3000), rng.normal(size=3000), s=6, c=rng.random(3000))
axes[0, 1].set_title("scatter")
axes[1, 0].hist(rng.normal(size=20000), bins=80)
axes[1, 0].set_title("histogram")
yy, xx = np.mgrid[0:120, 0:160]
field = np.sin(xx / 9) * np.cos(yy / 13) + 0.2 * rng.random((120, 160))
axes[1, 1].imshow(field, cmap="magma")
axes[1, 1].set_title("heatmap")
fig.savefig(path)
"#;

/// A plot-like RGBA image without Python: white, a grey grid, six thick sine curves in
/// matplotlib's colours, a block of noise standing in for a heatmap.
fn synthetic_plot(width: u32, height: u32) -> Vec<u8> {
    const COLOURS: [[u8; 3]; 6] = [
        [31, 119, 180],
        [255, 127, 14],
        [44, 160, 44],
        [214, 39, 40],
        [148, 103, 189],
        [140, 86, 75],
    ];
    let line = (width / 800).max(1) as f64;
    let mut noise = 0x2545_f491_u32;
    let plot = image::RgbaImage::from_fn(width, height, |x, y| {
        let (fx, fy) = (
            f64::from(x) / f64::from(width),
            f64::from(y) / f64::from(height),
        );
        if fx > 0.55 && fy > 0.55 && fx < 0.9 && fy < 0.9 {
            noise ^= noise << 13;
            noise ^= noise >> 17;
            noise ^= noise << 5;
            let v = ((fx * 40.0).sin() * (fy * 30.0).cos() * 100.0 + 128.0) as u8;
            return image::Rgba([v, (noise & 63) as u8, 255 - v, 255]);
        }
        for (k, colour) in COLOURS.iter().enumerate() {
            let curve = 0.25 + 0.04 * k as f64 + 0.15 * (fx * (k + 1) as f64 * 6.0).sin();
            if ((fy - curve) * f64::from(height)).abs() < line {
                return image::Rgba([colour[0], colour[1], colour[2], 255]);
            }
        }
        if x % (width / 10) == 0 || y % (height / 8) == 0 {
            return image::Rgba([176, 176, 176, 255]);
        }
        image::Rgba([255, 255, 255, 255])
    });
    let mut bytes = Cursor::new(Vec::new());
    plot.write_to(&mut bytes, ImageFormat::Png).expect("png");
    bytes.into_inner()
}

fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
