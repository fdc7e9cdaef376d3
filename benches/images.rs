//! Images shown to the model (issue 22): a big plot decoded, downscaled to the 1568-pixel
//! budget and re-encoded, which is the host's work between a cell's `display_data` and the
//! image content of the result. Baseline in the same run: the path before issue 22 (the image
//! crate's Catmull-Rom resize, then PNG at the image crate's defaults), kept here as it was.
//!
//! Rows: 2600×1800 and 4550×3150 PNGs, a 13×9-inch matplotlib figure (lines with a legend and a
//! grid, a scatter, a histogram, a heatmap) saved at 200 and 350 dpi by `PI_REPL_PYTHON`, or,
//! without it, a synthetic plot of the same sizes drawn here. Each row alternates old and new
//! for `ROUNDS` rounds and prints the medians, the ratio, and the floor both share: decoding
//! the PNG alone.
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
        let (mut old, mut new, mut decode) = (Vec::new(), Vec::new(), Vec::new());
        let mut sizes = (0, 0);
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let before = old_path(&data);
            old.push(elapsed_ms(started));
            let started = Instant::now();
            let after = images::prepare(&data, "image/png", MAX_SIDE, None).expect("prepare");
            new.push(elapsed_ms(started));
            let started = Instant::now();
            let decoded = image::load_from_memory_with_format(&png, ImageFormat::Png).expect("png");
            decode.push(elapsed_ms(started));
            assert_eq!(decoded.dimensions(), (width, height));
            assert_eq!(before.1, (after.width, after.height));
            sizes = (before.0.len(), after.data.len());
        }
        let (old, new, decode) = (median(old), median(new), median(decode));
        println!(
            "  {width}x{height} {source} PNG ({} KB): before {old:.1} ms, now {new:.1} ms, ratio {:.2}x; \
             decoding the PNG alone {decode:.1} ms; base64 out {} KB before, {} KB now",
            png.len() / 1024,
            new / old,
            sizes.0 / 1024,
            sizes.1 / 1024,
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
