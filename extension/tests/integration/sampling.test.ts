// The extension's MCP client answering the real pi-repl's `sampling/createMessage` (a cell's
// `llm_query`), with a real kernel and no pi: the capability is declared, the request reaches the
// answerer as pi-repl sent it, the answer reaches the cell, and interrupting the cell aborts the
// answerer's signal — also for pi-repl's first request, id 0, which the MCP SDK does not cancel.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import type { CreateMessageRequest, CreateMessageResult } from "@modelcontextprotocol/sdk/types.js";
import { resolveBinary } from "../../src/binary.js";
import type { SamplingAnswerer } from "../../src/client.js";
import { contentText, mapCallResult } from "../../src/result.js";
import { USAGE_META } from "../../src/sampling.js";
import { type ExecuteOutcome, Workspace } from "../../src/workspace.js";
import { killMarked, newMark, removeTempDirs, replBinary, replEnv, tempDir } from "../helpers/env.js";

const marks: string[] = [];
const workspaces: Workspace[] = [];

function workspace(sampling: SamplingAnswerer): Workspace {
	const mark = newMark();
	marks.push(mark);
	const root = tempDir("sampling");
	const cwd = join(root, "project");
	mkdirSync(cwd, { recursive: true });
	const env = { ...replEnv(mark, join(root, "home")), PI_REPL_BIN: replBinary() };
	const ws = new Workspace({ resolveBinary: () => resolveBinary({ env, packageDir: root }), plan: {}, cwd, env, sampling });
	workspaces.push(ws);
	return ws;
}

function text(outcome: ExecuteOutcome): string {
	assert.equal(outcome.kind, "result", JSON.stringify(outcome));
	return outcome.kind === "result" ? contentText(mapCallResult(outcome.result).content) : "";
}

function reply(text: string): CreateMessageResult {
	return {
		model: "fake/model-1",
		role: "assistant",
		content: { type: "text", text },
		stopReason: "endTurn",
		_meta: { [USAGE_META]: { input_tokens: 7, output_tokens: 2 } },
	};
}

describe("sampling over the real pi-repl", () => {
	afterEach(async () => {
		for (const ws of workspaces.splice(0)) await ws.stop();
		for (const mark of marks.splice(0)) killMarked(mark);
	});
	after(removeTempDirs);

	it("a cell's llm_query reaches the answerer as asked and its answer reaches the cell", async () => {
		const asked: CreateMessageRequest["params"][] = [];
		const ws = workspace(async (params) => {
			asked.push(params);
			return reply(`answer ${asked.length}`);
		});
		const outcome = await ws.execute({ code: "a = llm_query('Say hi.', system='Be terse.', max_tokens=30, model='fake/model-1')\nprint(a)" });
		assert.match(text(outcome), /^answer 1$/m);
		assert.equal(asked.length, 1);
		const [request] = asked;
		assert.deepEqual(request?.messages, [{ role: "user", content: { type: "text", text: "Say hi." } }]);
		assert.equal(request?.systemPrompt, "Be terse.");
		assert.equal(request?.maxTokens, 30);
		assert.equal(request?.modelPreferences?.hints?.[0]?.name, "fake/model-1");
	});

	it("a failed answer raises in the cell with the answerer's message", async () => {
		const ws = workspace(async () => {
			throw new Error("pi has no model selected: choose one with /model");
		});
		const outcome = await ws.execute({ code: "try:\n    llm_query('hi')\nexcept Exception as e:\n    print(type(e).__name__, e)" });
		assert.match(text(outcome), /pi has no model selected: choose one with \/model/);
	});

	it("interrupting the cell aborts the answer in flight, pi-repl's first request (id 0) included, and the next query is answered", async () => {
		const aborted: number[] = [];
		let started: (() => void) | undefined;
		let count = 0;
		const ws = workspace(
			(params, signal) =>
				new Promise((resolveAnswer, rejectAnswer) => {
					count++;
					const which = count;
					const prompt = params.messages[0]?.content;
					if (prompt && !Array.isArray(prompt) && prompt.type === "text" && prompt.text !== "hang") {
						resolveAnswer(reply("on time"));
						return;
					}
					signal.addEventListener("abort", () => {
						aborted.push(which);
						rejectAnswer(new Error("aborted"));
					});
					started?.();
				}),
		);
		const asked = new Promise<void>((resolveAsked) => {
			started = resolveAsked;
		});
		const cancel = new AbortController();
		const first = ws.execute({ code: "llm_query('hang')" }, { signal: cancel.signal });
		await asked;
		cancel.abort();
		assert.equal((await first).kind, "cancelled");
		// pi-repl interrupts the cell and cancels its request; the next call queues behind the
		// interrupted cell, so by its answer the cancellation has been seen.
		const next = await ws.execute({ code: "print(llm_query('next'))" });
		assert.match(text(next), /^on time$/m);
		assert.deepEqual(aborted, [1], "the first request's signal aborted");
	});
});
