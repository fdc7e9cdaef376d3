// Issue 22: a long output reaches the model with the pointer to all of it, through each client's
// own cut of a long tool result.
//
// A cell prints about 200 KB (numbered lines). pi-repl keeps a head and a tail and spills the
// whole to a file; Codex 0.171 then keeps about 12 000 characters of the result and cuts its
// middle, Claude Code warns at about 10 000 tokens and cuts at MAX_MCP_OUTPUT_TOKENS. Whatever the
// client keeps, the model must read that output was cut, how much, and the file holding all of it
// (the file must hold the whole print), and it must still see the head and the tail.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { summarise, textOf } from "./helpers/cells.mjs";
import { runClaude } from "./helpers/claude.mjs";
import { runCodex } from "./helpers/codex.mjs";
import { installedVersion, removeTempDirs } from "./helpers/env.mjs";

const LINES = 4000;
/** 4000 lines of 51 characters (newline included): 204 000 characters. */
const BIG_PRINT = { code: `for i in range(${LINES}):\n    print(f"line {i:05d} " + "x" * 39)` };
const line = (i) => `line ${String(i).padStart(5, "0")} ${"x".repeat(39)}`;

function assertPointerHeadAndTail(result) {
	const text = textOf(result);
	const shown = JSON.stringify(summarise(result)).slice(0, 2000);
	const pointer = text.match(/full output is in (\S+?\.txt)/);
	assert.ok(pointer, `the model reads where the full output is; it received (start):\n${shown}`);
	assert.ok(existsSync(pointer[1]), `the file named exists: ${pointer[1]}`);
	assert.equal(readFileSync(pointer[1], "utf8").split("\n").length - 1, LINES, "the file holds every printed line");
	assert.match(text, /stdout cut: 204000 characters, \d+ not shown/, "the model reads how much the cell printed and how much it does not see");
	assert.match(text, new RegExp(`^${line(0)}$`, "m"), "the head reaches the model, whole lines");
	assert.match(text, new RegExp(`^${line(LINES - 1)}$`, "m"), "the tail reaches the model, whole lines");
}

describe(`Codex ${installedVersion("@openai/codex")}: a 200 KB print`, () => {
	let run;
	before(async () => {
		run = await runCodex({ calls: [BIG_PRINT] });
	});
	after(removeTempDirs);
	test("reaches the model with the pointer to all of it, its head and its tail", () => {
		assert.equal(run.code, 0, `exit ${run.code}; stderr:\n${run.stderr}`);
		assertPointerHeadAndTail(run.records[1].lastToolResult);
	});
});

describe(`Claude Code ${installedVersion("@anthropic-ai/claude-code")}: a 200 KB print`, () => {
	let run;
	before(async () => {
		run = await runClaude({ calls: [BIG_PRINT] });
	});
	after(removeTempDirs);
	test("reaches the model with the pointer to all of it, its head and its tail", () => {
		assert.equal(run.code, 0, `exit ${run.code}; stderr:\n${run.stderr}`);
		assertPointerHeadAndTail(run.records[1].lastToolResult);
	});
});
