// The real Claude Code, from npm, in print mode against `pi-repl mcp`: what the model receives.
//
// The model is a scripted fake of the Anthropic Messages API on 127.0.0.1 (helpers/
// fake-anthropic.mjs); Claude Code, its MCP client, pi-repl and the kernel are real. The script
// runs the four cells of helpers/cells.mjs; the assertions read the tool results as they reached
// the model's API, which is what a real model would read (issue 9: Claude Code sends the model
// `structuredContent` instead of the text when a result carries both).
//
// Offline, checked by hand with `strace -f -e trace=connect,sendto,sendmmsg` over a whole run
// (Claude Code 2.1.332): the only inet connections were to the fake API on 127.0.0.1; no DNS
// query was sent; the other sockets were AF_UNIX (the kernel's IPC sockets, Claude Code's own
// messaging socket) and AF_NETLINK (interface listing).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { assertExpressionValue, assertImageCaption, assertOneImage, assertPrintedText, assertSilent, assertTraceback, CELLS, SCRIPT, summarise, textOf } from "./helpers/cells.mjs";
import { runClaude } from "./helpers/claude.mjs";
import { installedVersion, removeTempDirs } from "./helpers/env.mjs";
import { assertCollectedLater, assertCutCellReported, CLIENT_TIMEOUT_S, collectedLater, CUT_TIMEOUT_S, cutByTheClient, SERVER_WAIT_MS } from "./helpers/long-cells.mjs";

describe(`Claude Code ${installedVersion("@anthropic-ai/claude-code")} with pi-repl mcp`, () => {
	let run;
	let results;

	before(async () => {
		run = await runClaude({ calls: SCRIPT });
		results = run.records.slice(1).map((record) => record.lastToolResult);
	});
	after(removeTempDirs);

	test("the model is offered the tool and gets one result per call", () => {
		assert.equal(run.timedOut, false, `Claude Code did not finish; stderr:\n${run.stderr}`);
		assert.equal(run.records.length, SCRIPT.length + 1, `model requests offering the tool: ${JSON.stringify(run.sideRequests)}; unhandled: ${run.unhandled}`);
		assert.deepEqual(
			run.records.map((record) => record.toolResultCount),
			[0, 1, 2, 3, 4, 5],
		);
		assert.deepEqual(run.toolSearches, [], "with ENABLE_TOOL_SEARCH=false the tool is offered directly");
	});

	test("the printed text of a cell reaches the model", () => assertPrintedText(results[0]));
	test("the value of an expression over kept state reaches the model", () => assertExpressionValue(results[1]));
	test("the traceback of a failing cell reaches the model", () => assertTraceback(results[2]));
	test("a plot reaches the model as one image within 1568 px per side", () => assertOneImage(results[3]));
	test("the image's caption reaches the model with the image", () => assertImageCaption(results[3]));
	test("a silent cell reaches the model as (no output), shorter than Claude Code's own marker", () => assertSilent(results[4], ["(no output)"]));

	test("a cell that raised is marked as an error for the model, the others are not", () => {
		assert.deepEqual(
			results.map((result) => result.isError),
			[false, false, true, false, false],
			JSON.stringify(results.map(summarise)),
		);
	});

	test("Claude Code exits 0 and leaves no process behind", () => {
		assert.equal(run.code, 0, `exit ${run.code} (${run.signal}); stderr:\n${run.stderr}`);
		assert.equal(JSON.parse(run.stdout).result, "All cells ran.");
		assert.deepEqual(run.left, [], "processes still alive after Claude Code exited");
		assert.doesNotMatch(run.debugLog, /sending SIGKILL/i, "Claude Code had to SIGKILL pi-repl");
		// Claude Code logs one of the two, depending on whether it saw the exit or the pipe's
		// end first (on a busy machine, the pipe).
		assert.match(
			run.debugLog,
			/MCP server "pi-repl": (MCP server process exited cleanly|STDIO connection closed after \S+ \(cleanly\))/,
		);
	});

	// The kernel's key (connection.json) is removed once the kernel is up, so no kill can leave
	// it behind. Socket files can stay when the client kills pi-repl before it cleaned up; the
	// next pi-repl sweeps them (launch::tests::runtime_dirs_of_hosts_that_are_gone_are_swept).
	test("no kernel key is left in pi-repl's TMPDIR", () => {
		assert.deepEqual(run.replTmpLeft.filter((file) => !/^kernel-/.test(file.split("/").pop())), []);
	});
});

describe(`Claude Code ${installedVersion("@anthropic-ai/claude-code")} in its default configuration (MCP tools deferred)`, () => {
	let run;

	before(async () => {
		run = await runClaude({ calls: [{ code: CELLS.print }], toolSearch: true });
	});
	after(removeTempDirs);

	test("the model loads execute with ToolSearch, and the printed text of its call reaches the model", () => {
		assert.equal(run.code, 0, `exit ${run.code} (${run.signal}); stderr:\n${run.stderr}`);
		assert.deepEqual(run.toolSearches, ["select:mcp__pi-repl__execute"]);
		assert.equal(run.records.length, 2, `requests without the tool: ${JSON.stringify(run.sideRequests)}`);
		assertPrintedText(run.records[1].lastToolResult);
		assert.deepEqual(run.left, [], "processes still alive after Claude Code exited");
	});
});

// Issue 13 (helpers/long-cells.mjs). Claude Code's MCP tool timeout (`MCP_TOOL_TIMEOUT`, in ms)
// is a hard wall-clock limit per call (progress does not extend it); set short here. When it
// cuts a call it sends `notifications/cancelled`, and pi-repl aborts the cell.
describe(`Claude Code ${installedVersion("@anthropic-ai/claude-code")}: a cell longer than its tool timeout`, () => {
	let collected;
	let cut;

	before(async () => {
		collected = await runClaude({ calls: collectedLater, serverArgs: ["--wait-ms", String(SERVER_WAIT_MS)], toolTimeoutMs: CLIENT_TIMEOUT_S * 1000 });
		cut = await runClaude({ calls: cutByTheClient, toolTimeoutMs: CUT_TIMEOUT_S * 1000 });
	});
	after(removeTempDirs);

	test("answers running within pi-repl's shorter wait, and the model gets the final output on a later call", () => {
		assert.equal(collected.code, 0, `exit ${collected.code} (${collected.signal}); stderr:\n${collected.stderr}`);
		assertCollectedLater(collected.records.slice(1).map((record) => record.lastToolResult));
		assert.doesNotMatch(collected.debugLog, /timed out after/, "Claude Code's debug log shows no tool timeout");
		assert.deepEqual(collected.left, [], "processes still alive after Claude Code exited");
	});

	test("cut at Claude Code's own timeout: the model gets its error, then the cell's end in the next result", () => {
		assert.equal(cut.code, 0, `exit ${cut.code} (${cut.signal}); stderr:\n${cut.stderr}`);
		const results = cut.records.slice(1).map((record) => record.lastToolResult);
		assert.equal(results.length, cutByTheClient.length, JSON.stringify(results.map(summarise)));
		// What Claude Code gives the model when it cuts a call: one line, marked as an error.
		assert.equal(results[0].isError, true);
		assert.equal(textOf(results[0]), `MCP server "pi-repl" tool "execute" timed out after ${CUT_TIMEOUT_S}s`);
		assertCutCellReported(results);
		assert.deepEqual(cut.left, [], "processes still alive after Claude Code exited");
	});
});
