// A real sub-agent's frames, streamed by the real pi-repl to the extension's client: a cell spawns
// a child (pi-repl's own agent loop, its model answered here through sampling); the client gets
// `notifications/pi-repl/agents` frames naming the child, the spawning cell and the call that
// started it, first `running` (with its last line once it ran a step), then `completed`; and they
// draw as frames under that call, folding into a count once settled.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import type { CreateMessageResult } from "@modelcontextprotocol/sdk/types.js";
import { type AgentFrame, AgentFrames, agentFrameLines, framesOf } from "../../src/agent-frames.js";
import { resolveBinary } from "../../src/binary.js";
import type { SamplingAnswerer } from "../../src/client.js";
import type { RenderTheme } from "../../src/render.js";
import { contentText, mapCallResult } from "../../src/result.js";
import { Workspace } from "../../src/workspace.js";
import { killMarked, newMark, removeTempDirs, replBinary, replEnv, tempDir } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";

const plain: RenderTheme = { fg: (_c, t) => t, bold: (t) => t };
const marks: string[] = [];
const workspaces: Workspace[] = [];

function reply(text: string): CreateMessageResult {
	return { model: "fake/model-1", role: "assistant", content: { type: "text", text }, stopReason: "endTurn" };
}

describe("agent frames over the real pi-repl", () => {
	afterEach(async () => {
		for (const ws of workspaces.splice(0)) await ws.stop();
		for (const mark of marks.splice(0)) killMarked(mark);
	});
	after(removeTempDirs);

	it("a spawned child's frames arrive running, with its last line, then completed, and draw under the call", async () => {
		const mark = newMark();
		marks.push(mark);
		const root = tempDir("frames");
		const cwd = join(root, "project");
		mkdirSync(cwd, { recursive: true });
		const env = { ...replEnv(mark, join(root, "home")), PI_REPL_BIN: replBinary() };
		// The child's model: each answer waits until the test lets it go.
		const replies = ["```python\nprint('step one of the count')\n```", "```python\nfinal_answer('kid done')\n```"];
		const gates: Array<() => void> = [];
		let asked = 0;
		const sampling: SamplingAnswerer = async () => {
			const index = asked++;
			await new Promise<void>((release) => gates.push(release));
			return reply(replies[index] ?? "no more");
		};
		const received: AgentFrame[][] = [];
		const store = new AgentFrames();
		const ws = new Workspace({
			resolveBinary: () => resolveBinary({ env, packageDir: root }),
			plan: {},
			cwd,
			env,
			sampling,
			onAgentFrames: (params) => {
				received.push(framesOf(params));
				store.update(framesOf(params));
			},
		});
		workspaces.push(ws);
		let requestId: string | number | undefined;
		const outcome = await ws.execute(
			{ code: "h = spawn_agent('Count to three.', name='kid', fork=False)\nprint(h.status)" },
			{ onRequestId: (id) => (requestId = id) },
		);
		assert.equal(outcome.kind, "result");
		const mapped = outcome.kind === "result" ? mapCallResult(outcome.result) : undefined;
		assert.match(contentText(mapped?.content ?? []), /running/);
		const cell = mapped?.details.cell;
		assert.equal(typeof cell, "number", JSON.stringify(outcome));
		assert.notEqual(requestId, undefined);

		const latest = () => store.forCall({ requestId }).find((f) => f.name === "kid");
		await waitUntil(() => latest()?.status === "running", 60_000, "a running frame of the child");
		const running = latest() as AgentFrame;
		assert.equal(running.cell, cell);
		assert.equal(running.call, requestId, "the frame names the call that started its cell");
		assert.equal(running.elapsed_ms ?? undefined, undefined);
		assert.match(agentFrameLines([running], 120, plain, Date.now())[0] ?? "", /^↳ ● kid {2}running \d/);

		// One step: the frame's last line follows the child's transcript.
		await waitUntil(() => gates.length === 1, 60_000, "the child's first model request");
		gates.shift()?.();
		await waitUntil(() => latest()?.steps === 1, 60_000, "a frame after the child's first step");
		assert.equal(latest()?.status, "running");
		assert.ok(latest()?.last_line, JSON.stringify(latest()));

		await waitUntil(() => gates.length === 1, 60_000, "the child's second model request");
		gates.shift()?.();
		await waitUntil(() => latest()?.status === "completed", 60_000, "a completed frame");
		const done = latest() as AgentFrame;
		assert.equal(typeof done.elapsed_ms, "number");
		const rows = store.forCall({ cell });
		assert.deepEqual(agentFrameLines(rows, 120, plain, Date.now()), ["↳ 1 sub-agent: 1 completed"]);
		assert.ok(received.length >= 3, `${received.length} notifications`);
		store.close();
	});
});
