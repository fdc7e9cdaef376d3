// Laying plain text out in terminal columns: tab expansion and word wrapping, in linear time.
//
// Owns: measuring text grapheme by grapheme (pi-tui's widths: wide CJK, emoji, zero-width marks),
// expanding tabs to fixed stops, and cutting a line into rows of at most a given width. Does not
// own: escape sequences or control characters (render.ts removes them first; this text has none)
// or colour (applied to whole rows afterwards).
//
// Invariants: every grapheme is measured once and each piece of text is copied a bounded number
// of times, so the work is linear in the text's length whatever its shape (pi-tui's
// `wrapTextWithAnsi` took 129 ms for one 30 KB line without spaces and 82 s for 300 KB, and the
// old tab expansion re-measured the line at every tab: 313 ms for a 30 KB TSV row); no row is
// wider than the width asked for; a line's rows, joined, give the line back except for the spaces
// a row was broken at.

import { visibleWidth } from "@mariozechner/pi-tui";

/** Measures one grapheme in terminal columns. */
export type Measure = (grapheme: string) => number;

const segmenter = new Intl.Segmenter(undefined, { granularity: "grapheme" });
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
/**
 * Code units segmented at a time. Node 20's `Intl.Segmenter` takes time quadratic in the length of
 * the string it iterates (40 000 characters: 0.2 s; 300 000: minutes), so text is segmented in
 * windows of this size, each window's last grapheme (possibly cut) carried into the next.
 */
const SEGMENT_WINDOW = 512;

/** pi-tui's width of one grapheme (its `visibleWidth` sums exactly these). */
export const graphemeWidth: Measure = (grapheme) => (grapheme.length === 1 && PRINTABLE_ASCII.test(grapheme) ? 1 : visibleWidth(grapheme));

/** The graphemes of `text` with their offsets, in linear time (printable ASCII by character). */
export function* graphemes(text: string): Generator<{ segment: string; index: number }> {
	if (PRINTABLE_ASCII.test(text)) {
		for (let index = 0; index < text.length; index++) yield { segment: text.charAt(index), index };
		return;
	}
	let start = 0;
	while (start < text.length) {
		const end = Math.min(text.length, start + SEGMENT_WINDOW);
		let last: { segment: string; index: number } | undefined;
		let yielded = 0;
		for (const { segment, index } of segmenter.segment(text.slice(start, end))) {
			if (last) {
				yield last;
				yielded++;
			}
			last = { segment, index: start + index };
		}
		if (!last) return;
		if (end === text.length || yielded === 0) {
			// The text's last grapheme, or one longer than a whole window: take it as it is.
			yield last;
			start = last.index + last.segment.length;
		} else start = last.index;
	}
}

/** The longest start of `text` that fits `width` columns, with `ellipsis` when it was cut. */
export function clipToWidth(text: string, width: number, ellipsis = "…", measure: Measure = graphemeWidth): string {
	const max = Math.max(0, Math.floor(width));
	const room = max - measure(ellipsis);
	let used = 0;
	let fitsWithEllipsis = 0;
	for (const { segment, index } of graphemes(text)) {
		const w = measure(segment);
		if (used + w <= room) fitsWithEllipsis = index + segment.length;
		used += w;
		if (used > max) return room >= 0 ? text.slice(0, fitsWithEllipsis) + ellipsis : "";
	}
	return text;
}

/** Expands each tab to the next multiple of `tabStop` columns. */
export function expandTabs(line: string, tabStop: number, measure: Measure = graphemeWidth): string {
	if (!line.includes("\t")) return line;
	const out: string[] = [];
	let column = 0;
	for (const { segment } of graphemes(line)) {
		if (segment === "\t") {
			const pad = tabStop - (column % tabStop);
			out.push(" ".repeat(pad));
			column += pad;
		} else {
			out.push(segment);
			column += measure(segment);
		}
	}
	return out.join("");
}

/** Stands in for a grapheme wider than the whole row (a wide character at width 1). */
const TOO_WIDE = "…";

/**
 * Cuts one line (no newlines) into rows of at most `width` columns: at the last space that fits
 * (the space is dropped), or inside a word longer than a row. An empty line is one empty row.
 */
export function wrapLine(line: string, width: number, measure: Measure = graphemeWidth): string[] {
	const max = Math.max(1, Math.floor(width));
	const rows: string[] = [];
	let rowStart = 0;
	let rowWidth = 0;
	/** True once the current row holds something other than spaces. */
	let rowHasWord = false;
	/** True after a break at a space: spaces that would open the next row are dropped. */
	let dropSpaces = false;
	/** The last space after a word in the current row: the row may end there, the next begin after it. */
	let spaceAt = -1;
	let afterSpace = -1;
	/** Width of the current row's text after that space. */
	let widthAfterSpace = 0;
	/** Ends the current row at `end` (spaces before a break dropped); the next starts at `next`. */
	const push = (end: number, next: number) => {
		const row = line.slice(rowStart, end);
		rows.push(end < line.length ? row.replace(/ +$/, "") : row);
		rowStart = next;
		rowWidth = 0;
		rowHasWord = false;
		spaceAt = -1;
	};
	for (const { segment, index } of graphemes(line)) {
		const end = index + segment.length;
		if (segment === " ") {
			if (dropSpaces) {
				rowStart = end;
				continue;
			}
			if (rowWidth + 1 > max) {
				// The row is full at a space: end it here.
				push(index, end);
				dropSpaces = true;
				continue;
			}
			rowWidth += 1;
			if (rowHasWord) {
				spaceAt = index;
				afterSpace = end;
				widthAfterSpace = 0;
			}
			continue;
		}
		dropSpaces = false;
		const w = measure(segment);
		if (rowWidth + w > max) {
			if (spaceAt >= 0) {
				// Break at the last space; the word after it moves to the next row.
				const carried = widthAfterSpace;
				push(spaceAt, afterSpace);
				rowWidth = carried;
				rowHasWord = carried > 0 || afterSpace < index;
			}
			if (rowWidth + w > max && rowStart < index) {
				// A word longer than a row: cut it.
				push(index, index);
			}
			if (w > max) {
				rows.push(TOO_WIDE);
				rowStart = end;
				continue;
			}
		}
		rowWidth += w;
		rowHasWord = true;
		if (spaceAt >= 0) widthAfterSpace += w;
	}
	if (rowStart < line.length || rows.length === 0) push(line.length, line.length);
	return rows;
}
