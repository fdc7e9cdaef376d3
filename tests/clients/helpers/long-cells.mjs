// Cells longer than the client's tool timeout (issue 13), and reading what the model received.
//
// Two scripts, run by both clients with their MCP tool timeout set short:
//
// - `collectedLater`: pi-repl's wait (`--wait-ms`) is shorter than the client's timeout, so the
//   call that starts the cell answers `running` with the output so far; the model then calls
//   `execute {"cell": N}` (N read from that answer) until the cell has ended, and the last
//   answer holds the rest of the output and the value. No call reaches the client's timeout.
// - `cutByTheClient`: pi-repl's wait (its 50 s default) is longer than the client's timeout, so
//   the client gives up on the call first. Both pinned clients then cancel the request; pi-repl
//   aborts the cell and starts its next result with `<cell_finished cell=N status=aborted>`,
//   and `{"cell": N}` returns the cell's outcome.
//
// The cells wait a bounded time longer than the client's timeout (the first) or until they are
// interrupted (the second, bounded too). Nothing here asserts on durations.

import assert from "node:assert/strict";
import { textOf } from "./cells.mjs";

/** The client's MCP tool timeout when the model collects the cell later, in seconds. */
export const CLIENT_TIMEOUT_S = 4;

/** The client's MCP tool timeout when it cuts the call, in seconds (shorter: the run waits it out). */
export const CUT_TIMEOUT_S = 2;

/** pi-repl's wait per call when the model collects the cell later (`--wait-ms`). */
export const SERVER_WAIT_MS = 1000;

/** Looks at the cell the model makes at most before it gives up (each waits `SERVER_WAIT_MS`). */
const MAX_LOOKS = 30;

/** Sleeps longer than the client's timeout, printing before and after. */
export const LONG_CELL = `import time\nprint('started', flush=True)\ntime.sleep(${CLIENT_TIMEOUT_S + 1})\nprint('finished', flush=True)\n'the answer: ' + str(6 * 7)`;

/** Runs until interrupted (bounded: 20 s), printing first. */
export const CUT_CELL = "import time\nprint('started', flush=True)\nfor _ in range(400):\n    time.sleep(0.05)\nprint('not interrupted')";

/** What pi-repl answers while a cell runs on: `[cell N is still running (…) …]`. */
export const RUNNING = /^\[cell (\d+) is still running \(/m;

/** The number of the cell an answer says is still running, or `undefined`. */
export function runningCell(result) {
	const match = RUNNING.exec(textOf(result));
	return match ? Number(match[1]) : undefined;
}

/**
 * The model of `collectedLater`: runs `LONG_CELL`, then looks at its cell (the number read from
 * the first answer) while the last answer says it is still running.
 */
export const collectedLater = [
	{ code: LONG_CELL },
	...Array.from({ length: MAX_LOOKS }, () => (results) => {
		const cell = runningCell(results[0]);
		return cell !== undefined && runningCell(results.at(-1)) === cell ? { cell } : undefined;
	}),
];

/**
 * The model of `cutByTheClient`: runs `CUT_CELL` (the client cuts that call), then a quick cell
 * whose answer reports how the first one ended, then collects the first one by the number that
 * report gives.
 */
export const cutByTheClient = [
	{ code: CUT_CELL },
	{ code: "print('next')" },
	(results) => {
		const match = /<cell_finished cell=(\d+) /.exec(textOf(results[1]));
		return match ? { cell: Number(match[1]) } : undefined;
	},
];

/**
 * `collectedLater`'s results, as the model read them: the first says running with the output so
 * far; every look but the last says running; the last says the cell ended and holds the rest of
 * the output and the value; every line was shown once, in order; nothing is an error.
 */
export function assertCollectedLater(results) {
	const texts = results.map(textOf);
	const cell = runningCell(results[0]);
	assert.notEqual(cell, undefined, `the first answer says the cell is still running; the model received:\n${texts[0]}`);
	assert.match(texts[0], /^started$/m, `the first answer holds the output so far; the model received:\n${texts[0]}`);
	assert.ok(results.length >= 2, `the model looked at the cell later; it received:\n${texts.join("\n---\n")}`);
	for (const text of texts.slice(1, -1)) assert.equal(runningCell({ content: [{ type: "text", text }] }), cell, `a look before the end says running:\n${text}`);
	const last = texts.at(-1);
	assert.match(last, new RegExp(`^\\[cell ${cell} ended: ok after `, "m"), `the last answer says the cell ended; the model received:\n${last}`);
	assert.match(last, /^finished$/m, `the last answer holds the rest of the output; the model received:\n${last}`);
	assert.match(last, /^'the answer: 42'$/m, `the last answer holds the value; the model received:\n${last}`);
	const lines = texts.flatMap((text) => text.split("\n")).filter((line) => line === "started" || line === "finished");
	assert.deepEqual(lines, ["started", "finished"], "every line of output reached the model once, in order");
	assert.deepEqual(
		results.map((result) => result.isError ?? false),
		results.map(() => false),
		`no answer is an error:\n${texts.join("\n---\n")}`,
	);
	for (const text of texts) assert.doesNotMatch(text, /timed out/i, "no call reached the client's timeout");
}

/**
 * `cutByTheClient`'s second and third results: the quick cell's answer starts by reporting the
 * cut cell as aborted (with what it printed) and then holds its own output; the look at the cut
 * cell returns its outcome.
 */
export function assertCutCellReported(results) {
	const [, next, look] = results.map(textOf);
	const notice = /<cell_finished cell=(\d+) status=aborted after=[^>]*>\n([^]*?)\n<\/cell_finished>/.exec(next);
	assert.ok(notice, `the next answer reports the cut cell's end; the model received:\n${next}`);
	assert.match(notice[2], /^started$/m, `the report holds what the cell printed; the model received:\n${next}`);
	assert.match(notice[2], /\[aborted: the call was cancelled\]/, `the report says why it ended; the model received:\n${next}`);
	assert.match(next, /<\/cell_finished>\nnext$/, `the quick cell's own output follows; the model received:\n${next}`);
	assert.ok(look !== undefined, "the model collected the cut cell");
	assert.match(look, new RegExp(`^\\[cell ${notice[1]} ended: aborted after `, "m"), `the look returns the cut cell's outcome; the model received:\n${look}`);
	assert.match(look, /^started$/m, `the look holds its output; the model received:\n${look}`);
	assert.match(look, /KeyboardInterrupt/, `the look holds how it was stopped; the model received:\n${look}`);
}
