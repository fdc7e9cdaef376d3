// The real Codex CLI, from npm, with `codex exec` against `pi-repl mcp`: what the model receives.
//
// The model is a scripted fake of the OpenAI Responses API on 127.0.0.1 (helpers/fake-openai.mjs);
// Codex, its MCP client, pi-repl and the kernel are real. The script runs the four cells of
// helpers/cells.mjs; the assertions read the `function_call_output` items as they reached the
// model's API, which is what a real model would read (issue 9: Codex sends the model only
// `structuredContent` when a result carries it, and then drops images).
//
// Offline, checked by hand with `strace -f -e trace=connect,sendto,sendmmsg` over a whole run
// (Codex 0.171.0): with the config of helpers/codex.mjs the only inet connections were to the
// fake API on 127.0.0.1 and no DNS query was sent. Without `[features] plugins/remote_plugin/apps
// = false` Codex ran `git` to clone its plugin marketplace from a public code host and resolved
// two more public hosts at start (all failed here: no network).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { assertExpressionValue, assertImageCaption, assertOneImage, assertPrintedText, assertTraceback, SCRIPT, summarise, textOf } from "./helpers/cells.mjs";
import { runCodex } from "./helpers/codex.mjs";
import { installedVersion, removeTempDirs } from "./helpers/env.mjs";
import { assertCollectedLater, assertCutCellReported, CLIENT_TIMEOUT_S, collectedLater, CUT_TIMEOUT_S, cutByTheClient, SERVER_WAIT_MS } from "./helpers/long-cells.mjs";

describe(`Codex ${installedVersion("@openai/codex")} with pi-repl mcp`, () => {
	let run;
	let results;

	before(async () => {
		run = await runCodex({ calls: SCRIPT });
		results = run.records.slice(1).map((record) => record.lastToolResult);
	});
	after(removeTempDirs);

	test("the model is offered the tool and gets one result per call", () => {
		assert.equal(run.timedOut, false, `Codex did not finish; stderr:\n${run.stderr}`);
		assert.equal(run.records.length, SCRIPT.length + 1, `requests without the tool: ${JSON.stringify(run.sideRequests)}; unhandled: ${run.unhandled}`);
		assert.deepEqual(
			run.records.map((record) => record.toolResultCount),
			[0, 1, 2, 3, 4, 5],
		);
		const calls = run.events.filter((event) => event.type === "item.completed" && event.item?.type === "mcp_tool_call");
		assert.deepEqual(
			calls.map((event) => [event.item.server, event.item.tool, event.item.error]),
			SCRIPT.map(() => ["pi-repl", "execute", null]),
			"Codex ran every call through pi-repl without refusing one",
		);
	});

	test("the printed text of a cell reaches the model", () => assertPrintedText(results[0]));
	test("the value of an expression over kept state reaches the model", () => assertExpressionValue(results[1]));
	test("the traceback of a failing cell reaches the model", () => assertTraceback(results[2]));
	test("a plot reaches the model as one image within 1568 px per side", () => assertOneImage(results[3]));
	test("the image's caption reaches the model with the image", () => assertImageCaption(results[3]));
	test("a silent cell reaches the model as Codex's own empty output", () => {
		const [wallTime, ...rest] = textOf(results[4]).split("\n");
		assert.match(wallTime, /^Wall time: [\d.]+ seconds$/);
		assert.deepEqual(rest, ["Output:"], JSON.stringify(summarise(results[4])));
	});

	test("Codex exits 0 and leaves no process behind", () => {
		assert.equal(run.code, 0, `exit ${run.code} (${run.signal}); stderr:\n${run.stderr}`);
		const messages = run.events.filter((event) => event.type === "item.completed" && event.item?.type === "agent_message");
		assert.equal(messages.at(-1)?.item.text, "All cells ran.");
		assert.deepEqual(run.left, [], "processes still alive after Codex exited");
	});

	// Codex 0.171.0 ends a server with SIGTERM to its process group and SIGKILL 13-53 ms later
	// (measured with strace), so whatever pi-repl must clean up on exit has to come first.
	// The kernel's key (connection.json) is removed once the kernel is up, so no kill can leave
	// it behind. Socket files can stay when the client kills pi-repl before it cleaned up; the
	// next pi-repl sweeps them (launch::tests::runtime_dirs_of_hosts_that_are_gone_are_swept).
	test("no kernel key is left in pi-repl's TMPDIR", () => {
		assert.deepEqual(run.replTmpLeft.filter((file) => !/^kernel-/.test(file.split("/").pop())), []);
	});
});

// Issue 13 (helpers/long-cells.mjs). Codex's MCP tool timeout is the server's `tool_timeout_sec`;
// set short here. When it cuts a call it sends `notifications/cancelled`, and pi-repl aborts
// the cell.
describe(`Codex ${installedVersion("@openai/codex")}: a cell longer than its tool timeout`, () => {
	let collected;
	let cut;

	before(async () => {
		collected = await runCodex({ calls: collectedLater, serverArgs: ["--wait-ms", String(SERVER_WAIT_MS)], toolTimeoutSec: CLIENT_TIMEOUT_S });
		cut = await runCodex({ calls: cutByTheClient, toolTimeoutSec: CUT_TIMEOUT_S });
	});
	after(removeTempDirs);

	const toolCalls = (run) => run.events.filter((event) => event.type === "item.completed" && event.item?.type === "mcp_tool_call");

	test("answers running within pi-repl's shorter wait, and the model gets the final output on a later call", () => {
		assert.equal(collected.code, 0, `exit ${collected.code} (${collected.signal}); stderr:\n${collected.stderr}`);
		assertCollectedLater(collected.records.slice(1).map((record) => record.lastToolResult));
		assert.deepEqual(
			toolCalls(collected).map((event) => event.item.error),
			toolCalls(collected).map(() => null),
			"Codex completed every call",
		);
		assert.deepEqual(collected.left, [], "processes still alive after Codex exited");
	});

	test("cut at Codex's own timeout: the model gets its error, then the cell's end in the next result", () => {
		assert.equal(cut.code, 0, `exit ${cut.code} (${cut.signal}); stderr:\n${cut.stderr}`);
		const results = cut.records.slice(1).map((record) => record.lastToolResult);
		assert.equal(results.length, cutByTheClient.length, JSON.stringify(results.map(summarise)));
		// What Codex gives the model when it cuts a call: its error with a stack backtrace (of
		// unnamed frames), and none of the output so far.
		const error = textOf(results[0]);
		assert.match(error, new RegExp(`timed out awaiting tools/call after ${CUT_TIMEOUT_S}s`), error);
		assert.match(error, /Stack backtrace:/, error);
		assert.doesNotMatch(error, /started/, error);
		assert.equal(toolCalls(cut)[0]?.item.status, "failed", "Codex marks the cut call failed in its events");
		assertCutCellReported(results);
		assert.deepEqual(cut.left, [], "processes still alive after Codex exited");
	});
});
