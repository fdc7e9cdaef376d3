// The TUI view of a call: compact header and tail, full code and output on expand, any width.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { visibleWidth } from "@mariozechner/pi-tui";
import {
	bodyLines,
	type CallView,
	codeSummary,
	DrawnLines,
	formatDuration,
	headerLine,
	type RenderTheme,
	sanitize,
} from "../../src/render.js";

const plain: RenderTheme = { fg: (_c, t) => t, bold: (t) => t };
const colours: RenderTheme = { fg: (_c, t) => `\x1b[33m${t}\x1b[39m`, bold: (t) => `\x1b[1m${t}\x1b[22m` };
const strip = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, "");

const CODE = "import numpy as np\narr = np.arange(10)\nprint(arr.sum())";
const OUTPUT = Array.from({ length: 12 }, (_, i) => `line ${i + 1} ${"x".repeat(i * 9)}`).join("\n");

function view(over: Partial<CallView> = {}): CallView {
	return { code: CODE, status: "ok", durationMs: 1234, output: OUTPUT, expanded: false, ...over };
}

describe("header", () => {
	it("shows status, duration and the first line of code at a wide width", () => {
		const line = headerLine(view(), 120, plain);
		assert.equal(line, "✓ execute 1.2s  import numpy as np (+2 lines)");
	});

	it("fits 30 columns, cutting the code and keeping status and duration", () => {
		const line = headerLine(view(), 30, plain);
		assert.ok(visibleWidth(line) <= 30, line);
		assert.match(strip(line), /^✓ execute 1\.2s {2}import num.*…$/);
	});

	it("names non-ok states in words", () => {
		assert.match(headerLine(view({ status: "error" }), 80, plain), /^✗ execute 1\.2s/);
		assert.match(headerLine(view({ status: "running", durationMs: undefined }), 80, plain), /^● execute running {2}import/);
		assert.match(headerLine(view({ status: "died" }), 80, plain), /^✗ execute kernel died 1\.2s/);
		assert.match(headerLine(view({ status: "stopped" }), 80, plain), /^! execute pi-repl stopped/);
		assert.match(headerLine(view({ status: "cancelled" }), 80, plain), /^⊘ execute cancelled/);
	});

	it("counts the other lines of code, singular for one", () => {
		assert.match(headerLine(view({ code: "a = 1\nb = 2" }), 80, plain), /a = 1 \(\+1 line\)$/);
		assert.match(headerLine(view({ code: "a = 1" }), 80, plain), /a = 1$/);
	});

	it("skips leading blank lines of code", () => {
		assert.deepEqual(codeSummary("\n\n  x = 1\ny = 2\n"), { first: "x = 1", lines: 4 });
		assert.deepEqual(codeSummary(""), { first: "", lines: 0 });
	});
});

describe("body", () => {
	it("collapsed: the last lines of output and how many more there are", () => {
		const lines = bodyLines(view(), 200, plain, "ctrl+o to expand");
		assert.deepEqual(lines, [
			"… 8 earlier lines, ctrl+o to expand",
			...OUTPUT.split("\n").slice(-4),
		]);
	});

	it("collapsed: a rebuilt workspace is one line with its reason, not the whole notice", () => {
		const output = "<repl_engine_reset>\nThe Python workspace was restarted: the kernel died.\nEverything ... is gone.\n</repl_engine_reset>\nafter";
		const lines = bodyLines(view({ output, reset: { reason: "the kernel died" } }), 80, plain, "");
		assert.deepEqual(lines, ["↻ workspace restarted: the kernel died", "after"]);
	});

	it("while running: the newest lines as they stream, with no hint", () => {
		const lines = bodyLines(view({ status: "running" }), 200, plain, "ctrl+o to expand");
		assert.deepEqual(lines, OUTPUT.split("\n").slice(-6));
	});

	it("expanded: every line of code, then all the output", () => {
		const lines = bodyLines(view({ expanded: true }), 200, plain, "hint");
		assert.deepEqual(lines, [...CODE.split("\n").map((l) => `│ ${l}`), "", ...OUTPUT.split("\n")]);
	});

	it("expanded at 30 columns: long lines wrap instead of being lost", () => {
		const code = `print("${"a".repeat(70)}")`;
		const lines = bodyLines(view({ code, output: "b".repeat(75), expanded: true }), 30, plain, "");
		const codeLines = lines.slice(0, lines.indexOf(""));
		assert.ok(codeLines.length >= 3, codeLines.join("\n"));
		assert.equal(codeLines.map((l) => l.replace(/^│ /, "")).join(""), code);
		assert.equal(lines.slice(lines.indexOf("") + 1).join(""), "b".repeat(75));
	});

	it("no line is ever wider than the width, for any width, collapsed or expanded, plain or coloured", () => {
		const nasty = `${"word ".repeat(50)}\n${"界".repeat(60)}\n\ttabbed\tline\n${"z".repeat(300)}\r\nprogress 10%\rprogress 100%`;
		for (const theme of [plain, colours]) {
			for (let width = 1; width <= 160; width++) {
				for (const expanded of [false, true]) {
					const v = view({ code: nasty, output: nasty, expanded, reset: { reason: "r ".repeat(100) } });
					const lines = [headerLine(v, width, theme), ...bodyLines(v, width, theme, "ctrl+o to expand")];
					for (const line of lines) assert.ok(visibleWidth(line) <= width, `width ${width}: ${JSON.stringify(strip(line))}`);
				}
			}
		}
	});

	it("DrawnLines draws for the width pi gives it", () => {
		const component = new DrawnLines((width) => [headerLine(view(), width, plain)]);
		assert.ok(visibleWidth(component.render(30)[0] ?? "") <= 30);
		assert.ok((component.render(120)[0] ?? "").includes("(+2 lines)"));
	});
});

describe("sanitize", () => {
	it("drops colour and cursor escapes and OSC sequences from cell output", () => {
		assert.equal(sanitize("\x1b[31mred\x1b[0m \x1b]8;;http://127.0.0.1/\x07link\x1b]8;;\x07 \x1b[2K\x1b[1Adone"), "red link done");
	});

	it("keeps what a terminal would show after carriage returns (progress bars)", () => {
		assert.equal(sanitize("10%\r50%\r100%\nnext\r\nlast"), "100%\nnext\nlast");
	});

	it("expands tabs to 4-column stops and removes other control characters", () => {
		assert.equal(sanitize("a\tbc\td\x07\x00e\x7f"), "a   bc  de");
	});
});

describe("duration", () => {
	it("reads as ms, seconds, or minutes", () => {
		assert.deepEqual([formatDuration(340), formatDuration(1234), formatDuration(125_000), formatDuration(undefined)], [
			"340ms",
			"1.2s",
			"2m05s",
			"",
		]);
	});
});
