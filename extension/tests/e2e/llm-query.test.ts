// End to end through the real `pi` from npm, offline: a cell's `llm_query` is answered by pi's own
// model (the scripted provider, selected with --provider/--model, with the key pi's registry holds
// for it), through pi-repl's `sampling/createMessage`; and Esc during such a call aborts the model
// request.

import assert from "node:assert/strict";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, removeTempDirs } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";
import { PiSandbox, RpcPi, runPi } from "../helpers/pi.js";

const sandboxes: PiSandbox[] = [];
const running: RpcPi[] = [];

afterEach(async () => {
	for (const pi of running.splice(0)) await pi.close(5_000).catch(() => undefined);
	for (const box of sandboxes.splice(0)) killMarked(box.mark);
});
after(removeTempDirs);

function sandbox(): PiSandbox {
	const box = new PiSandbox();
	sandboxes.push(box);
	return box;
}

function text(result: { content?: { type: string; text?: string }[] } | undefined): string {
	return (result?.content ?? [])
		.filter((b) => b.type === "text")
		.map((b) => b.text)
		.join("\n");
}

describe("llm_query in pi", () => {
	it("a cell's llm_query is answered by pi's model and the answer reaches the agent's model", async () => {
		const box = sandbox();
		box.script([
			{ call: { code: "answer = llm_query('What is the capital of France?', system='Be brief.', max_tokens=20)\nprint(answer)" } },
			{ say: "finished" },
		]);
		const run = await runPi(box, ["--repl", "--no-session", "--mode", "json"], "go", { timeoutMs: 120_000 });
		assert.equal(run.code, 0, run.stderr);

		const completions = box.completions();
		assert.equal(completions.length, 1, JSON.stringify(completions));
		const asked = completions[0];
		assert.equal(asked?.kind, "completion");
		assert.equal(asked?.prompt, "What is the capital of France?");
		assert.equal(asked?.systemPrompt, "Be brief.");
		assert.equal(asked?.messages, 1, "one user message, nothing of pi's conversation");
		assert.equal(asked?.maxTokens, 20);
		assert.equal(asked?.apiKey, "scripted-no-key", "pi's own credentials for its model");

		const ends = run.events.filter((e) => e.type === "tool_execution_end") as any[];
		assert.equal(ends.length, 1);
		assert.equal(ends[0].isError, false, text(ends[0].result));
		assert.match(text(ends[0].result), /^scripted answer to: What is the capital of France\?$/m);

		const turns = box.records();
		assert.equal(turns.length, 2, "the completion took no step of the agent's script");
		assert.match(turns[1]?.lastToolResult?.content[0]?.text ?? "", /^scripted answer to: What is the capital of France\?$/m);

		// The running call showed the model call under it (the live view's details).
		const shown = run.events
			.filter((e) => e.type === "tool_execution_update")
			.flatMap((e) => (e.partialResult?.details?.modelCalls ?? []) as { prompt: string; model: string }[]);
		assert.ok(
			shown.some((call) => call.prompt === "What is the capital of France?" && call.model === "scripted-1"),
			JSON.stringify(run.events.filter((e) => e.type === "tool_execution_update")),
		);
	});

	it("Esc while a cell waits for llm_query aborts pi's model request, and the workspace goes on", async () => {
		const box = sandbox();
		box.script([{ call: { code: "kept = 'survived'\nllm_query('hang until cancelled')" } }, { call: { code: "print(kept)" } }, { say: "done" }]);
		const pi = new RpcPi(box, ["--repl"]);
		running.push(pi);
		await pi.command({ type: "prompt", message: "go" });
		await pi.waitFor(
			(e) => e.type === "tool_execution_update" && JSON.stringify(e.partialResult?.details?.modelCalls ?? []).includes("hang until cancelled"),
			60_000,
			"the model call to show under the running cell",
		);
		await pi.command({ type: "abort" });
		await waitUntil(() => box.completions().some((c) => c.kind === "completion-aborted"), 30_000, "the model request to be aborted");
		await pi.waitFor((e) => e.type === "agent_end", 30_000, "the aborted turn to end");
		const events = await pi.prompt("again", 60_000);
		const end = events.find((e) => e.type === "tool_execution_end");
		const after = text(end?.result);
		// The cancelled cell is reported first (`<cell_finished … status=aborted>`), then this call's output.
		assert.match(after, /^<cell_finished cell=1 status=aborted/, after);
		assert.equal(after.split("\n").at(-1), "survived", "the kernel survived the cancelled query");
		assert.equal(box.completions().filter((c) => c.kind === "completion").length, 1, "one request, not retried");
	});

	it("a cell in the background that waits on llm_query is shown in the footer until it is interrupted", async () => {
		const box = sandbox();
		box.script([
			{ call: { code: "llm_query('hang in the background')", wait_ms: 0 } },
			{ say: "left it running" },
			{ call: { cell: 1, interrupt: true } },
			{ say: "done" },
		]);
		const pi = new RpcPi(box, ["--repl", "--no-session"]);
		running.push(pi);
		const first = await pi.prompt("start it", 60_000);
		const started = first.find((e) => e.type === "tool_execution_end");
		// With `wait_ms: 0` the call can return before the kernel has taken the cell.
		assert.match(text(started?.result), /^\[cell 1 is (still running|queued)/, text(started?.result));
		const statuses = () => pi.events.filter((e) => e.type === "extension_ui_request" && e.method === "setStatus" && e.statusKey === "pi-repl-llm");
		// The cell runs once its model call reaches the scripted model; only then is the footer
		// sure to show it (a queued cell has made no call yet).
		await waitUntil(() => box.completions().some((c) => c.kind === "completion"), 60_000, "the background cell to run and call the model");
		const shown = await pi.waitFor(
			(e) => e.type === "extension_ui_request" && e.method === "setStatus" && e.statusKey === "pi-repl-llm" && e.statusText !== undefined,
			60_000,
			"the footer to show the background cell's model call",
		);
		assert.equal(shown.statusText, "↳ llm_query: 1 model call for a cell in the background (scripted-1)");
		await pi.prompt("stop it", 60_000);
		await waitUntil(() => box.completions().some((c) => c.kind === "completion-aborted"), 30_000, "the model request to be aborted");
		await waitUntil(() => statuses().at(-1)?.statusText === undefined, 30_000, "the footer to be cleared");
	});
});
