// Progress never races a result in the real Claude Code (issue 9).
//
// pi-repl streams a cell's output as `notifications/progress` for the call's progress token.
// When such a notification arrives after (or in the same read as) the result of its call, Claude
// Code's MCP client no longer knows the token: it logs "Received a progress notification for an
// unknown token" and, for that error, "STDIO connection dropped after Ns uptime" (calls still
// succeed). This runs a fast cell that prints 20 lines (each flushed, so each can become a
// progress notification) 20 times in one Claude Code session and reads Claude Code's debug log
// (`--debug-file`), where both lines would appear. Measured against pi-repl before the fix: the
// race showed in 6 of 6 such sessions (with one line per cell instead: in 1 of 6).
//
// Offline as claude-code.test.mjs (same helpers, same checks by hand).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { textOf } from "./helpers/cells.mjs";
import { runClaude } from "./helpers/claude.mjs";
import { installedVersion, removeTempDirs } from "./helpers/env.mjs";

const CALLS = 20;

describe(`Claude Code ${installedVersion("@anthropic-ai/claude-code")}: ${CALLS} fast cells that print`, () => {
	let run;

	before(async () => {
		const code = (i) => `for k in range(20):\n    print('tick', ${i}, k, flush=True)`;
		run = await runClaude({ calls: Array.from({ length: CALLS }, (_, i) => ({ code: code(i) })) });
	});
	after(removeTempDirs);

	test("every call's printed lines reach the model", () => {
		assert.equal(run.code, 0, `exit ${run.code} (${run.signal}); stderr:\n${run.stderr}`);
		const results = run.records.slice(1).map((record) => record.lastToolResult);
		assert.equal(results.length, CALLS);
		results.forEach((result, i) => {
			const lines = textOf(result).split("\n").filter((line) => line.startsWith("tick "));
			assert.deepEqual(lines, Array.from({ length: 20 }, (_, k) => `tick ${i} ${k}`), `call ${i}`);
		});
		assert.deepEqual(run.left, [], "processes still alive after Claude Code exited");
	});

	test("Claude Code's MCP client logs no progress for an unknown token and no dropped connection", () => {
		assert.match(run.debugLog, /Calling MCP tool: execute/, "the debug log records the MCP calls");
		const bad = run.debugLog.split("\n").filter((line) => /unknown token|connection dropped/i.test(line));
		assert.deepEqual(bad, [], "Claude Code's debug log");
	});
});
