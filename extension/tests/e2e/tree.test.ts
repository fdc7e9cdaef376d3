// End to end through the real `pi` in RPC mode: navigating the conversation tree brings the
// workspace back to the state the chosen message saw (issue 25, item 4). `/tree` is driven by a
// test extension's `/goto` command (tests/fixtures/tree-navigation.ts: pi's own `navigateTree`,
// which `/tree` calls); `/fork` by RPC's `fork` command.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, PACKAGE_DIR, removeTempDirs } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";
import { type ModelRecord, PiSandbox, RpcPi } from "../helpers/pi.js";

const TREE_NAVIGATION = join(PACKAGE_DIR, "tests", "fixtures", "tree-navigation.ts");

const running: RpcPi[] = [];
function start(box: PiSandbox, flags: string[] = []): RpcPi {
	const pi = new RpcPi(box, ["--repl", "-e", TREE_NAVIGATION, ...flags]);
	running.push(pi);
	return pi;
}

afterEach(async () => {
	for (const pi of running.splice(0)) {
		await pi.close(5_000).catch(() => undefined);
		killMarked(pi.mark);
	}
});
after(removeTempDirs);

function resultText(end: any): string {
	return (end?.result?.content ?? [])
		.filter((b: { type: string }) => b.type === "text")
		.map((b: { text: string }) => b.text)
		.join("\n");
}

function toolEnds(events: Record<string, any>[]): any[] {
	return events.filter((e) => e.type === "tool_execution_end");
}

function notifications(pi: RpcPi, from = 0): { message: string; notifyType: string }[] {
	return pi.events.slice(from).filter((e) => e.type === "extension_ui_request" && e.method === "notify") as never;
}

/** Runs `/goto <text>` and returns the notifications it caused (the extension's and its own). */
async function goto(pi: RpcPi, text: string): Promise<{ message: string; notifyType: string }[]> {
	const from = pi.events.length;
	const response = await pi.command({ type: "prompt", message: `/goto ${text}` });
	assert.notEqual(response.success, false, JSON.stringify(response));
	await pi.waitFor(
		(e, index) => index >= from && e.type === "extension_ui_request" && e.method === "notify" && /^goto: /.test(e.message),
		60_000,
		`/goto ${text} to finish`,
	);
	const told = notifications(pi, from);
	assert.ok(told.some((n) => n.message.startsWith("goto: done")), JSON.stringify(told));
	return told.filter((n) => !n.message.startsWith("goto: "));
}

/** Waits until the session's snapshot store keeps the state right after cell `cell` (a rewind's target). */
async function stateKept(box: PiSandbox, cell: number): Promise<void> {
	const kept = () => {
		const state = join(box.replHome, "state");
		if (!existsSync(state)) return false;
		return readdirSync(state).some((session) => {
			const states = join(state, session, "snapshot", "states");
			return existsSync(join(states, `${cell}.json`)) || existsSync(join(states, `${cell}.same`));
		});
	};
	await waitUntil(kept, 60_000, `the state after cell ${cell} to be kept`);
}

function serverOf(record: ModelRecord | undefined): { pid: number; argv: string[] } | undefined {
	return record?.children.find((c) => c.argv.includes("mcp"));
}

function argValue(argv: string[], flag: string): string | undefined {
	const index = argv.indexOf(flag);
	return index === -1 ? undefined : argv[index + 1];
}

