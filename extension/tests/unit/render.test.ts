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
	MODEL_CALL_PROMPT_CHARS,
	modelCallLines,
	type RenderTheme,
	sanitize,
} from "../../src/render.js";
import { renderTerminal } from "../../src/terminal-text.js";

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

	it("collapsed: a 4096-character line takes its last 4 rows, not the ~40 it wraps to", () => {
		const long = `${"0123456789".repeat(409)}END!!!`;
		const lines = bodyLines(view({ output: `first\nsecond\n${long}` }), 100, plain, "ctrl+o to expand");
		assert.equal(lines.length, 5, "a hint and 4 rows");
		assert.equal(lines[0], "… 2 earlier lines and the start of this one, ctrl+o to expand");
		const rows = lines.slice(1);
		assert.ok(rows.every((row) => visibleWidth(row) <= 100));
		assert.ok(rows[3]?.endsWith("END!!!"), "the end of the line is what shows");
		assert.equal(rows.join(""), long.slice(long.length - rows.join("").length), "the rows are the line's end, in order");
		const alone = bodyLines(view({ output: long }), 100, plain, "ctrl+o to expand");
		assert.equal(alone[0], "… the start of this line, ctrl+o to expand");
	});

	it("collapsed: never more than 5 rows (6 with a reset line) at any width, whatever the output", () => {
		const outputs = [OUTPUT, "x".repeat(5000), `${"word ".repeat(2000)}\nshort`, Array.from({ length: 50 }, () => "y".repeat(300)).join("\n"), "界".repeat(3000)];
		for (const output of outputs) {
			for (const width of [1, 7, 40, 100, 161]) {
				for (const status of ["ok", "running"] as const) {
					const rows = bodyLines(view({ output, status }), width, plain, "ctrl+o to expand");
					assert.ok(rows.length <= (status === "running" ? 6 : 5), `${rows.length} rows at width ${width}`);
					const reset = bodyLines(view({ output, reset: { reason: "the kernel died" } }), width, plain, "hint");
					assert.ok(reset.length <= 6, `${reset.length} rows with a reset at width ${width}`);
				}
			}
		}
	});

	it("expanded: a long line is shown whole, wrapped", () => {
		const long = "0123456789".repeat(410);
		const lines = bodyLines(view({ code: "x", output: long, expanded: true }), 100, plain, "");
		assert.equal(lines.slice(2).join(""), long);
		assert.equal(lines.length - 2, 41);
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

	it("DrawnLines draws for the width pi gives it, once per width until invalidated", () => {
		let draws = 0;
		const component = new DrawnLines((width) => {
			draws++;
			return [headerLine(view(), width, plain)];
		});
		assert.ok(visibleWidth(component.render(30)[0] ?? "") <= 30);
		component.render(30);
		assert.equal(draws, 1, "the same width is not drawn again");
		assert.ok((component.render(120)[0] ?? "").includes("(+2 lines)"));
		assert.equal(draws, 2);
		component.invalidate();
		component.render(120);
		assert.equal(draws, 3);
	});
});

describe("model calls under a running call", () => {
	const call = (prompt: string, model = "scripted-1") => ({ prompt, model });

	it("one line per call: the start of the prompt on one line, and the model", () => {
		const prompt = `Summarise\tthis\nchunk: ${"abc ".repeat(40)}`;
		const [line] = modelCallLines([call(prompt)], 200, plain);
		const start = prompt.replace(/\s+/g, " ").slice(0, MODEL_CALL_PROMPT_CHARS);
		assert.equal(line, `↳ llm_query: ${start}… (scripted-1)`);
		assert.equal(modelCallLines([call("Say hi.")], 200, plain)[0], "↳ llm_query: Say hi. (scripted-1)", "a short prompt is not marked cut");
	});

	it("a batch shows three and counts the rest; no line is wider than the width", () => {
		const calls = Array.from({ length: 8 }, (_, i) => call(`prompt ${i} ${"x".repeat(80)}`));
		for (const width of [1, 5, 20, 80]) {
			const lines = modelCallLines(calls, width, colours);
			assert.equal(lines.length, 4);
			for (const line of lines) assert.ok(visibleWidth(line) <= width, `${visibleWidth(line)} > ${width}: ${line}`);
		}
		assert.equal(strip(modelCallLines(calls, 200, colours)[3] ?? ""), "↳ … and 5 more llm_query calls");
	});

	it("an escape sequence in a prompt is not drawn", () => {
		const [line] = modelCallLines([call("\x1b[2J\x1b]0;title\x07clear")], 80, plain);
		assert.equal(line, "↳ llm_query: clear (scripted-1)");
	});

	it("sit above the output while the cell runs, which keeps its height; gone once it ended", () => {
		const modelCalls = [call("first question"), call("second question")];
		const running = bodyLines(view({ status: "running", modelCalls }), 200, plain, "");
		assert.deepEqual(running.slice(0, 2), ["↳ llm_query: first question (scripted-1)", "↳ llm_query: second question (scripted-1)"]);
		assert.equal(running.length, 6, "two calls and four rows of output: as tall as six rows of output");
		assert.equal(running.at(-1), "line 12 " + "x".repeat(99));
		const ended = bodyLines(view({ status: "ok", modelCalls }), 200, plain, "");
		assert.ok(!ended.some((line) => line.includes("llm_query")), ended.join("\n"));
		const expanded = bodyLines(view({ status: "running", modelCalls, expanded: true }), 200, plain, "");
		assert.ok(expanded.includes("↳ llm_query: first question (scripted-1)"), "shown when expanded too");
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

describe("renderTerminal", () => {
	it("shows a progress bar redrawn in place as one line, its current state", () => {
		let sent = "";
		for (let i = 0; i <= 100; i += 10) sent += `\r\x1b[J${i}%`;
		assert.equal(renderTerminal(`before\n${sent}`), "before\n100%");
	});

	it("follows backspaces, erase in line, cursor up and clear all", () => {
		assert.equal(renderTerminal("abc\b\bXY"), "aXY");
		assert.equal(renderTerminal("abcdef\r\x1b[Kxy"), "xy");
		assert.equal(renderTerminal("a\nb 10%\nc 10%\x1b[1A\r\x1b[Jb 20%\nc 20%"), "a\nb 20%\nc 20%");
		assert.equal(renderTerminal("epoch 1\n\x1b[2Jepoch 2\n"), "epoch 2\n");
		assert.equal(renderTerminal("one\r\ntwo\n"), "one\ntwo\n");
	});
});
