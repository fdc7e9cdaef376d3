// End to end through the real `pi` from npm, offline, scripted models for parent and children:
// in pi a sub-agent is `pi --mode json --repl` itself, with the parent's model, working in its
// own pi-repl workspace. A cell spawns two children and waits for both; each child pi runs a
// cell of its own (in its own workspace, served by `pi-repl mcp --agent-workspace`) and answers
// in text, which is the handle's result; the records say what ran. The frames under the cell are
// drawn by the TUI only; their lines are pinned by unit/agent-frames.test.ts and a real child's
// frames by integration/agent-frames.test.ts.

import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, removeTempDirs } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";
import { PiSandbox, runPi } from "../helpers/pi.js";

const sandboxes: PiSandbox[] = [];

afterEach(() => {
	for (const box of sandboxes.splice(0)) killMarked(box.mark);
});
after(removeTempDirs);

/** Gone, or a zombie (its new parent, init, collects it). */
function ended(pid: number): boolean {
	try {
		const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
		return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
	} catch {
		return true;
	}
}

describe("sub-agents in pi", () => {
	it("a cell spawns two pi children with the parent's model, one a live fork of its workspace, waits for both, and reads their answers", async () => {
		const box = new PiSandbox();
		sandboxes.push(box);
		const childScript = join(box.root, "child-script.json");
		const childRecord = join(box.root, "child-record.jsonl");
		writeFileSync(
			childScript,
			JSON.stringify({
				steps: [
					{
						// The second child also answers with final_answer(text), which wins over its last text.
						call: {
							code: "import os\nprint('child workspace', os.getpid(), 6 * 7, globals().get('handed'))\nif os.environ['PI_REPL_AGENT_WORKSPACE'].endswith('agent-2'):\n    final_answer('via final_answer: 42')",
						},
					},
					{ say: "the child's answer is 42" },
				],
			}),
		);
		writeFileSync(childRecord, "");
		const code = [
			"handed = 'from the parent'",
			"a = spawn_agent('Compute six times seven.', name='first', fork=False)",
			"b = spawn_agent('Compute it again.', name='second')",
			"print([a.status, b.status], b.record['fork_kind'])",
			"for answer in wait_all([a, b], timeout=150):",
			"    print('answer:', answer)",
			"print([h.status for h in (a, b)], [h.record['steps'] for h in (a, b)])",
		].join("\n");
		box.script([{ call: { code } }, { say: "finished" }]);
		const run = await runPi(box, ["--repl", "--no-session", "--mode", "json"], "go", {
			timeoutMs: 240_000,
			env: { PI_REPL_TEST_CHILD_SCRIPT: childScript, PI_REPL_TEST_CHILD_RECORD: childRecord },
		});
		assert.equal(run.code, 0, run.stderr);
		const turns = box.records();
		assert.equal(turns.length, 2, "the children's turns took no step of the parent's script");
		const result = turns[1]?.lastToolResult;
		const text = (result?.content ?? []).map((b) => b.text ?? "").join("\n");
		assert.equal(result?.isError, false, text);
		assert.match(text, /\['running', 'running'\] live/);
		assert.match(text, /^answer: the child's answer is 42\nanswer: via final_answer: 42$/m);
		assert.match(text, /\['completed', 'completed'\] \[1, 1\]/);

		// Each child was a pi with the parent's model and only execute, and its cell ran in a
		// workspace of its own.
		const childTurns = readFileSync(childRecord, "utf8")
			.split("\n")
			.filter((line) => line.trim() !== "")
			.map((line) => JSON.parse(line) as { kind: string; tools?: string[]; lastToolResult?: { content: { text?: string }[] } | null });
		const turnsOfChildren = childTurns.filter((t) => t.kind === "turn");
		assert.equal(turnsOfChildren.length, 4, JSON.stringify(childTurns));
		for (const turn of turnsOfChildren) assert.deepEqual(turn.tools, ["execute"]);
		const ran = turnsOfChildren.map((t) => t.lastToolResult?.content[0]?.text ?? "").filter((t) => t.includes("child workspace"));
		assert.equal(ran.length, 2, JSON.stringify(turnsOfChildren));
		// The first child started empty; the second is a live copy of the parent's workspace.
		assert.deepEqual(
			ran.map((t) => /child workspace \d+ 42 (.*)/.exec(t)?.[1]).sort(),
			["None", "from the parent"],
			JSON.stringify(ran),
		);
	});

	it("a pi child whose host is killed ends itself (it watches its parent, as a kernel's lifeline does)", async () => {
		const box = new PiSandbox();
		sandboxes.push(box);
		const childScript = join(box.root, "child-script.json");
		const started = join(box.root, "child-started");
		writeFileSync(
			childScript,
			JSON.stringify({ steps: [{ call: { code: `open(${JSON.stringify(started)}, 'w').close()\nimport time\ntime.sleep(600)` } }] }),
		);
		const code = [
			"import os, time",
			"h = spawn_agent('Wait a long time.', name='waiter', fork=False)",
			`while not os.path.exists(${JSON.stringify(started)}):`,
			"    time.sleep(0.05)",
			"print('child pid', h.record['pid'])",
		].join("\n");
		box.script([{ call: { code } }, { killServer: "SIGKILL", say: "killed the host" }]);
		const run = await runPi(box, ["--repl", "--no-session", "--mode", "json"], "go", {
			timeoutMs: 240_000,
			env: { PI_REPL_TEST_CHILD_SCRIPT: childScript, PI_REPL_TEST_CHILD_RECORD: join(box.root, "child-record.jsonl") },
		});
		assert.equal(run.code, 0, run.stderr);
		const turns = box.records();
		const text = (turns[1]?.lastToolResult?.content ?? []).map((b) => b.text ?? "").join("\n");
		const pid = Number(text.match(/child pid (\d+)/)?.[1]);
		assert.ok(pid > 0, text);
		assert.ok(existsSync(started), "the child ran its cell");
		// The host was killed; the child pi notices within a second or so and ends.
		await waitUntil(() => ended(pid), 60_000, "the orphaned child pi to end");
	});
});
