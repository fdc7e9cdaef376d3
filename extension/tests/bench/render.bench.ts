// Benchmark, not a test (`npm run bench`): drawing a call's output and framing the server's
// messages, each at two sizes ten times apart, so linear work shows as a ratio near 10 (issue 9:
// a 30 KB TSV row took 313 ms per render; a 40 MiB result blocked pi's event loop for 9.8 s).
// Prints a table; asserts nothing (the tests assert the structural work counts instead).

import { ReadBuffer } from "@modelcontextprotocol/sdk/shared/stdio.js";
import { bodyLines, type CallView, type RenderTheme } from "../../src/render.js";
import { LineReader } from "../../src/line-framing.js";

const plain: RenderTheme = { fg: (_c, t) => t, bold: (t) => t };

function best(run: () => void, repeat = 3): number {
	let fastest = Number.POSITIVE_INFINITY;
	for (let i = 0; i < repeat; i++) {
		const started = performance.now();
		run();
		fastest = Math.min(fastest, performance.now() - started);
	}
	return fastest;
}

function row(label: string, small: number, large: number): void {
	console.log(`${label.padEnd(52)} ${small.toFixed(1).padStart(9)} ms ${large.toFixed(1).padStart(9)} ms   x${(large / small).toFixed(1)}`);
}

function draw(output: string, expanded: boolean): () => void {
	const view: CallView = { code: "print(table)", status: "ok", durationMs: 5, output, expanded };
	return () => bodyLines(view, 100, plain, "ctrl+o to expand");
}

const tsv = (cells: number) => Array.from({ length: cells }, (_, i) => `v${i}\t界${i}`).join("\t");
const unbroken = (chars: number) => "x".repeat(chars);
const spaces = (chars: number) => `a${" ".repeat(chars)}b`;
const mixed = (chars: number) => "word 界面 e\u0301 👍🏽 ".repeat(Math.ceil(chars / 16)).slice(0, chars);

console.log(`${"".padEnd(52)} ${"small".padStart(12)} ${"10x".padStart(12)}   ratio`);
for (const expanded of [false, true]) {
	const mode = expanded ? "expanded" : "collapsed";
	row(`TSV row, 30 KB / 300 KB (${mode})`, best(draw(tsv(2_000), expanded)), best(draw(tsv(20_000), expanded)));
	row(`one line without spaces, 30 KB / 300 KB (${mode})`, best(draw(unbroken(30_000), expanded)), best(draw(unbroken(300_000), expanded)));
	row(`mixed-script text, 30 KB / 300 KB (${mode})`, best(draw(mixed(30_000), expanded)), best(draw(mixed(300_000), expanded)));
	row(`a run of spaces, 30 KB / 300 KB (${mode})`, best(draw(spaces(30_000), expanded)), best(draw(spaces(300_000), expanded)));
}

function frame(bytes: number, chunk: number, reader: "ours" | "sdk"): () => void {
	const message = Buffer.from(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"${"z".repeat(bytes)}"}]}}\n`);
	return () => {
		if (reader === "ours") {
			const lines = new LineReader(64 * 1024 * 1024, { line: (l) => JSON.parse(l.toString("utf8")), overflow: () => undefined });
			for (let i = 0; i < message.length; i += chunk) lines.push(message.subarray(i, i + chunk));
		} else {
			const buffer = new ReadBuffer();
			for (let i = 0; i < message.length; i += chunk) {
				buffer.append(message.subarray(i, i + chunk));
				buffer.readMessage();
			}
		}
	};
}

const MiB = 1024 * 1024;
row("framing one message, 4 / 40 MiB in 64 KiB chunks (ours)", best(frame(4 * MiB, 64 * 1024, "ours")), best(frame(40 * MiB, 64 * 1024, "ours")));
row("framing one message, 0.4 / 4 MiB in 64 KiB chunks (SDK)", best(frame(0.4 * MiB, 64 * 1024, "sdk"), 1), best(frame(4 * MiB, 64 * 1024, "sdk"), 1));
