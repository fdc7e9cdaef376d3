// Laying text out in columns: tabs, word wrap, clipping — correct at any width, and linear work
// (issue 9: one 30 KB TSV row took 313 ms per render; pi-tui's wrap takes minutes on long lines).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { visibleWidth } from "@mariozechner/pi-tui";
import { clipToWidth, expandTabs, graphemes, graphemeWidth, type Measure, wrapLine } from "../../src/text-wrap.js";

/** A measure that counts its calls and the code units it was given. */
function countingMeasure(): { measure: Measure; calls: number; units: number } {
	const counter = {
		calls: 0,
		units: 0,
		measure: (g: string) => {
			counter.calls++;
			counter.units += g.length;
			return graphemeWidth(g);
		},
	};
	return counter;
}

/** Records the longest string handed to `Intl.Segmenter#segment` while `run` runs. */
function longestSegmented(run: () => void): number {
	const original = Intl.Segmenter.prototype.segment;
	let longest = 0;
	Intl.Segmenter.prototype.segment = function (this: Intl.Segmenter, input: string) {
		longest = Math.max(longest, input.length);
		return original.call(this, input);
	};
	try {
		run();
	} finally {
		Intl.Segmenter.prototype.segment = original;
	}
	return longest;
}

const MIXED = "plain words, 界面 wide ones, e\u0301 combined, 👍🏽 and 👨‍👩‍👧 emoji; ";

describe("tab expansion", () => {
	it("expands to 4-column stops, counting wide characters as two columns", () => {
		assert.equal(expandTabs("a\tbc\td", 4), "a   bc  d");
		assert.equal(expandTabs("界\tx", 4), "界  x");
		assert.equal(expandTabs("\t", 4), "    ");
		assert.equal(expandTabs("no tabs", 4), "no tabs");
	});

	it("measures each grapheme once: a TSV row ten times longer costs ten times the work", () => {
		for (const cell of ["value", "界é"]) {
			const row = Array.from({ length: 3000 }, (_, i) => `${cell}${i}`).join("\t");
			const counter = countingMeasure();
			const expanded = expandTabs(row, 4, counter.measure);
			assert.ok(counter.units <= row.length, `${counter.units} code units measured for a ${row.length}-unit row`);
			assert.equal(expanded.replace(/ +/g, " "), row.replace(/\t/g, " "));
		}
	});
});

describe("graphemes", () => {
	it("windowed segmentation finds the same graphemes as segmenting the whole text at once", () => {
		const text = MIXED.repeat(40);
		const whole = [...new Intl.Segmenter(undefined, { granularity: "grapheme" }).segment(text)].map((s) => [s.index, s.segment]);
		assert.deepEqual(
			[...graphemes(text)].map((g) => [g.index, g.segment]),
			whole,
		);
	});

	it("never hands the segmenter a long string (Node's Intl.Segmenter is quadratic in its input's length)", () => {
		const text = MIXED.repeat(2000);
		let count = 0;
		const longest = longestSegmented(() => {
			for (const _ of graphemes(text)) count++;
		});
		assert.ok(longest <= 512, `the segmenter was given ${longest} code units`);
		assert.ok(count > 0);
		assert.ok(longestSegmented(() => wrapLine(text, 80)) <= 512);
	});
});

describe("wrapping one line", () => {
	it("breaks at the last space that fits, cuts words longer than a row, keeps an empty line", () => {
		assert.deepEqual(wrapLine("hello world foo", 5), ["hello", "world", "foo"]);
		assert.deepEqual(wrapLine("hello world foo", 11), ["hello world", "foo"]);
		assert.deepEqual(wrapLine("aaaaaaaaaaaa", 5), ["aaaaa", "aaaaa", "aa"]);
		assert.deepEqual(wrapLine("a    b", 3), ["a", "b"]);
		assert.deepEqual(wrapLine("", 5), [""]);
		assert.deepEqual(wrapLine("界界界", 3), ["界", "界", "界"]);
		assert.deepEqual(wrapLine("界界", 1), ["…", "…"], "a character wider than the row stands in as one column");
		assert.deepEqual(wrapLine("trailing  ", 20), ["trailing  "]);
	});

	it("no row is wider than the width, and the rows give back the line, at every width from 1 to 60", () => {
		const line = `${MIXED}${"x".repeat(70)} ${MIXED}`;
		for (let width = 1; width <= 60; width++) {
			const rows = wrapLine(line, width);
			for (const row of rows) assert.ok(visibleWidth(row) <= width, `width ${width}: ${JSON.stringify(row)}`);
			const squeeze = (s: string) => s.replace(/ /g, "").replace(/…/g, "");
			if (width >= 2) assert.equal(squeeze(rows.join("")), squeeze(line), `width ${width}`);
		}
	});

	it("measures each grapheme once, however long the line and wherever its spaces are", () => {
		for (const line of ["y".repeat(300_000), "word ".repeat(60_000), MIXED.repeat(3000)]) {
			const counter = countingMeasure();
			const rows = wrapLine(line, 100, counter.measure);
			assert.ok(rows.length >= line.length / 200, `${rows.length} rows`);
			assert.ok(counter.units <= line.length, `${counter.units} code units measured for a ${line.length}-unit line`);
		}
	});
});

describe("clipping", () => {
	it("keeps what fits and marks the cut", () => {
		assert.equal(clipToWidth("hello world", 20), "hello world");
		assert.equal(clipToWidth("hello world", 8), "hello w…");
		assert.equal(clipToWidth("界界界界", 5), "界界…");
		assert.equal(clipToWidth("abc", 0), "");
		assert.ok(visibleWidth(clipToWidth(MIXED.repeat(100), 33)) <= 33);
	});
});
