// The cells every client test runs, and reading what the model received for each.
//
// One script for both clients, so their results compare line by line: a print (its text must
// reach the model), an expression over the state the first cell left (its value must), a cell
// that raises (its traceback must), and a plot wider than the image budget (it must arrive as
// an image of at most 1568 px per side), and a cell that prints nothing (issue 22: it must read
// as an empty result).

import assert from "node:assert/strict";
import { pngSize } from "./png.mjs";

/** The pixel budget pi-repl downscales images to (its default `--image-max-side`). */
export const IMAGE_MAX_SIDE = 1568;

export const CELLS = {
	print: "x = 41; print('set')",
	expression: "x + 1",
	raises: "def divide(a, b):\n    return a / b\n\ndivide(x, 0)",
	// 20 x 10 inches at 100 dpi: about 2000 x 1000 px before pi-repl downscales it.
	plot: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(20, 10), dpi=100)\nax.plot([1, 3, 2])\nplt.show()",
	silent: "y = x",
};

/** The calls of the scripted model, in order. */
export const SCRIPT = [CELLS.print, CELLS.expression, CELLS.raises, CELLS.plot, CELLS.silent].map((code) => ({ code }));

/** All text parts of a recorded tool result, joined. */
export function textOf(result) {
	return result.content
		.filter((part) => part.type === "text")
		.map((part) => part.text)
		.join("\n");
}

/** The images of a recorded tool result as `{ mimeType, data }` (base64). */
export function imagesOf(result) {
	return result.content.filter((part) => part.type === "image");
}

/** The print's text, on a line of its own (not inside a JSON summary). */
export function assertPrintedText(result) {
	const text = textOf(result);
	assert.match(text, /^set$/m, `the printed text reaches the model; it received:\n${text}`);
}

/** The value of `x + 1` over the state the first call left, on a line of its own. */
export function assertExpressionValue(result) {
	const text = textOf(result);
	assert.match(text, /^42$/m, `the value of the last expression reaches the model; it received:\n${text}`);
}

/** The error's name, a traceback, and the failing line inside the function the cell defined. */
export function assertTraceback(result) {
	const text = textOf(result);
	assert.match(text, /ZeroDivisionError/, `the error name reaches the model; it received:\n${text}`);
	assert.match(text, /Traceback/, `a traceback reaches the model; it received:\n${text}`);
	assert.match(text, /return a \/ b/, `the traceback shows the failing line; it received:\n${text}`);
}

/** Exactly one PNG, downscaled so its long side is the pixel budget. */
export function assertOneImage(result) {
	const images = imagesOf(result);
	assert.equal(images.length, 1, `the plot reaches the model as one image; it received:\n${JSON.stringify(summarise(result))}`);
	assert.equal(images[0].mimeType, "image/png");
	const { width, height } = pngSize(images[0].data);
	assert.ok(width <= IMAGE_MAX_SIDE && height <= IMAGE_MAX_SIDE, `the image fits ${IMAGE_MAX_SIDE} px per side: ${width}×${height}`);
	assert.equal(Math.max(width, height), IMAGE_MAX_SIDE, `a 2000 px wide plot is downscaled to exactly ${IMAGE_MAX_SIDE} px: ${width}×${height}`);
}

/** The downscaled image's caption (both sizes, the original's path) in the text next to it. */
export function assertImageCaption(result) {
	const text = textOf(result);
	assert.match(text, /\[image 1: downscaled from \d+×\d+ to \d+×\d+; original: \//, `the image's caption reaches the model; it received:\n${JSON.stringify(summarise(result))}`);
}

/** A silent cell's result reads as empty: `texts` are all the text parts the model got. */
export function assertSilent(result, texts) {
	assert.deepEqual(textOf(result).split("\n").filter((line) => line !== ""), texts, JSON.stringify(summarise(result)));
	assert.equal(imagesOf(result).length, 0);
}

/** A tool result with image data shortened, for failure messages. */
export function summarise(result) {
	return result.content.map((part) => (part.type === "image" ? { ...part, data: `${part.data?.length ?? 0} base64 chars` } : part));
}