describe("pi's conversation tree and the workspace", () => {
	it("/tree to an earlier message rewinds the workspace to the state that message saw, and back again", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "x = 1" } },
			{ say: "x is 1" },
			{ call: { code: "x = 2\nlater = 3" } },
			{ say: "x is 2" },
			{ say: "nothing to run" },
			{ call: { code: "print(x, 'later' in globals())" } },
			{ say: "seen on the new branch" },
			{ call: { code: "print(x, later)" } },
			{ say: "seen back on the first branch" },
		]);
		const pi = start(box);
		await pi.prompt("one");
		await stateKept(box, 1);
		await pi.prompt("two");
		await pi.prompt("end of two");

		// Back to before "two": the workspace returns to its state after cell 1.
		const rewound = await goto(pi, "two");
		assert.equal(rewound.length, 1, JSON.stringify(rewound));
		assert.equal(rewound[0]?.notifyType, "info");
		assert.match(rewound[0]?.message ?? "", /^pi-repl: Rewound the workspace to its state right after cell 1 /);
		assert.match(rewound[0]?.message ?? "", /Removed \(bound after cell 1\): later\./);
		assert.match(rewound[0]?.message ?? "", /Files, processes and anything outside the Python namespace were not rewound\./);
		const onNewBranch = toolEnds(await pi.prompt("three"));
		assert.equal(onNewBranch.length, 1);
		assert.equal(resultText(onNewBranch[0]), "1 False", "the later binding is gone and the changed value is back");

		// Back to the end of the first branch: its state after cell 2 returns.
		await stateKept(box, 2);
		const back = await goto(pi, "end of two");
		assert.equal(back.length, 1, JSON.stringify(back));
		assert.match(back[0]?.message ?? "", /^pi-repl: Rewound the workspace to its state right after cell 2 /);
		const onFirstBranch = toolEnds(await pi.prompt("four"));
		assert.equal(resultText(onFirstBranch[0]), "2 3");
		// The navigation's rewind is recorded on the branch it went to (a custom entry, not sent to the model).
		const sessionFile = (await pi.command({ type: "get_state" })).data.sessionFile as string;
		const rewinds = readFileSync(sessionFile, "utf8")
			.split("\n")
			.filter((line) => line.includes('"customType":"pi-repl-rewind"'))
			.map((line) => JSON.parse(line).data);
		assert.deepEqual(
			rewinds.map((r) => r.same),
			[1, 2],
		);

		// Before the first cell there is no state to return to: the human is told, nothing changes.
		const root = await goto(pi, "one");
		assert.equal(root.length, 1, JSON.stringify(root));
		assert.equal(root[0]?.notifyType, "warning");
		assert.match(root[0]?.message ?? "", /^pi-repl: the workspace keeps its state: no cell had run before the chosen message/);
		// Each navigation asked the model nothing: the script's steps were used by the prompts only.
		assert.equal(box.records().length, 9);
	});

	it("/fork to an earlier message starts the new conversation from the state that message saw", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "x = 1" } },
			{ say: "x is 1" },
			{ call: { code: "x = 2\nlater = 3" } },
			{ say: "x is 2" },
			{ call: { code: "print(x, 'later' in globals())" } },
			{ say: "seen in the fork" },
		]);
		const pi = start(box);
		await pi.prompt("one");
		await stateKept(box, 1);
		await pi.prompt("two");
		const parentServer = serverOf(box.records()[0]);
		assert.ok(parentServer);
		const forkable = (await pi.command({ type: "get_fork_messages" })).data.messages as { entryId: string; text: string }[];
		const two = forkable.find((m) => m.text === "two");
		assert.ok(two, JSON.stringify(forkable));
		const forked = await pi.command({ type: "fork", entryId: two.entryId });
		assert.equal(forked.data?.cancelled, false, JSON.stringify(forked));
		const ends = toolEnds(await pi.prompt("in the fork"));
		assert.equal(ends[0].isError, false, resultText(ends[0]));
		assert.match(resultText(ends[0]), /1 False$/, "the fork starts from the state after cell 1, not the parent's last");
		const childServer = serverOf(box.records()[4]);
		assert.ok(childServer);
		assert.equal(argValue(childServer.argv, "--fork-from"), argValue(parentServer.argv, "--session"));
		assert.equal(argValue(childServer.argv, "--fork-at"), "1");
	});

	it("a rewind pi-repl refuses (the state is no longer kept) changes nothing, and the human gets pi-repl's error and hint", async () => {
		const box = new PiSandbox();
		box.script([{ call: { code: "x = 1" } }, { say: "one" }, { call: { code: "x = 2" } }, { say: "two" }, { call: { code: "print(x)" } }, { say: "three" }]);
		const pi = start(box);
		await pi.prompt("one");
		await stateKept(box, 1);
		await pi.prompt("two");
		await stateKept(box, 2);
		// The state after cell 1 is let go, as when it falls out of the kept window.
		for (const session of readdirSync(join(box.replHome, "state"))) {
			const kept = join(box.replHome, "state", session, "snapshot", "states", "1.json");
			if (existsSync(kept)) unlinkSync(kept);
		}
		const told = await goto(pi, "two");
		assert.equal(told.length, 1, JSON.stringify(told));
		assert.equal(told[0]?.notifyType, "warning");
		assert.match(told[0]?.message ?? "", /^pi-repl: the workspace was not rewound to the state the chosen message saw \(after cell 1\):\n/);
		assert.match(told[0]?.message ?? "", /error: [^]*\nhint: [^]*2/);
		const ends = toolEnds(await pi.prompt("three"));
		assert.equal(resultText(ends[0]), "2", "nothing changed");
	});

	it("an ephemeral workspace (pi --no-session) is not rewound, and the human is told so", async () => {
		const box = new PiSandbox();
		box.script([{ call: { code: "x = 1" } }, { say: "one" }, { call: { code: "x = 2" } }, { say: "two" }, { call: { code: "print(x)" } }, { say: "three" }]);
		const pi = start(box, ["--no-session"]);
		await pi.prompt("one");
		await pi.prompt("two");
		const told = await goto(pi, "two");
		assert.equal(told.length, 1, JSON.stringify(told));
		assert.equal(told[0]?.notifyType, "warning");
		assert.match(told[0]?.message ?? "", /^pi-repl: the workspace was not rewound to the chosen message: it is ephemeral \(pi --no-session\)/);
		const ends = toolEnds(await pi.prompt("three"));
		assert.equal(resultText(ends[0]), "2", "it keeps its last state, as the human was told");
	});
});
