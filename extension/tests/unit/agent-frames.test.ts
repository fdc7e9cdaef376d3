// The sub-agent frames under a call: what they say at 40 and 120 columns, folding into a count
// once settled, never wider than the width; the store's matching of frames to a call and its
// ticking only while a child runs.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { visibleWidth } from "@mariozechner/pi-tui";
import { type AgentFrame, AgentFrames, agentFrameLines, FRAME_LINES, framesOf } from "../../src/agent-frames.js";
import type { RenderTheme } from "../../src/render.js";

const plain: RenderTheme = { fg: (_c, t) => t, bold: (t) => t };
const colours: RenderTheme = { fg: (_c, t) => `\x1b[33m${t}\x1b[39m`, bold: (t) => `\x1b[1m${t}\x1b[22m` };
/** The lines without styling (pi-tui's cut adds a reset). */
const drawn = (frames: AgentFrame[], width: number) => agentFrameLines(frames, width, plain, NOW).map((l) => l.replace(/\x1b\[[0-9;]*m/g, ""));

const NOW = Date.parse("2026-11-30T20:00:30.000Z");

function frame(over: Partial<AgentFrame>): AgentFrame {
	return { id: "agent-1", cell: 3, call: 7, status: "running", started: "2026-11-30T20:00:18.000Z", ...over };
}

const slow = frame({ id: "agent-1", name: "slow", last_line: "step 3: reading requests_df and grouping by endpoint" });
const errors = frame({ id: "agent-2", name: "errors", started: "2026-11-30T20:00:25.900Z" });

describe("agent frames", () => {
	it("draws each running child at 120 columns: name, status, elapsed, last line", () => {
		assert.deepEqual(agentFrameLines([slow, errors], 120, plain, NOW), [
			"↳ ● slow  running 12.0s · step 3: reading requests_df and grouping by endpoint",
			"↳ ● errors  running 4.1s",
		]);
	});

	it("cuts each line to 40 columns", () => {
		assert.deepEqual(drawn([slow, errors], 40), ["↳ ● slow  running 12.0s · step 3: readi…", "↳ ● errors  running 4.1s"]);
		for (const line of agentFrameLines([slow, errors], 40, colours, NOW)) assert.ok(visibleWidth(line) <= 40, line);
	});

	it("counts the settled ones while others run, and folds into one count line once all settled", () => {
		const done = frame({ id: "agent-3", name: "done", status: "completed", elapsed_ms: 900 });
		assert.deepEqual(agentFrameLines([slow, done], 120, plain, NOW), ["↳ ● slow  running 12.0s · step 3: reading requests_df and grouping by endpoint", "↳ … 1 settled: 1 completed"]);
		const failed = frame({ id: "agent-4", status: "errored" });
		const lost = frame({ id: "agent-5", status: "lost" });
		assert.deepEqual(drawn([done, failed, lost, { ...slow, status: "completed" }], 40), [
			"↳ 4 sub-agents: 2 completed, 1 errored,…",
		]);
		assert.deepEqual(agentFrameLines([done], 120, plain, NOW), ["↳ 1 sub-agent: 1 completed"]);
		assert.deepEqual(agentFrameLines([], 120, plain, NOW), []);
	});

	it("shows at most FRAME_LINES running children and counts the rest", () => {
		const many = Array.from({ length: FRAME_LINES + 2 }, (_, i) => frame({ id: `agent-${i + 1}` }));
		const lines = agentFrameLines(many, 120, plain, NOW);
		assert.equal(lines.length, FRAME_LINES + 1);
		assert.equal(lines.at(-1), "↳ … 2 more running");
	});

	it("never draws a line wider than the width, nor a child's escapes", () => {
		const nasty = frame({ name: "\x1b[2Jwipe", last_line: "a\tb\r\x1b[31mred\x1b[0m " + "y".repeat(300) });
		for (let width = 1; width <= 160; width++) {
			for (const line of agentFrameLines([nasty, errors], width, colours, NOW)) assert.ok(visibleWidth(line) <= width, `${width}: ${line}`);
		}
		assert.doesNotMatch(drawn([nasty], 120)[0] ?? "", /\x1b/);
	});

	it("matches frames to a call by its request id or its cell, and ticks only while a child runs", () => {
		const store = new AgentFrames();
		let told = 0;
		store.subscribe(() => told++);
		store.update(framesOf({ agents: [slow, frame({ id: "agent-9", cell: 4, call: 8 }), { junk: true }] }));
		assert.equal(told, 1);
		assert.deepEqual(
			store.forCall({ requestId: 7 }).map((f) => f.id),
			["agent-1"],
		);
		assert.deepEqual(
			store.forCall({ cell: 4 }).map((f) => f.id),
			["agent-9"],
		);
		assert.equal(store.running(), 2);
		store.update([{ ...slow, status: "completed" }, frame({ id: "agent-9", cell: 4, status: "cancelled" })]);
		assert.equal(store.running(), 0);
		assert.equal(store.forCall({ requestId: 7 })[0]?.status, "completed");
		store.close();
	});
});
