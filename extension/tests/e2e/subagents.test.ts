// End to end through the real `pi` from npm, offline: a cell spawns two sub-agents and waits for
// both. Each child is pi-repl's own agent loop; its model requests go up to the parent pi-repl
// and on to pi's model through the extension's sampling (the scripted provider answers a plain
// completion with "scripted answer to: …" and no code block, which the child takes as its final
// answer). The frames under the cell are drawn by the TUI only; their lines are pinned by
// unit/agent-frames.test.ts and a real child's frames by integration/agent-frames.test.ts.

import assert from "node:assert/strict";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, removeTempDirs } from "../helpers/env.js";
import { PiSandbox, runPi } from "../helpers/pi.js";

const sandboxes: PiSandbox[] = [];

afterEach(() => {
	for (const box of sandboxes.splice(0)) killMarked(box.mark);
});
after(removeTempDirs);

describe("sub-agents in pi", () => {
	it("a cell spawns two children, waits for both, and their answers come from pi's model", async () => {
		const box = new PiSandbox();
		sandboxes.push(box);
		const code = [
			"a = spawn_agent('Name a colour.', name='colour', fork=False)",
			"b = spawn_agent('Name a fruit.', name='fruit', fork=False)",
			"print([a.status, b.status])",
			"for answer in wait_all([a, b], timeout=120):",
			"    print('answer:', answer)",
			"print([h.status for h in (a, b)])",
		].join("\n");
		box.script([{ call: { code } }, { say: "finished" }]);
		const run = await runPi(box, ["--repl", "--no-session", "--mode", "json"], "go", { timeoutMs: 180_000 });
		assert.equal(run.code, 0, run.stderr);
		const turns = box.records();
		assert.equal(turns.length, 2, "the children's model calls took no step of the agent's script");
		const result = turns[1]?.lastToolResult;
		const text = (result?.content ?? []).map((b) => b.text ?? "").join("\n");
		assert.equal(result?.isError, false, text);
		assert.match(text, /\['running', 'running'\]/);
		assert.equal((text.match(/^answer: scripted answer to: /gm) ?? []).length, 2, text);
		assert.match(text, /Name a colour\./);
		assert.match(text, /Name a fruit\./);
		assert.match(text, /\['completed', 'completed'\]/);
		// Both children asked pi's model (a plain completion each).
		assert.equal(box.completions().filter((c) => c.kind === "completion").length, 2);
	});
});
